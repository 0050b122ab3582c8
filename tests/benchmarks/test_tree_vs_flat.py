"""benchmarks/tree_vs_flat.py: the mixed-outcome share on hand-made trajectories and its tree settings."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest
from rlvr_gym_agents.rollout import Trajectory


@pytest.fixture(scope="module")
def bench(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("tree_vs_flat")


def test_mixed_share_counts_tasks_whose_leaves_neither_all_succeed_nor_all_fail(bench: ModuleType) -> None:
    outcomes = {"a": [True, False, False], "b": [False, False], "c": [True, True], "d": [False, True]}
    trajectories = [Trajectory(task_id=task, env_id="e", success=s) for task, won in outcomes.items() for s in won]
    assert bench.mixed_share(trajectories) == pytest.approx(2 / 4)  # a and d
    assert bench.mixed_share([]) == 0.0


def test_tree_set_reaches_sampler_and_branch_fields(bench: ModuleType) -> None:
    settings = bench.tree_overrides(["fallback=surprisal", "fallback_share=0.5", "branch.entropy_weight=0"])
    config = bench.tree_config(8, settings, global_samples=1, branch=bench.BranchConfig(alpha=0.0))
    assert (config.num_leaves, config.global_samples, config.fallback, config.fallback_share) == (8, 1, "surprisal", 0.5)
    assert (config.branch.alpha, config.branch.entropy_weight) == (0.0, 0.0)
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        bench.tree_overrides(["fallback"])
    with pytest.raises(TypeError):  # an unknown field is not silently ignored
        bench.tree_config(8, bench.tree_overrides(["fallbak=prompt"]))
