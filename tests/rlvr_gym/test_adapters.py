"""The adapters run our envs in their hosts: token-level episodes, SkyRL-gym's registry, verl's agent-loop
interface, and TRL's GRPOTrainer (slow tier: two training steps with a tiny model)."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

import rlvr_gym
from rlvr_gym.adapters.tokens import observation_ids, run_token_episode

transformers = pytest.importorskip("transformers")
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module("trl_grpo_textworld").tiny_model_and_tokenizer()
    finally:
        sys.path.remove(str(EXAMPLES))


def _scripted(tokenizer: Any, actions: list[str]) -> Any:
    """A ``generate`` that 'samples' the given actions (each followed by EOS), with log-prob -1 per id."""
    queue = list(actions)

    def generate(context_ids: list[int]) -> tuple[list[int], list[float]]:
        ids = tokenizer.encode(queue.pop(0), add_special_tokens=False) + [tokenizer.eos_token_id]
        return ids, [-1.0] * len(ids)

    return generate


def test_token_episode_keeps_generated_ids_and_masks_observations(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    task = rlvr_gym.load_suite("textworld/starter-test")[0]
    episode = run_token_episode(task, _scripted(tokenizer, list(task.gold or [])), tokenizer)
    assert episode.reward == 1.0 and episode.success and episode.num_turns == len(task.gold or [])
    assert episode.actions == task.gold
    assert len(episode.response_ids) == len(episode.response_mask) == len(episode.response_logprobs)
    generated = [i for i, m in zip(episode.response_ids, episode.response_mask, strict=True) if m]
    expected = [i for a in task.gold or [] for i in tokenizer.encode(a, add_special_tokens=False)
                + [tokenizer.eos_token_id]]
    assert generated == expected  # token-in/token-out: exactly what was generated
    first_obs = observation_ids(tokenizer, "You arrive at the microwave 1.")
    assert tokenizer.decode(first_obs).startswith("<|user|>") and first_obs[-1] == tokenizer.convert_tokens_to_ids(
        "<|assistant|>")
    assert all(lp == 0.0 for lp, m in zip(episode.response_logprobs, episode.response_mask, strict=True) if not m)


def test_a_crashing_env_ends_the_token_episode_with_a_typed_failure(tiny: tuple[Any, Any]) -> None:
    """An env that raises mid-episode must not kill the host trainer's rollout: the episode ends with env_crash."""
    from rlvr_gym.testing.toy import EchoEnv, echo_tasks

    class Crashing(EchoEnv):
        def _step(self, action: str) -> Any:
            raise RuntimeError("the simulator died")

    _, tokenizer = tiny
    episode = run_token_episode(echo_tasks(1)[0], _scripted(tokenizer, ["say apple"]), tokenizer,
                                env_factory=lambda env_id: Crashing())
    assert episode.num_turns == 1 and episode.reward == 0.0 and not episode.success
    assert [f["kind"] for f in episode.failures] == ["env_crash"] and "simulator died" in episode.failures[0]["message"]


def test_skyrl_env_runs_an_episode_to_reward_one() -> None:
    skyrl_gym = pytest.importorskip("skyrl_gym")
    from rlvr_gym.adapters.skyrl import register_skyrl_env, skyrl_dataset

    env_class = register_skyrl_env()
    assert register_skyrl_env() == env_class  # idempotent
    task = rlvr_gym.load_suite("tools/math_test")[0]
    row = skyrl_dataset([task])[0]
    env = skyrl_gym.make(env_class, env_config={"max_turns": 4}, extras=row)
    messages, metadata = env.init(row["prompt"])
    assert messages[0]["role"] == "user" and metadata["tools"] and env.max_turns == 4
    outputs = [env.step(action) for action in task.gold or []]
    env.close()
    assert outputs[-1]["done"] and sum(o["reward"] for o in outputs) == 1.0 and env.get_metrics()["success"] == 1.0
    assert all(o["observations"] and not o["done"] for o in outputs[:-1])


def test_skyrl_example_runs_textworld(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("skyrl_gym")
    sys.path.insert(0, str(EXAMPLES))
    try:
        results = importlib.import_module("skyrl_textworld").main(["--num-tasks", "2"])
    finally:
        sys.path.remove(str(EXAMPLES))
    assert [r["reward"] for r in results] == [1.0, 1.0]


@dataclasses.dataclass
class _TokenOutput:  # verl.workers.rollout.replica.TokenOutput's fields read by agent loops (verl 0.9.1)
    token_ids: list[int]
    log_probs: list[float] | None = None


class _ScriptedServer:
    """verl's server-manager interface: ``await generate(request_id=, prompt_ids=, sampling_params=)``."""

    def __init__(self, tokenizer: Any, actions: list[str]) -> None:
        self.generate_ids = _scripted(tokenizer, actions)
        self.calls: list[dict[str, Any]] = []

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any]) -> Any:
        self.calls.append({"request_id": request_id, "prompt_len": len(prompt_ids), **sampling_params})
        ids, logprobs = self.generate_ids(prompt_ids)
        return _TokenOutput(ids, logprobs)


def test_verl_episode_returns_agent_loop_output_fields(tiny: tuple[Any, Any]) -> None:
    from rlvr_gym.adapters.verl import run_verl_episode, task_from_row, verl_dataset

    _, tokenizer = tiny
    task = rlvr_gym.load_suite("textworld/starter-test")[1]
    row = verl_dataset([task])[0]
    assert row["agent_name"] == "rlvr_gym" and task_from_row(row) == task
    server = _ScriptedServer(tokenizer, list(task.gold or []))
    out = asyncio.run(run_verl_episode(server, tokenizer, task_from_row(row), {"temperature": 1.0},
                                       max_response_tokens=400))
    assert out["reward_score"] == 1.0 and out["extra_fields"]["success"]
    assert len(out["response_ids"]) == len(out["response_mask"]) == len(out["response_logprobs"]) <= 400
    assert out["num_turns"] == 2 * len(task.gold or []) and len({c["request_id"] for c in server.calls}) == 1
    assert all(c["max_tokens"] <= 400 for c in server.calls)
    short = asyncio.run(run_verl_episode(_ScriptedServer(tokenizer, list(task.gold or [])), tokenizer, task, {},
                                         max_response_tokens=20))
    assert len(short["response_ids"]) <= 20 and short["reward_score"] == 0.0  # cut by the token budget


def test_verl_example_samples_from_a_tiny_model(capsys: pytest.CaptureFixture[str]) -> None:
    sys.path.insert(0, str(EXAMPLES))
    try:
        outputs = importlib.import_module("verl_agent_loop").main(["--num-tasks", "1", "--response-length", "60"])
    finally:
        sys.path.remove(str(EXAMPLES))
    assert len(outputs[0]["response_ids"]) <= 60 and 0 < sum(outputs[0]["response_mask"]) < 60


@pytest.mark.slow
def test_trl_grpo_trains_two_steps_on_the_text_world(tmp_path: Path) -> None:
    pytest.importorskip("trl")
    sys.path.insert(0, str(EXAMPLES))
    try:
        summary = importlib.import_module("trl_grpo_textworld").main(["--steps", "2", "--num-tasks", "4", "--out",
                                                                      str(tmp_path)])
    finally:
        sys.path.remove(str(EXAMPLES))
    assert summary["steps"] == 2 and summary["last_batch_episodes"] == 4
    logged = [entry for entry in summary["log_history"] if "rewards/env_reward/mean" in entry]
    assert len(logged) == 2 and all(entry["completions/mean_length"] > 0 for entry in logged)
