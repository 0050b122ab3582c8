"""benchmarks/tree_vs_flat_learning.py: its arms' recipe overrides, its curve arithmetic on hand-made curves and logs,
and a tiny end-to-end run whose token accounting is checked against the sampled trajectories."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.rollout.flat import FlatSampler
from rlvr_gym_agents.rollout.tree_sampler import TreeSampler
from rlvr_gym_agents.rollout.types import RolloutBatch


@pytest.fixture(scope="module")
def bench(load_benchmark: Callable[[str], ModuleType]) -> ModuleType:
    return load_benchmark("tree_vs_flat_learning")


def _point(step: int, tokens: float, sampled: float | None, greedy: float | None = None) -> dict[str, Any]:
    return {"step": step, "tokens": tokens, "sampled": sampled, "greedy": greedy}


def test_arms_share_the_recipe_and_differ_in_sampler_and_credit(bench: ModuleType) -> None:
    args = bench.parse_args(["--seeds", "1", "--token-budget", "5000", "--eval-every-tokens", "1000",
                             "--tasks-per-step", "2", "--group-size", "4", "--eval-tasks", "4",
                             "--tree-set", "rollout.tree.branch.alpha=0.1"])
    configs = {arm.name: bench.arm_config(args, 1, arm, Path("/some/dir")) for arm in bench.arms(args)}
    assert list(configs) == ["flat-grpo", "flat-gigpo", "tree-gigpo", "tree-treerl", "tree-soft"]
    flat, tree = configs["flat-grpo"], configs["tree-treerl"]
    assert (flat.rollout.sampler, flat.algorithm.credit) == ("flat", "soft")  # GRPO whatever the quickstart's credit
    assert configs["flat-gigpo"].algorithm.credit == "gigpo" and configs["tree-soft"].rollout.sampler == "tree"
    assert tree.rollout.tree.global_samples == 1 and tree.rollout.tree.branch.alpha == 0.1  # textworld-tree + --tree-set
    assert tree.rollout.tree.num_leaves == flat.train.group_size == 4 and flat.train.tasks_per_step == 2
    for config in configs.values():
        assert config.train.max_generated_tokens == 5000 and config.eval.every_generated_tokens == 1000
        assert config.eval.seed == 1234 and config.train.max_time_s is None and config.train.run_budget_s is None
        assert config.model.path_or_id == "/some/dir" and not config.sft.enabled and config.seed == 1
        assert config.env == flat.env and config.algorithm.invalid_action_penalty == 0.0
    assert configs["flat-gigpo"].output.dir.endswith("flat-gigpo-seed1")


def test_other_families_read_their_own_recipe_and_tree_section(bench: ModuleType) -> None:
    args = bench.parse_args(["--family", "tools", "--tree-credits", "treerl", "--flat-credits", "soft"])
    flat, tree = (bench.arm_config(args, 0, arm, Path("/w")) for arm in bench.arms(args))
    recipe = load_config(bench.RECIPES / "tools-tree.yaml")
    assert flat.env.env_id == tree.env.env_id == recipe.env.env_id and flat.rollout.sampler == "flat"
    assert tree.rollout.tree.global_samples == recipe.rollout.tree.global_samples
    assert args.out == Path("runs/bench-tree-vs-flat-tools")
    for family, name, tree_name in (("code", "code-tiny.yaml", "code-tiny.yaml"),
                                    ("rtl", "rtl-tiny.yaml", "rtl-tree.yaml")):
        args = bench.parse_args(["--family", family, "--tree-credits", "gigpo", "--flat-credits", "soft"])
        flat, tree = (bench.arm_config(args, 0, arm, Path("/w")) for arm in bench.arms(args))
        own, tree_source = load_config(bench.RECIPES / name), load_config(bench.RECIPES / tree_name)
        assert flat.env == tree.env == own.env and (flat.rollout.sampler, tree.rollout.sampler) == ("flat", "tree")
        assert tree.rollout.tree.branch == tree_source.rollout.tree.branch
        assert tree.rollout.tree.global_samples == tree_source.rollout.tree.global_samples
        assert flat.train.learning_rate == own.train.learning_rate and tree.train.max_generated_tokens == 150_000


def test_bad_arm_choices_are_refused(bench: ModuleType) -> None:
    for argv in (["--flat-credits", "gigpo"], ["--flat-credits", "soft,treerl"], ["--tree-credits", "nope"],
                 ["--entropy-losses", "ppo_clip,bogus"], ["--token-budget", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args(argv)


def test_entropy_arms_reuse_flat_grpo_for_the_recipes_own_loss(bench: ModuleType) -> None:
    args = bench.parse_args(["--entropy-losses", "ppo_clip,aepo"])
    own, aepo = bench.entropy_arms(args)
    assert own == bench.arms(args)[0] and own.name == "flat-grpo"  # the quickstart's loss is ppo_clip
    config = bench.arm_config(args, 0, aepo, Path("/w"))
    assert aepo.name == "loss-aepo" and config.algorithm.loss.name == "aepo" and config.rollout.sampler == "flat"


def test_tokens_to_reach_interpolates_the_crossing_hand_computed(bench: ModuleType) -> None:
    curve = [_point(0, 0, 0.10), _point(2, 1000, 0.20), _point(4, 2100, 0.40), _point(6, 3000, 0.50)]
    # 0.30 lies between 0.20 (1,000 tokens) and 0.40 (2,100): 1,000 + (0.1 / 0.2) x 1,100 = 1,550
    assert bench.tokens_to_reach(curve, 0.30) == pytest.approx(1550.0)
    assert bench.tokens_to_reach(curve, 0.40) == pytest.approx(2100.0)  # exactly at an evaluation
    assert bench.tokens_to_reach(curve, 0.15) == pytest.approx(500.0)  # from step 0's 0.10 to 0.20
    assert bench.tokens_to_reach(curve, 0.51) is None  # never reached
    assert bench.tokens_to_reach(curve, None) is None
    # the warm start already scores the target: step 0 does not count, the first evaluation after it does
    assert bench.tokens_to_reach(curve, 0.05) == pytest.approx(1000.0)
    # a dip below and back: the first crossing counts; an evaluation without the metric is skipped
    dips = [_point(0, 0, 0.1), _point(1, 100, 0.3), _point(2, 200, None), _point(3, 300, 0.1), _point(4, 400, 0.5)]
    assert bench.tokens_to_reach(dips, 0.2) == pytest.approx(50.0)
    assert bench.tokens_to_reach(dips, 0.4) == pytest.approx(375.0)  # 300 + (0.3 / 0.4) x 100


def test_band_interpolates_each_seed_onto_the_token_grid(bench: ModuleType) -> None:
    args = bench.parse_args(["--token-budget", "250", "--eval-every-tokens", "100"])
    grid = bench.token_grid(args)
    assert grid == [0.0, 100.0, 200.0, 250.0]
    seed_a = [_point(0, 0, 0.0), _point(2, 120, 0.6), _point(4, 260, 0.2)]
    seed_b = [_point(0, 0, 0.2), _point(3, 200, 0.4), _point(5, 240, 0.8)]  # stopped short of 250 (--max-steps)
    # seed a at 100: 0.6 x 100/120 = 0.5; at 200: 0.6 - 0.4 x 80/140; at 250: 0.6 - 0.4 x 130/140
    # seed b at 100: 0.2 + 0.2 x 0.5 = 0.3; at 200: 0.4; at 250: past its last evaluation
    result = bench.band([seed_a, seed_b], grid, "sampled")
    a200, a250 = 0.6 - 0.4 * 80 / 140, 0.6 - 0.4 * 130 / 140
    assert result["mean"][:3] == pytest.approx([0.1, 0.4, (a200 + 0.4) / 2]) and a250 < 0.3
    assert result["min"][:3] == pytest.approx([0.0, 0.3, min(a200, 0.4)]) and result["max"][1] == pytest.approx(0.5)
    assert result["mean"][3] is None and result["max"][3] is None
    assert bench.on_grid(seed_a, grid, "sampled")[3] == pytest.approx(a250)


def test_comparison_rows_hand_computed(bench: ModuleType) -> None:
    curves = {"flat-grpo": {0: [_point(0, 0, 0.1), _point(2, 1000, 0.2), _point(4, 2000, 0.3)]},
              "tree-treerl": {0: [_point(0, 0, 0.1), _point(3, 1000, 0.4), _point(7, 2000, 0.4)]}}
    grid = [0.0, 1000.0, 2000.0]
    bands = {arm: {"sampled": bench.band(list(c.values()), grid, "sampled")} for arm, c in curves.items()}
    flat, tree = bench.comparison_rows(curves, bands, 2000, "sampled")
    # flat's final 0.3: the tree crosses it between 0 (0.1) and 1,000 (0.4): 1,000 x 0.2 / 0.3
    assert tree["reach_tokens"] == pytest.approx(2000 / 3) and tree["ratio"] == pytest.approx(1 / 3)
    assert tree["ratio_per_seed"] == {0: pytest.approx(1 / 3)} and tree["final"] == pytest.approx(0.4)
    assert flat["reach_tokens"] == pytest.approx(2000.0) and flat["ratio"] == pytest.approx(1.0)
    assert flat["reference_gain"] == pytest.approx(0.2)


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


def test_arm_analysis_pools_the_steps_of_every_seed_hand_computed(bench: ModuleType, tmp_path: Path) -> None:
    logs = {"a": [{"phase": "rl", "step": 1, "tokens_generated": 400, "groups_kept": 2, "success_rate": 0.5,
                   "rollout_entropy": 1.0, "tree/sibling_adv_var": 0.2, "tree/leaf_success/branched": 0.0}],
            "b": [{"phase": "rl", "step": 1, "tokens_generated": 600, "groups_kept": 1, "success_rate": 0.25,
                   "rollout_entropy": 2.0, "tree/sibling_adv_var": 0.4}]}
    for name, records in logs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    result = bench.arm_analysis([tmp_path / "a", tmp_path / "b"])
    assert result == {"steps": 2, "tokens": 1000, "mixed_groups_per_1k_tokens": pytest.approx(3.0),
                      "training_success": pytest.approx(0.375), "rollout_entropy": pytest.approx(1.5),
                      "tree/sibling_adv_var": pytest.approx(0.3), "tree/leaf_success/branched": pytest.approx(0.0)}


def test_effective_settings_ignore_sft_tiny_sizes_and_run_dir_but_not_rl_settings(bench: ModuleType) -> None:
    def settings(*overrides: str) -> dict[str, Any]:
        config = load_config(bench.RECIPES / "quickstart.yaml", ["sft.enabled=false", *overrides])
        return bench.effective_settings(json.loads(json.dumps(bench.to_dict(config))))

    assert settings() == settings("sft.num_demos=7", "model.hidden_size=64", "output.dir=/elsewhere")
    assert settings() != settings("train.learning_rate=1e-3")
    assert settings() == settings("rollout.tree.fallback_share=0.5")  # a flat run never reads them
    tree = ("rollout.sampler=tree", "algorithm.credit=gigpo")
    assert settings(*tree) != settings(*tree, "rollout.tree.fallback_share=0.5")


def test_a_tiny_equal_token_run_stops_each_arm_at_its_budget_and_counts_the_sampled_tokens(
        bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sampled: dict[str, list[int]] = {}  # run directory -> generated ids of each batch, read off the trajectories
    current: list[str] = []
    real_train = bench.train

    def train(config):  # type: ignore[no-untyped-def]
        current[:] = [config.output.dir]
        return real_train(config)

    def counting(sample_batch):  # type: ignore[no-untyped-def]
        def wrapped(self, tasks, step):  # type: ignore[no-untyped-def]
            batch: RolloutBatch = sample_batch(self, tasks, step)
            ids = (sum(t.num_generated_tokens for t in batch.trajectories) if batch.trees is None else
                   sum(len(n.generated_ids) for tree in batch.trees for n in tree.nodes))  # shared ids once
            sampled.setdefault(current[0], []).append(ids)
            return batch
        return wrapped

    monkeypatch.setattr(bench, "train", train)
    monkeypatch.setattr(FlatSampler, "sample_batch", counting(FlatSampler.sample_batch))
    monkeypatch.setattr(TreeSampler, "sample_batch", counting(TreeSampler.sample_batch))
    out = tmp_path / "bench"
    budget, every = 400, 200
    common = ["--seeds", "0", "--token-budget", str(budget), "--eval-every-tokens", str(every), "--tasks-per-step",
              "2", "--group-size", "2", "--eval-tasks", "2", "--threads", "1", "--out", str(out),
              "--set", "sft.max_steps=2", "sft.num_demos=16", "model.corpus_episodes=4", "eval.k=1",
              "env.max_turns=4"]
    result = bench.main([*common, "--flat-credits", "soft", "--tree-credits", "treerl"])
    assert (out / "tree_vs_flat_learning.png").stat().st_size > 10_000
    assert json.loads((out / "tree_vs_flat_learning.json").read_text())["rows"][0]["arm"] == "flat-grpo"
    step_zero = []
    for arm in ("flat-grpo", "tree-treerl"):
        run_dir = out / f"{arm}-seed0"
        steps = [r["tokens_generated"] for r in bench.rl_records(run_dir)]
        assert steps == sampled[str(run_dir)]  # the logged tokens are the trajectories' generated ids
        curve = result["curves"][arm][0]
        assert curve[-1]["tokens"] == sum(steps) >= budget > sum(steps[:-1])  # stopped at the first step over it
        assert curve[-1]["step"] == len(steps) and all(p["tokens"] < budget for p in curve[:-1])
        assert all(b // every > a // every for a, b in zip([p["tokens"] for p in curve[:-2]],
                                                          [p["tokens"] for p in curve[1:-1]]))
        evals = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
                 if json.loads(line)["phase"] == "eval"]
        step_zero.append({k: v for k, v in evals[0].items() if k not in ("elapsed_s", "process_cpu_s")})
    assert step_zero[0] == step_zero[1]  # one warm start, one held-out set, one sampling seed
    assert result["analysis"]["tree-treerl"]["steps"] == len(sampled[str(out / "tree-treerl-seed0")])
    assert "tree/sibling_adv_var" in result["analysis"]["tree-treerl"]
    assert "tree/sibling_adv_var" not in result["analysis"]["flat-grpo"]

    # entropy per loss: ppo_clip is the flat-grpo run above (reused, not retrained); aepo is one more run
    entropy = bench.main([*common, "--flat-credits", "soft", "--tree-credits", "treerl",
                          "--entropy-losses", "ppo_clip,aepo"])
    assert entropy["runs"]["ppo_clip"] == {0: str(out / "flat-grpo-seed0")}
    logged = [r["rollout_entropy"] for r in bench.rl_records(out / "loss-aepo-seed0")]
    assert entropy["entropy"]["aepo"]["mean"] == pytest.approx(logged) and len(logged) >= 1
    assert (out / "entropy_per_loss.png").stat().st_size > 10_000 and (out / "entropy_per_loss.json").is_file()
