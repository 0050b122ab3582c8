"""VerilogEval loading (any directory in its layout), problem data and the deliberate mutations."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from rlvr_gym_rtl.judge import RtlJudge
from rlvr_gym_rtl.problem import ProblemError, RtlProblem, gold_action
from rlvr_gym_rtl.verilog_eval import (
    BUNDLED_DIR,
    inverted_output,
    load_problem,
    load_problems,
    mutations,
    problem_names,
    resolve_problem_dir,
)

import rlvr_gym

PICK = ["Prob035_count1to10", "Prob014_andgate"]


@pytest.fixture()
def small_dir(tmp_path: Path) -> Path:
    source = resolve_problem_dir(BUNDLED_DIR)
    for name in PICK:
        for suffix in ("_prompt.txt", "_ref.sv", "_test.sv"):
            shutil.copyfile(source / f"{name}{suffix}", tmp_path / f"{name}{suffix}")
    return tmp_path


def test_any_directory_in_the_layout_loads(small_dir: Path) -> None:
    assert problem_names(small_dir) == sorted(PICK)
    problems = load_problems(small_dir)
    assert [p.name for p in problems] == sorted(PICK)
    assert all("TopModule" in p.prompt and "module RefModule" in p.reference for p in problems)
    assert len(load_problems()) == 104


def test_missing_files_and_bad_data_raise_clear_errors(small_dir: Path, tmp_path: Path) -> None:
    (small_dir / "Prob014_andgate_test.sv").unlink()
    with pytest.raises(ProblemError, match="Prob014_andgate_test.sv is missing"):
        load_problem(small_dir, "Prob014_andgate")
    with pytest.raises(FileNotFoundError, match="no VerilogEval problems"):
        load_problems(tmp_path / "empty")
    with pytest.raises(ProblemError, match="lacks prompt, reference"):
        RtlProblem.from_data({"name": "x"})
    with pytest.raises(ProblemError, match="Mismatches"):
        RtlProblem("x", "p", "module RefModule; endmodule", "module tb; endmodule")


def test_prepared_testbench_tags_the_verdict_and_drops_waveforms(counter: RtlProblem) -> None:
    text = counter.prepared_testbench("RLVR-abc")
    assert '$display("RLVR-abc Mismatches:' in text and "$dumpfile" not in text and "$dumpvars" not in text
    assert counter.reference_solution().count("module TopModule") == 1


def test_env_draws_from_a_user_directory(small_dir: Path, judge: RtlJudge) -> None:
    env = rlvr_gym.make("rtl/VerilogEval-v0", problems_dir=str(small_dir))
    names = {env.reset(seed=seed)[1]["problem"] for seed in range(8)}
    assert names == set(PICK)


def test_mutations_and_inverted_output_fail(counter: RtlProblem, judge: RtlJudge) -> None:
    found = mutations(counter.reference_solution())
    assert [label for label, _ in found][:2] == ["posedge->negedge", "==->!="]
    assert all("module TopModule" in m for _, m in found) and "negedge" in found[0][1]
    assert not judge.judge(counter, gold_action(found[0][1])).result.success
    inverted = inverted_output(counter.reference, judge.problem_facts(counter).ports)
    judgement = judge.judge(counter, gold_action(inverted))
    assert judgement.outcome.stage == "simulate" and not judgement.result.success
