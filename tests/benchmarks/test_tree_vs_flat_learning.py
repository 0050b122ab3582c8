"""benchmarks/tree_vs_flat_learning.py: its recipe overrides parse, and its curve arithmetic on hand-made logs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from rlvr_gym_agents.config import load_config


@pytest.fixture(scope="module")
def bench(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("tree_vs_flat_learning")


def _point(step: int, tokens: float, sampled: float, greedy: float | None = None) -> dict[str, Any]:
    return {"step": step, "tokens": tokens, "sampled": sampled, "greedy": greedy}


def test_both_variants_share_the_quickstart_settings_and_differ_in_sampler_and_credit(bench: ModuleType,
                                                                                      tmp_path: Path) -> None:
    args = bench.parse_args(["--seeds", "1", "--steps", "3", "--eval-every", "2", "--eval-tasks", "4",
                             "--tasks-per-step", "2", "--group-size", "4", "--credit", "gigpo"])
    common = [*bench.common_overrides(args, 1), "model.path_or_id=/some/dir", "train.max_time_s=null",
              f"output.dir={tmp_path}"]
    flat = load_config(bench.FLAT_RECIPE, common + bench.variant_overrides(args, "flat"))
    tree = load_config(bench.FLAT_RECIPE, common + bench.variant_overrides(args, "tree"))
    assert flat.rollout.sampler == "flat" and tree.rollout.sampler == "tree" and tree.algorithm.credit == "gigpo"
    assert flat.algorithm.credit == "soft"  # the baseline is flat GRPO whatever the quickstart's credit
    gigpo_args = bench.parse_args(["--flat-credit", "gigpo"])
    assert load_config(bench.FLAT_RECIPE, common + bench.variant_overrides(gigpo_args, "flat")).algorithm.credit == "gigpo"
    assert tree.rollout.tree.global_samples == 1 and tree.rollout.tree.branch.alpha == 0.2  # textworld-tree.yaml
    assert tree.rollout.tree.num_leaves == flat.train.group_size == 4 and tree.train.max_time_s is None
    assert tree.env == flat.env and flat.env.env_id == "textworld/ALFWorld-Starter-v0"
    assert tree.rollout.max_new_tokens == flat.rollout.max_new_tokens and tree.seed == flat.seed == 1


def test_tree_set_changes_the_tree_variant_only(bench: ModuleType, tmp_path: Path) -> None:
    args = bench.parse_args(["--tree-set", "rollout.tree.global_samples=2", "rollout.tree.branch.alpha=0.1"])
    common = [*bench.common_overrides(args, 0), "model.path_or_id=/some/dir", f"output.dir={tmp_path}"]
    flat = load_config(bench.FLAT_RECIPE, common + bench.variant_overrides(args, "flat"))
    tree = load_config(bench.FLAT_RECIPE, common + bench.variant_overrides(args, "tree"))
    assert tree.rollout.tree.global_samples == 2 and tree.rollout.tree.branch.alpha == 0.1
    plain = load_config(bench.FLAT_RECIPE, common + bench.variant_overrides(bench.parse_args([]), "flat"))
    assert flat == plain  # so flat runs of an earlier --out are reused for another tree setting


def test_learning_curve_sums_step_tokens_up_to_each_evaluation(bench: ModuleType, tmp_path: Path) -> None:
    records = [
        {"phase": "eval", "step": 0, "pass@1_sampled": 0.1, "pass@1_greedy": 0.0},
        {"phase": "rl", "step": 1, "tokens_generated": 100},
        {"phase": "rl", "step": 2, "tokens_generated": 50},
        {"phase": "rl", "step": 2, "tokens_generated": 60},  # step 2 again after a resume: the last one counts
        {"phase": "eval", "step": 2, "pass@1_sampled": 0.25, "pass@1_greedy": 0.5},
        {"phase": "rl", "step": 3, "tokens_generated": 40},
        {"phase": "eval", "step": 3, "pass@1_sampled": 0.5, "pass@1_greedy": None},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert bench.learning_curve(tmp_path) == [_point(0, 0, 0.1, 0.0), _point(2, 160, 0.25, 0.5),
                                              _point(3, 200, 0.5, None)]


def test_step_means_average_rl_records_once_per_step(bench: ModuleType, tmp_path: Path) -> None:
    records = [
        {"phase": "eval", "step": 0, "pass@1_sampled": 0.1},
        {"phase": "rl", "step": 1, "groups_kept": 2, "success_rate": 0.25},
        {"phase": "rl", "step": 2, "groups_kept": 7, "success_rate": 0.5},
        {"phase": "rl", "step": 2, "groups_kept": 4, "success_rate": 0.75},  # after a resume: the last counts
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert bench.step_means(tmp_path) == {"groups_kept": pytest.approx(3.0), "success_rate": pytest.approx(0.5)}


def test_compare_finds_the_first_tree_evaluation_at_flat_final_success(bench: ModuleType) -> None:
    flat = [_point(0, 0, 0.1), _point(2, 100, 0.3), _point(4, 200, 0.4)]
    tree = [_point(0, 0, 0.1), _point(2, 60, 0.35), _point(4, 120, 0.45)]
    row = bench.compare(flat, tree, "sampled")
    assert (row["reach_step"], row["reach_tokens"], row["ratio"]) == (4, 120, pytest.approx(0.6))
    assert row["flat_gain"] == pytest.approx(0.3) and (row["flat_tokens"], row["tree_tokens"]) == (200, 120)
    never = bench.compare(flat, [_point(0, 0, 0.1), _point(4, 120, 0.39)], "sampled")
    assert never["reach_step"] is None and never["ratio"] is None


def test_compare_leaves_out_the_shared_warm_start(bench: ModuleType) -> None:
    flat = [_point(0, 0, 0.2), _point(2, 100, 0.2)]
    row = bench.compare(flat, [_point(0, 0, 0.2), _point(1, 30, 0.1), _point(2, 70, 0.2)], "sampled")
    assert (row["reach_step"], row["ratio"], row["flat_gain"]) == (2, pytest.approx(0.7), pytest.approx(0.0))


def test_mean_curve_averages_the_shared_evaluation_steps(bench: ModuleType) -> None:
    seed_a = [_point(0, 0, 0.1, 0.0), _point(5, 100, 0.3, 0.2), _point(10, 220, 0.5, 0.4)]
    seed_b = [_point(0, 0, 0.3, 0.2), _point(5, 140, 0.4, None)]  # stopped early; greedy off at step 5
    mean = bench.mean_curve([seed_a, seed_b])
    assert [p["step"] for p in mean] == [0, 5]
    assert mean[1]["tokens"] == 120 and mean[1]["sampled"] == pytest.approx(0.35) and mean[1]["greedy"] is None
    assert mean[0]["greedy"] == pytest.approx(0.1)


def test_effective_settings_ignore_sft_tiny_sizes_and_run_dir_but_not_rl_settings(bench: ModuleType) -> None:
    a = json.loads(json.dumps(bench.to_dict(load_config(bench.FLAT_RECIPE, ["sft.enabled=false"]))))
    b = json.loads(json.dumps(bench.to_dict(load_config(bench.FLAT_RECIPE, ["sft.enabled=false", "sft.num_demos=7",
                                                                             "model.hidden_size=64",
                                                                             "output.dir=/elsewhere"]))))
    c = json.loads(json.dumps(bench.to_dict(load_config(bench.FLAT_RECIPE, ["sft.enabled=false",
                                                                             "train.learning_rate=1e-3"]))))
    assert bench.effective_settings(a) == bench.effective_settings(b)
    assert bench.effective_settings(a) != bench.effective_settings(c)


def test_effective_settings_ignore_tree_settings_of_flat_runs_only(bench: ModuleType) -> None:
    def settings(*overrides: str) -> dict[str, Any]:
        config = load_config(bench.FLAT_RECIPE, ["sft.enabled=false", *overrides])
        return bench.effective_settings(json.loads(json.dumps(bench.to_dict(config))))

    assert settings() == settings("rollout.tree.fallback_share=0.5")  # a flat run never reads them
    tree = ("rollout.sampler=tree", "algorithm.credit=gigpo")
    assert settings(*tree) != settings(*tree, "rollout.tree.fallback_share=0.5")
