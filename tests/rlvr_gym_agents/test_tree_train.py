"""Tree recipes: config splitting, the trainer seam, and (slow) a short end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from rlvr_gym_agents import trainer
from rlvr_gym_agents.chat import ChatFormat
from rlvr_gym_agents.config import ConfigError
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.rollout import run_episodes
from rlvr_gym_agents.tiny import build_model, build_tokenizer
from rlvr_gym_agents.tree_sampler import TreeSamplerConfig
from rlvr_gym_agents.tree_train import load_tree_recipe, train_tree, tree_episodes, tree_rollouts

from rlvr_gym.testing.toy import WORDS, EchoEnv, echo_tasks

RECIPE = Path(__file__).resolve().parents[2] / "agents" / "recipes" / "textworld-tree.yaml"


def test_recipe_splits_into_trainer_and_tree_configs() -> None:
    config, tree = load_tree_recipe(RECIPE, ["seed=3", "tree.branch.alpha=0.35", "train.group_size=6"])
    assert config.seed == 3 and config.output.dir.endswith("seed3")
    assert tree.num_leaves == 6 == config.train.group_size
    assert tree.branch.alpha == 0.35 and tree.global_samples == 2 and tree.fallback == "entropy"


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("tree.bogus=1", "unknown tree keys"),
        ("tree.branch.beta=1", "branch.beta"),
        ("tree.num_leaves=3", "must equal train.group_size"),
        ("tree.global_samples=0", "global_samples"),
        ("train.bogus=1", "unknown config key"),
    ],
)
def test_bad_tree_recipe_values_raise(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_tree_recipe(RECIPE, [override])


@pytest.fixture
def one_thread() -> Any:
    """Tiny matmuls are much faster on one thread on a shared 2-core machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_tree_episodes_is_a_drop_in_for_run_episodes(tmp_path: Path, one_thread: Any) -> None:
    tokenizer = build_tokenizer(
        [f"Say the word: {w}" for w in WORDS]
        + [f"say {w}" for w in WORDS]
        + ["Correct.", "Wrong.", "Invalid action 'x': actions look like 'say <word>'."]
    )
    model = build_model(
        len(tokenizer),
        hidden_size=32,
        num_layers=2,
        num_heads=2,
        intermediate_size=64,
        max_context_tokens=256,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    policy, chat = TransformersPolicy(model, tokenizer), ChatFormat(tokenizer)
    tasks = echo_tasks(2)
    batch = [task for task in tasks for _ in range(4)]
    run = tree_episodes(TreeSamplerConfig(num_leaves=4), tmp_path / "tree_metrics.jsonl")
    factory: Any = lambda env_id, **kw: EchoEnv(**kw)
    trajectories = run(policy, chat, batch, SamplingParams(max_new_tokens=4), env_factory=factory)
    assert [t.task_id for t in trajectories] == [t.id for t in batch]
    assert [t.group for t in trajectories] == [0] * 4 + [1] * 4
    logged = [json.loads(line) for line in (tmp_path / "tree_metrics.jsonl").read_text().splitlines()]
    assert logged[0]["leaves_per_task"] == [4, 4]
    with pytest.raises(ValueError, match="repeated num_leaves"):
        run(policy, chat, batch[:6], SamplingParams(max_new_tokens=4), env_factory=factory)


def test_tree_rollouts_restores_the_trainer() -> None:
    with tree_rollouts(TreeSamplerConfig(num_leaves=2)):
        assert trainer.run_episodes is not run_episodes
    assert trainer.run_episodes is run_episodes


@pytest.mark.slow
def test_short_tree_training_run(tmp_path: Path) -> None:
    overrides = [
        f"output.dir={tmp_path / 'run'}",
        "train.num_steps=2",
        "train.tasks_per_step=2",
        "train.group_size=4",
        "sft.num_demos=40",
        "sft.max_time_s=20",
        "model.corpus_episodes=40",
        "eval.num_tasks=4",
        "eval.k=1",
        "eval.greedy=false",
        "train.max_time_s=120",
    ]
    summary = train_tree(RECIPE, overrides)
    assert "after" in summary
    steps = [json.loads(line) for line in (tmp_path / "run" / "tree_metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 2 and all(s["leaves_per_task"] == [4, 4] for s in steps)
