"""Reproducibility (issue item 5): the same seed twice gives identical metrics at the default thread setting."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rlvr_gym_agents.config import ModelConfig, load_config
from rlvr_gym_agents.train import train

from rlvr_gym import TaskSuite
from rlvr_gym.testing.toy import echo_tasks


@pytest.fixture()
def restore_torch_threads() -> Iterator[None]:
    """The run sets torch's process-wide thread count; later tests get back what they had (the tiny model
    fixture sets 1)."""
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    """metrics.jsonl without its wall-clock keys (``*_s``: step_s, elapsed_s, process_cpu_s, ...; ``*_per_s``)."""
    lines = (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [{key: value for key, value in json.loads(line).items() if not key.endswith(("_s", "_per_s"))}
            for line in lines]


def _overrides(tiny_model_dir: Path, tmp_path: Path, run: str) -> list[str]:
    """A short Echo-v0 run from the tiny model: evaluation, 2 RL steps of 4 tasks x 8 episodes, evaluation;
    model.num_threads left at its default."""
    TaskSuite("train", echo_tasks(8, "train")).save(tmp_path / "train.jsonl")
    TaskSuite("test", echo_tasks(4, "test")).save(tmp_path / "test.jsonl")
    return [f"model.path_or_id={tiny_model_dir}", "env.env_id=testing/Echo-v0",
            f"env.train_suite={tmp_path / 'train.jsonl'}", f"env.test_suite={tmp_path / 'test.jsonl'}",
            "sft.enabled=false", "rollout.max_new_tokens=4", "train.tasks_per_step=4", "train.group_size=8",
            "algorithm.drop_zero_variance_groups=false", "train.num_steps=2", "train.checkpoint_every=100",
            "eval.num_tasks=4", "eval.k=2", f"output.dir={tmp_path / run}", "output.progress=false",
            "output.tensorboard=false", "seed=5"]


def test_the_same_seed_twice_gives_identical_metrics_with_the_default_threads(
        tiny_model_dir: Path, tmp_path: Path, restore_torch_threads: None) -> None:
    default_threads = ModelConfig().num_threads
    assert default_threads == 2  # the recipes' default: the case the issue saw differ
    runs = []
    for run in ("a", "b"):
        config = load_config(None, _overrides(tiny_model_dir, tmp_path, run))
        assert config.model.num_threads == default_threads
        train(config)
        assert torch.get_num_threads() == default_threads  # the run trained with 2 threads
        runs.append(_records(tmp_path / run))
    a, b = runs
    assert [r["phase"] for r in a] == ["eval", "rl", "rl", "eval"]
    for x, y in zip(a, b, strict=True):
        assert x == y, {key: (x[key], y.get(key)) for key in x if x[key] != y.get(key)}
