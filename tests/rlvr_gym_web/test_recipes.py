"""The web recipes load, and the oracle expert they name exists on the env."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlvr_gym_web.desktop.env import DesktopEnv

RECIPES = Path(__file__).resolve().parents[2] / "agents" / "recipes"


def test_web_tree_recipe_loads() -> None:
    config_module = pytest.importorskip("rlvr_gym_agents.config")
    config = config_module.load_config(RECIPES / "web-tree.yaml")
    assert config.env.env_id == "web/Settings-v0" and config.sft.expert == "oracle"
    assert config.rollout.sampler == "tree" and config.rollout.tree.global_samples == 2


def test_web_tiny_recipe_loads_and_its_hooks_exist() -> None:
    config_module = pytest.importorskip("rlvr_gym_agents.config")
    demonstrations = pytest.importorskip("rlvr_gym_agents.warmstart.demonstrations")
    config = config_module.load_config(RECIPES / "web-tiny.yaml")
    assert config.env.env_id == "web/Widgets-v0" and config.env.test_suite == "web/widgets-test"
    assert config.sft.expert == "oracle" and config.rollout.sampler == "flat" and config.algorithm.credit == "gigpo"
    assert (config.train.tasks_per_step, config.train.group_size) == (8, 8)
    generate = demonstrations.import_callable(config.sft.demo_tasks, "sft.demo_tasks")
    tasks = generate(config.env.env_id, "train", 3, 500)
    assert [t.options["seed"] for t in tasks] == [500, 501, 502] and not any(t.metadata["held_out"] for t in tasks)
    assert callable(demonstrations.import_callable(config.sft.invalid_actions, "sft.invalid_actions"))


def test_gpu_web_recipe_loads() -> None:
    config_module = pytest.importorskip("rlvr_gym_agents.config")
    config = config_module.load_config(RECIPES / "qwen2.5-0.5b-web.yaml")
    assert config.env.env_id == "web/Mail-v0" and config.env.test_suite == "web/mail"


def test_oracle_needs_an_episode() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        DesktopEnv(app="settings").oracle_action()
