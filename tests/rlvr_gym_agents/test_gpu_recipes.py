"""Every GPU recipe runs one RL step on the CPU: the tiny model in place of the hub model, the fake vLLM engine in
place of vLLM (same code path: worker extension, collective_rpc, weight sync after the update), everything else as
the recipe says (its env, suites, loss, rollout correction, precision scheme)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.train import train

RECIPES = Path(__file__).resolve().parents[2] / "agents" / "recipes"
GPU_RECIPES = sorted(p.name for p in RECIPES.glob("qwen2.5-0.5b-*.yaml"))


def _params() -> list[pytest.ParameterSet]:
    return [pytest.param(name, marks=[pytest.mark.browser] if "web" in name else [], id=name) for name in GPU_RECIPES]


@pytest.mark.parametrize("recipe", _params())
def test_gpu_recipe_runs_one_step_on_the_cpu_with_the_fake_engine(recipe: str, tiny_model_dir: Path,
                                                                  tmp_path: Path) -> None:
    config = load_config(RECIPES / recipe, [
        f"model.path_or_id={tiny_model_dir}", "model.device=cpu", "model.max_context_tokens=256",
        "model.num_threads=1", "rollout.engine=fake_vllm", "rollout.weight_sync=broadcast",
        "rollout.max_new_tokens=8", "sft.enabled=false", "env.max_turns=2", "env.num_workers=0",
        "train.num_steps=1", "train.tasks_per_step=1", "train.group_size=2", "algorithm.num_minibatches=1",
        "eval.num_tasks=1", "eval.k=1", "eval.greedy=false", "eval.every_steps=0", f"output.dir={tmp_path / 'run'}",
        "output.progress=false", "output.tensorboard=false",
    ])
    assert config.rollout.engine == "fake_vllm" and config.train.precision == "mixed"
    summary = train(config)
    records = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert summary["after"]["num_tasks"] == 1
    assert sum('"phase": "rl"' in line for line in records) == 1  # the step ran (its update may have no group)
