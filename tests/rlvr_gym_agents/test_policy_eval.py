"""Policy evaluation: records mean what the core harness means; the policy-backed BatchAgent."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlvr_gym_agents.cli import load_agent
from rlvr_gym_agents.evaluate import PolicyAgent, evaluate_policy
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat

import rlvr_gym
from rlvr_gym.evaluation import EpisodeAgent, evaluate
from rlvr_gym.testing.toy import echo_tasks


def test_the_harness_runs_a_policy_agent_through_the_episode_runner(tiny_model_dir: Path) -> None:
    """``rlvr-gym eval``'s model agent and the trainer's evaluation run the same episodes (greedy: identical)."""
    tasks = echo_tasks(6)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=4)
    policy = TransformersPolicy.from_pretrained(str(tiny_model_dir))
    chat = ChatFormat(policy.tokenizer)
    ours, records = evaluate_policy(policy, chat, tasks, 2, sampling)
    agent = PolicyAgent(policy, chat, sampling)
    assert isinstance(agent, EpisodeAgent)
    harness = evaluate(agent, tasks, k=2, progress=False, by=("env_id",))
    (env_id,) = {task.env_id for task in tasks}  # `by` splits an episode agent's records too (rlvr-gym eval --by)
    assert harness.metrics["by"]["env_id"][env_id]["pass@1"] == harness.metrics["pass@1"]
    assert [r.actions for r in records] == [r.actions for r in harness.records]
    assert [(r.success, r.turns, r.truncated, r.failure) for r in records] == \
        [(r.success, r.turns, r.truncated, r.failure) for r in harness.records]
    for key in ("pass@1", "pass@2", "mean_reward", "mean_turns", "truncation_rate", "episodes_ended_by"):
        assert ours[key] == harness.metrics[key], key
    for record, task in zip(records, [t for t in tasks for _ in range(2)], strict=True):  # the transcript
        assert record.observations[0] == f"Say the word: {task.data['target']}"
        assert len(record.observations) == record.turns + 1 and len(record.step_rewards) == record.turns
        assert record.observations[-1] in ("Correct.", "Wrong.") or record.observations[-1].startswith("Invalid action")


def test_cli_eval_ends_episodes_that_outgrow_the_model_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 48-token model with 32 new tokens per turn fits one echo turn, never a second: every episode that does not
    succeed at once ends as truncated with ``context_overflow`` in the report ``rlvr-gym eval`` writes."""
    import json

    from conftest import ECHO_TEXT  # type: ignore[import-not-found]
    from rlvr_gym_agents.warmstart.tiny import save_tiny_policy

    from rlvr_gym import TaskSuite
    from rlvr_gym.cli import main

    model_dir = save_tiny_policy(ECHO_TEXT, tmp_path / "model", seed=0, max_context_tokens=48, tokenizer="word")
    suite_dir = tmp_path / "tasks" / "echo"
    suite_dir.mkdir(parents=True)
    TaskSuite("echo/long", echo_tasks(6)).save(suite_dir / "long.jsonl")
    monkeypatch.setenv("RLVR_GYM_TASKS", str(tmp_path / "tasks"))
    out = tmp_path / "report"
    status = main(["eval", "--agent", str(model_dir), "--suite", "echo/long", "-k", "1", "--out", str(out),
                   "--temperature", "1.0"])
    assert status == 0
    report = json.loads((out / "report.json").read_text())
    overflowed = [r for r in report["records"] if r["failure"] == "context_overflow"]
    assert overflowed and all(r["success"] for r in report["records"] if r not in overflowed)
    for record in overflowed:
        overflow = record["failures"][-1]["details"]
        assert record["truncated"] and record["turns"] == 1
        assert overflow["max_context_tokens"] == 48 and overflow["context_tokens"] + 32 > 48


def test_load_agent_from_a_model_directory(tiny_model_dir: Path, tmp_path: Path) -> None:
    agent = load_agent(str(tiny_model_dir), temperature=0.0, max_new_tokens=3)
    records = agent.run_episodes([(task, 0) for task in echo_tasks(2)], rlvr_gym.make)
    assert len(records) == 2 and all(r.turns >= 1 for r in records)
    with pytest.raises(FileNotFoundError, match="missing_model"):
        load_agent(str(tmp_path / "missing_model"))


def test_seeded_sampling_draws_the_same_numbers_and_leaves_the_policy_stream_as_it_was(
        tiny_policy: TransformersPolicy) -> None:
    import torch
    from rlvr_gym_agents.evaluate import seeded_sampling

    def draw() -> list[float]:
        return torch.rand(4, generator=tiny_policy.generator).tolist()

    untouched = torch.Generator().manual_seed(0)  # the fixture's policy samples from seed 0
    with seeded_sampling(tiny_policy, 7):
        first = draw()
    draw()
    with seeded_sampling(tiny_policy, 7):
        second = draw()
    assert first == second == torch.rand(4, generator=torch.Generator().manual_seed(7)).tolist()
    torch.rand(4, generator=untouched)  # the policy drew once outside the blocks
    assert draw() == torch.rand(4, generator=untouched).tolist()
    with seeded_sampling(tiny_policy, None):  # off: the stream goes on
        assert draw() == torch.rand(4, generator=untouched).tolist()
