"""Reports on real evaluations: transcripts with observations, the pass@k curve, ``--by`` splits, the plots,
and ``rlvr-gym compare`` with paired bootstrap intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlvr_gym import load_suite
from rlvr_gym.cli import main
from rlvr_gym.compare import compare_reports, paired_bootstrap
from rlvr_gym.evaluation import NO_VALUE, evaluate
from rlvr_gym.reporting import EvalReport
from rlvr_gym.testing import RandomAgent

SUITE = "textworld/starter-test"


@pytest.fixture(scope="module")
def random_report() -> EvalReport:
    tasks = load_suite(SUITE).tasks[:40]
    return evaluate(RandomAgent(seed=0), tasks, k=4, progress=False, by=["held_out_layout", "nokey"])


def test_records_carry_the_transcript(random_report: EvalReport) -> None:
    for record in random_report.records:
        assert len(record.observations) == record.turns + 1  # the reset observation, then one per step
        assert len(record.step_rewards) == len(record.step_failures) == record.turns == len(record.actions)
        assert sum(record.step_rewards) == pytest.approx(record.reward)
        assert record.metadata["difficulty"] == "starter"
    first = random_report.records[0]
    assert "Your task is to:" in first.observations[0]


def test_pass_at_k_curve_runs_from_1_to_k(random_report: EvalReport) -> None:
    m = random_report.metrics
    curve = m["pass@k_curve"]
    assert list(curve) == ["1", "2", "3", "4"]
    assert curve["1"] == m["pass@1"] and curve["4"] == m["pass@4"]
    assert all(a <= b for a, b in zip(list(curve.values()), list(curve.values())[1:]))
    assert set(m["pass@k_curve_stderr"]) == set(curve)


def test_by_splits_every_metric_by_a_metadata_key(random_report: EvalReport) -> None:
    split = random_report.metrics["by"]["held_out_layout"]
    assert set(split) == {"False", "True"}
    assert sum(g["num_episodes"] for g in split.values()) == len(random_report.records)
    assert set(split["True"]) >= {"pass@1", "pass@4", "mean_reward", "failures_by_type", "pass@k_curve"}
    assert list(random_report.metrics["by"]["nokey"]) == [NO_VALUE]


def test_save_writes_transcripts_and_a_readable_report(random_report: EvalReport, tmp_path: Path) -> None:
    paths = random_report.save(tmp_path, num_transcripts=4)
    transcripts = paths["transcripts"].read_text()
    record = random_report.records[0]
    assert transcripts.count("\n## ") == 4 and record.observations[1] in transcripts and record.actions[0] in transcripts
    markdown = paths["markdown"].read_text()
    assert "## pass@k curve" in markdown and "## By held_out_layout" in markdown and "episodes ended by it" in markdown
    assert paths["png"].stat().st_size > 10_000
    back = EvalReport.from_json(paths["json"])
    assert back.records[0].observations == record.observations and back.metrics == json.loads(
        json.dumps(random_report.metrics))


def test_paired_bootstrap_hand_computed() -> None:
    all_better = paired_bootstrap([0, 0, 0, 0], [1, 1, 1, 1], num_resamples=1000)
    assert (all_better["delta"], all_better["ci_low"], all_better["ci_high"]) == (1.0, 1.0, 1.0)
    assert all_better["p_value"] == pytest.approx(1 / 1000)
    same = paired_bootstrap([0.5, 1.0], [0.5, 1.0])
    assert same["delta"] == 0.0 and same["p_value"] == 1.0
    # differences (1, 0): resampled means are 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4
    half = paired_bootstrap([0, 0], [1, 0], num_resamples=20_000, seed=3)
    assert half["delta"] == 0.5 and (half["ci_low"], half["ci_high"]) == (0.0, 1.0)
    assert half["p_value"] == pytest.approx(0.5, abs=0.02)  # 2 x P(mean <= 0) = 2 x 1/4
    with pytest.raises(ValueError, match="equal-length"):
        paired_bootstrap([1], [1, 2])


def test_cli_eval_by_and_compare_on_real_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--suite", SUITE, "--limit", "30", "--by", "task_type"]
    assert main(["eval", "--agent", "random", "-k", "2", *common, "--out", str(tmp_path / "random")]) == 0
    assert main(["eval", "--agent", "gold", *common, "--out", str(tmp_path / "gold")]) == 0
    capsys.readouterr()
    assert main(["compare", str(tmp_path / "random"), str(tmp_path / "gold" / "report.json"), "--by", "task_type",
                 "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "| pass@1 |" in out and "task_type = pick_and_place" in out
    result = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert result["num_common_tasks"] == 30 and set(result["metrics"]) == {"pass@1", "mean_reward"}  # gold: k=1
    assert result["metrics"]["pass@1"]["ci_low"] > 0.8 and result["metrics"]["pass@1"]["mean_b"] == 1.0
    assert set(result["by"]["task_type"]) == {"pick_and_place", "pick_cool_then_place"}
    assert compare_reports(tmp_path / "random", tmp_path / "random")["metrics"]["pass@1"]["delta"] == 0.0


def test_compare_of_unrelated_reports_is_a_usage_error(tmp_path: Path) -> None:
    assert main(["eval", "--agent", "gold", "--suite", "testing/echo", "--out", str(tmp_path / "echo")]) == 0
    assert main(["eval", "--agent", "gold", "--suite", SUITE, "--limit", "2", "--out", str(tmp_path / "tw")]) == 0
    assert main(["compare", str(tmp_path / "echo"), str(tmp_path / "tw")]) == 2
    assert main(["compare", str(tmp_path / "echo"), str(tmp_path / "missing")]) == 2
