"""The tool-use recipes load, point at real suites, and their warm-start experts succeed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from rlvr_gym import load_suite, spec

config_module = pytest.importorskip("rlvr_gym_agents.config")
sft = pytest.importorskip("rlvr_gym_agents.sft")

RECIPES = Path(__file__).resolve().parents[2] / "agents" / "recipes"


@pytest.mark.parametrize("name", ["tools-tree.yaml", "qwen2.5-0.5b-tools.yaml"])
def test_recipe_loads_and_its_suites_exist(name: str) -> None:
    config = config_module.load_config(RECIPES / name)
    assert spec(config.env.env_id).family == "tools"
    for suite in (config.env.train_suite, config.env.test_suite):
        assert len(load_suite(suite)) >= 100


@pytest.mark.parametrize("name", ["tools-tree.yaml", "qwen2.5-0.5b-tools.yaml"])
def test_recipe_expert_demonstrations_succeed(name: str) -> None:
    config = config_module.load_config(RECIPES / name)
    expert = sft.load_expert(config.sft.expert)
    for task in list(load_suite(config.env.train_suite))[:10]:
        demo = sft.demonstrate(task, expert, config.sft.mistake_rate, random.Random(0))
        assert demo.success, (task.id, demo.actions)
