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


def test_call_stats_hand_computed(bench: ModuleType) -> None:
    # (rows, fed width, cpu s): a prefill of 8 rows x 20 ids, two decode passes of 8 and 4 rows
    calls = [(8, 20, 0.010), (8, 1, 0.002), (4, 1, 0.001)]
    stats = bench.call_stats(calls, leaves=8)
    assert stats["forward_calls"] == 3 and stats["rows_per_call"] == pytest.approx(20 / 3)
    assert stats["fed_slots_per_leaf"] == pytest.approx((160 + 8 + 4) / 8)
    assert stats["decode_ms_per_call"] == pytest.approx(1.5)


def test_model_calls_records_each_pass_and_removes_its_hooks(bench: ModuleType) -> None:
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)

        def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
            return self.embed(input_ids)

    model = Tiny()
    with bench.model_calls(model) as calls:
        model(input_ids=torch.zeros(3, 5, dtype=torch.long))
        model(input_ids=torch.zeros(2, 1, dtype=torch.long))
    model(input_ids=torch.zeros(1, 1, dtype=torch.long))  # after the block: not recorded
    assert [(rows, width) for rows, width, _ in calls] == [(3, 5), (2, 1)]
    assert all(seconds >= 0.0 for _, _, seconds in calls)


def test_the_recipe_variant_is_the_tree_recipes_section_with_the_benchmarks_leaves(bench: ModuleType) -> None:
    from rlvr_gym_agents.config import load_config

    recipe = load_config(bench.TREE_RECIPE).rollout.tree
    config = bench.recipe_tree_config(4, bench.tree_overrides(["fallback=surprisal"]))
    assert config.num_leaves == 4 and config.fallback == "surprisal"  # the benchmark's leaves and --tree-set
    assert config.branch == recipe.branch and config.global_samples == recipe.global_samples
    assert config.branch.pace  # the shipped recipe paces its branching


def test_recipe_also_adds_recipe_variants_with_their_settings_on_top(bench: ModuleType) -> None:
    import argparse

    args = argparse.Namespace(leaves=4, tree_set=["fallback=surprisal"], recipe_tree=True, alphas=[],
                              global_samples=[1], pre_monitoring=True,
                              recipe_also=["branch.at_boundary=false", "branch.pace=false,branch.alpha=0.2"])
    variants = bench.build_variants(args)
    assert list(variants) == ["flat", "tree (recipe)", "recipe branch.at_boundary=false",
                              "recipe branch.pace=false,branch.alpha=0.2"]  # no alphas: no other tree variants
    recipe, after_turn, unpaced = (variants[name] for name in list(variants)[1:])
    assert recipe.branch.at_boundary and not after_turn.branch.at_boundary
    assert (unpaced.branch.pace, unpaced.branch.alpha) == (False, 0.2) and recipe.branch.pace
    assert after_turn.fallback == unpaced.fallback == "surprisal"  # --tree-set applies to every variant
    assert after_turn.branch.pace == recipe.branch.pace and after_turn.num_leaves == 4
