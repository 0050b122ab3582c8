"""``rlvr-gym eval --agent <checkpoint>``: the training run's config supplies the defaults; flags override them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from rlvr_gym_agents import cli as agents_cli
from rlvr_gym_agents.config import load_config, to_dict
from rlvr_gym_agents.evaluate import PolicyAgent, load_agent, run_config_of

import rlvr_gym
from rlvr_gym import TaskSuite
from rlvr_gym.cli import main
from rlvr_gym.testing.toy import echo_tasks


def _run_dir(tiny_model_dir: Path, tmp_path: Path) -> Path:
    """A run directory as the trainer leaves it: config.json (the run's) and checkpoint/ (a model directory)."""
    run = tmp_path / "run"
    shutil.copytree(tiny_model_dir, run / "checkpoint")
    config = load_config(None, ["env.system_prompt=Answer with one command.", "rollout.max_new_tokens=3",
                                "env.max_turns=2", "model.device=cuda", "model.dtype=bfloat16",
                                "model.max_context_tokens=64", "env.env_id=tools/MultiHopQA-v0",
                                "env.kwargs.describe_tools_in_prompt=false"])
    (run / "config.json").write_text(json.dumps(to_dict(config)), encoding="utf-8")
    return run


def test_a_checkpoint_is_evaluated_as_trained(tiny_model_dir: Path, tmp_path: Path) -> None:
    run = _run_dir(tiny_model_dir, tmp_path)
    assert run_config_of(str(run / "checkpoint"))["rollout"]["max_new_tokens"] == 3
    assert run_config_of(str(tiny_model_dir)) == {}  # a plain model folder: no run around it
    agent = load_agent(str(run / "checkpoint"))
    assert agent.chat.system_prompt == "Answer with one command."
    assert agent.sampling.max_new_tokens == 3 and agent.max_turns == 2
    assert agent.env_kwargs == {"describe_tools_in_prompt": False}  # the run's env.kwargs make its envs
    built: list[tuple[str, dict[str, Any]]] = []

    def spy(env_id: str, **kwargs: Any) -> Any:
        built.append((env_id, kwargs))
        return rlvr_gym.make(env_id, **kwargs)

    from rlvr_gym_tools.suites import generate_easy_tasks
    tools_task = generate_easy_tasks("tools/MultiHopQA-v0", "test", 1)[0]
    records = agent.run_episodes([(tools_task, 0), (echo_tasks(1)[0], 0)], spy)
    assert [(env_id, kwargs.get("describe_tools_in_prompt")) for env_id, kwargs in built] == [
        ("tools/MultiHopQA-v0", False), ("testing/Echo-v0", None)]  # the run's env only
    assert [r.failure for r in records if r.failure == "env_crash"] == []  # no env refused its arguments
    assert agent.policy.max_context_tokens == 64  # type: ignore[attr-defined]
    policy = agent.policy
    assert isinstance(agent, PolicyAgent) and next(policy.model.parameters()).dtype == torch.bfloat16  # type: ignore[attr-defined]
    expected = "cuda" if torch.cuda.is_available() else "cpu"  # the run's CUDA falls back to the CPU without one
    assert policy.device.type == expected  # type: ignore[attr-defined]
    explicit = load_agent(str(run / "checkpoint"), system_prompt="", max_new_tokens=5, device="cpu", dtype="float32")
    assert explicit.chat.system_prompt is None and explicit.sampling.max_new_tokens == 5
    assert next(explicit.policy.model.parameters()).dtype == torch.float32  # type: ignore[attr-defined]
    plain = load_agent(str(tiny_model_dir))
    assert plain.sampling.max_new_tokens == 32 and plain.chat.system_prompt is None and plain.max_turns is None
    assert plain.env_kwargs == {}


def test_cli_eval_flags_reach_the_model_agent(tiny_model_dir: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    run = _run_dir(tiny_model_dir, tmp_path)
    suite_dir = tmp_path / "tasks" / "echo"
    suite_dir.mkdir(parents=True)
    TaskSuite("echo/small", echo_tasks(2)).save(suite_dir / "small.jsonl")
    monkeypatch.setenv("RLVR_GYM_TASKS", str(tmp_path / "tasks"))
    built: list[PolicyAgent] = []

    def spy(spec: str, **kwargs: Any) -> PolicyAgent:
        built.append(load_agent(spec, **kwargs))
        return built[-1]

    monkeypatch.setattr(agents_cli, "load_agent", spy)
    status = main(["eval", "--agent", str(run / "checkpoint"), "--suite", "echo/small", "--out", str(tmp_path / "r"),
                   "--system-prompt", "Say it.", "--max-new-tokens", "4", "--device", "cpu", "--dtype", "float32",
                   "--seed", "7"])
    assert status == 0 and (tmp_path / "r" / "report.json").is_file()
    agent = built[0]
    assert agent.chat.system_prompt == "Say it." and agent.sampling.max_new_tokens == 4
    assert agent.max_turns == 2  # not a flag: from the run's config
    assert next(agent.policy.model.parameters()).dtype == torch.float32  # type: ignore[attr-defined]
