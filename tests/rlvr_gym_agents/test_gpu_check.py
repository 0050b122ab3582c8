"""benchmarks/gpu_check.py: its recipe validates (fast); ``--device cpu --tiny`` runs end to end (slow tier)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from rlvr_gym_agents.config import load_config

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"


def _gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_check_recipe_is_a_110m_mixed_precision_run(tmp_path: Path) -> None:
    check = _gpu_check()
    config = load_config(check.RECIPE, check.check_overrides("cuda", False, 10, tmp_path))
    model = config.model
    assert (model.hidden_size, model.num_layers, model.intermediate_size) == (768, 12, 3072)
    layer = 4 * 768 * 768 + 3 * 768 * 3072  # attention (q, k, v, o) and MLP weights
    assert 100e6 < model.num_layers * layer < 120e6
    assert (model.device, model.dtype, config.train.precision, config.rollout.engine) == (
        "cuda", "bfloat16", "mixed", "transformers")


def test_extra_overrides_come_after_the_checks_own(tmp_path: Path) -> None:
    check = _gpu_check()
    config = check.check_config("cuda", False, 10, tmp_path, extra=["rollout.sampler=tree", "model.lora.rank=16",
                                                                       "train.precision=pure"])
    assert (config.rollout.sampler, config.model.lora.rank, config.train.precision) == ("tree", 16, "pure")
    assert config.model.hidden_size == 768  # the check's own overrides still apply


@pytest.mark.slow
def test_the_cpu_tiny_check_runs_end_to_end(tmp_path: Path) -> None:
    result = _gpu_check().run_check("cpu", True, 2, tmp_path)
    assert result["rollout_tokens_per_s"] > 0 and result["update_tokens_per_s"] > 0
    assert len(result["rewards"]) == 2 and result["peak_gpu_memory_gib"] is None
    assert (tmp_path / "gpu_check.json").is_file()
