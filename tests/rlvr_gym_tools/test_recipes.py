"""The tool-use recipes load, point at real suites, and their warm-start experts succeed."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from rlvr_gym import load_suite, spec

config_module = pytest.importorskip("rlvr_gym_agents.config")
sft = pytest.importorskip("rlvr_gym_agents.warmstart.demonstrations")

RECIPES = Path(__file__).resolve().parents[2] / "agents" / "recipes"


def _load(name: str) -> object:
    """The trainer config of a recipe (tree recipes select ``rollout.sampler: tree``)."""
    config = config_module.load_config(RECIPES / name)
    assert config.rollout.sampler == ("tree" if name.endswith("-tree.yaml") else "flat")
    return config


@pytest.mark.parametrize("name", ["tools-tree.yaml", "tools-tiny.yaml", "qwen2.5-0.5b-tools.yaml"])
def test_recipe_loads_and_its_suites_exist(name: str) -> None:
    config: Any = _load(name)
    assert spec(config.env.env_id).family == "tools"
    for suite in (config.env.train_suite, config.env.test_suite):
        assert len(load_suite(suite)) >= 100


@pytest.mark.parametrize("name", ["tools-tree.yaml", "tools-tiny.yaml", "qwen2.5-0.5b-tools.yaml"])
def test_recipe_expert_demonstrations_succeed(name: str) -> None:
    config: Any = _load(name)
    expert = sft.load_expert(config.sft.expert)
    for task in list(load_suite(config.env.train_suite))[:10]:
        demo = sft.demonstrate(task, expert, config.sft.mistake_rate, random.Random(0))
        assert demo.success, (task.id, demo.actions)


@pytest.mark.slow  # ~1-3 min on a loaded 2-core machine: tiny model build, a short warm start, one tree step
def test_tools_tree_recipe_runs_one_step(tmp_path: Path) -> None:
    import json

    overrides = [
        "sft.num_demos=40", "sft.max_steps=5", "model.corpus_episodes=40", "train.num_steps=1",
        "train.tasks_per_step=2", "train.group_size=3", "rollout.tree.global_samples=1", "algorithm.drop_zero_variance_groups=false",
        "eval.num_tasks=2", "eval.k=1", "env.max_turns=4", f"output.dir={tmp_path / 'run'}",
        "output.progress=false", "output.tensorboard=false",
    ]  # fmt: skip
    trainer = pytest.importorskip("rlvr_gym_agents.train")
    result = trainer.train(config_module.load_config(RECIPES / "tools-tree.yaml", overrides))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in records if r["phase"] == "rl")
    assert step["step"] == 1 and 0.0 <= step["reward_mean"] <= 1.0
    assert set(result) >= {"before", "after"}
    assert step["tree/branches"] >= 1  # the tool env was forked mid-episode
