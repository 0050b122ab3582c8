"""One GRPO step on code/HumanEval-v0 with a tiny CPU policy, through the real trainer and sandbox; and the
GPU recipe loads and points at real suites."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_gym import TaskSuite, load_suite, spec

config_module = pytest.importorskip("rlvr_gym_agents.config")
trainer = pytest.importorskip("rlvr_gym_agents.train")
tiny = pytest.importorskip("rlvr_gym_agents.warmstart.tiny")

RECIPE = Path(__file__).resolve().parents[2] / "agents" / "recipes" / "qwen2.5-0.5b-humaneval.yaml"


def test_gpu_recipe_loads_and_its_suites_exist() -> None:
    config = config_module.load_config(RECIPE)
    assert spec(config.env.env_id).family == "code"
    assert len(load_suite(config.env.train_suite)) >= 40 and len(load_suite(config.env.test_suite)) == 164


@pytest.mark.slow  # ~30 s on a loaded 2-core machine: tiny model build, eval before/after, one GRPO step
def test_one_training_step_on_humaneval_with_a_tiny_policy(tmp_path: Path) -> None:
    suite = load_suite("code/humaneval")
    TaskSuite("train", suite.tasks[:2]).save(tmp_path / "train.jsonl")
    TaskSuite("test", suite.tasks[2:3]).save(tmp_path / "test.jsonl")
    corpus = [t.data["prompt"] + t.gold[0] for t in suite.tasks[:3]]  # type: ignore[index]
    model_dir = tiny.save_tiny_policy(corpus, tmp_path / "tiny", seed=0, max_context_tokens=1024)
    overrides = [
        f"model.path_or_id={model_dir}", "model.device=cpu", "model.dtype=float32", "model.num_threads=1",
        f"env.train_suite={tmp_path / 'train.jsonl'}", f"env.test_suite={tmp_path / 'test.jsonl'}",
        "sft.enabled=false", "rollout.engine=transformers", "rollout.max_new_tokens=8", "train.num_steps=1",
        "train.tasks_per_step=2", "train.group_size=2", "algorithm.drop_zero_variance_groups=false",
        "algorithm.loss.kl_coef=0.0", "eval.num_tasks=1", "eval.k=1", "eval.every_steps=0",
        f"output.dir={tmp_path / 'run'}", "output.progress=false", "output.tensorboard=false",
    ]
    result = trainer.train(config_module.load_config(RECIPE, overrides))
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in records if r["phase"] == "rl")
    assert step["step"] == 1 and step["reward_mean"] == 0.0  # random text does not pass hidden tests
    assert set(result) >= {"before", "after"}
