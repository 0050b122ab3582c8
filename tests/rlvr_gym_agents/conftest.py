"""Fixtures of the learning-side tests: a tiny random-init policy built from testing/Echo-v0 text."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from rlvr_gym import TaskSuite
from rlvr_gym.testing.toy import echo_tasks

ECHO_TEXT = [
    "Say the word: apple bread candle dish egg fork glass hat",
    "say apple", "say bread", "say candle", "say dish", "say egg", "say fork", "say glass", "say hat",
    "Correct.", "Wrong.", "Invalid action 'x': actions look like 'say <word>'.",
]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny model directory (word-level tokenizer on Echo text, random ~1M-parameter Qwen2)."""
    from rlvr_gym_agents.warmstart.tiny import save_tiny_policy

    torch.set_num_threads(1)
    return save_tiny_policy(ECHO_TEXT, tmp_path_factory.mktemp("tiny") / "model", seed=0, max_context_tokens=256,
                            tokenizer="word")


@pytest.fixture()
def tiny_policy(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    """A fresh TransformersPolicy over the tiny model (sampling seed 0)."""
    from rlvr_gym_agents.policy import TransformersPolicy

    return TransformersPolicy.from_pretrained(str(tiny_model_dir), seed=0)


@pytest.fixture()
def echo_tree_run():  # type: ignore[no-untyped-def]
    """``f(tiny_model_dir, tmp_path, run, num_steps, *extra_overrides)``: the overrides of a short tree-rollout
    training run on testing/Echo-v0 with the tiny model (no warm start, credit treerl, output in tmp_path/run)."""
    return _echo_tree_run


def _echo_tree_run(tiny_model_dir: Path, tmp_path: Path, run: str, num_steps: int, *extra: str) -> list[str]:
    TaskSuite("train", echo_tasks(8, "train")).save(tmp_path / "train.jsonl")
    TaskSuite("test", echo_tasks(4, "test")).save(tmp_path / "test.jsonl")
    return [f"model.path_or_id={tiny_model_dir}", "env.env_id=testing/Echo-v0",
            f"env.train_suite={tmp_path / 'train.jsonl'}", f"env.test_suite={tmp_path / 'test.jsonl'}",
            "sft.enabled=false", "rollout.max_new_tokens=4", "rollout.sampler=tree", "algorithm.credit=treerl",
            "rollout.tree.branch.alpha=0.5", "train.tasks_per_step=2", "train.group_size=4",
            "algorithm.drop_zero_variance_groups=false", f"train.num_steps={num_steps}", "train.checkpoint_every=1",
            "eval.num_tasks=4", "eval.k=1", "eval.greedy=false", f"output.dir={tmp_path / run}",
            "output.progress=false", "output.tensorboard=false", "model.num_threads=1", "seed=3", *extra]

sys.path.insert(0, str(Path(__file__).resolve().parent))  # agent_helpers
