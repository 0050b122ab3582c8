"""The pure verdict: parsing testbench output and scoring, without a simulator."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rlvr_gym_rtl.verdict import JudgeOutcome, RewardConfig, SimSummary, feedback, parse_sim_output, verdict

NONCE = "RLVR-0123456789abcdef"
OUTPUT = f"""Hint: Your reset doesn't seem to be working.
Hint: Output 'q' has 12 mismatches. First mismatch occurred at time 40.
Hint: Output 'z' has no mismatches.
Hint: Total mismatched samples is 12 out of 400 samples

Simulation finished at 2000 ps
{NONCE} Mismatches: 12 in 400 samples
"""


def _simulated(mismatches: int, samples: int, expected: int = 400, **kw: object) -> JudgeOutcome:
    sim = SimSummary(mismatches, samples, 1)
    return JudgeOutcome("simulate", exit_code=kw.pop("exit_code", 0), sim=sim, expected_samples=expected, **kw)  # type: ignore[arg-type]


def test_parse_reads_nonce_tagged_verdict_and_hints() -> None:
    sim = parse_sim_output(OUTPUT, NONCE)
    assert (sim.mismatches, sim.samples, sim.verdict_lines) == (12, 400, 1)
    assert sim.output_mismatches == {"q": (12, 40)}
    assert sim.hints == ("Hint: Your reset doesn't seem to be working.",)
    assert not sim.timeout_printed


def test_parse_ignores_untagged_and_rejects_duplicate_verdicts() -> None:
    spoofed = "Mismatches: 0 in 400 samples\n" + OUTPUT.replace(NONCE, "RLVR-ffffffffffffffff")
    assert parse_sim_output(spoofed, NONCE).mismatches is None
    doubled = OUTPUT + f"{NONCE} Mismatches: 0 in 400 samples\n"
    sim = parse_sim_output(doubled, NONCE)
    assert sim.verdict_lines == 2 and sim.mismatches is None


def test_pass_needs_zero_mismatches_and_the_reference_sample_count() -> None:
    assert verdict(_simulated(0, 400)).value == 1.0
    early = verdict(_simulated(0, 0))
    assert early.value == 0.0 and "0 samples" in early.reason
    assert verdict(_simulated(0, 399)).value == 0.0
    assert verdict(_simulated(0, 401)).value == 0.0
    assert verdict(_simulated(1, 400)).value == 0.0


@pytest.mark.parametrize("kw", [{"timed_out": True}, {"exit_code": 1}, {"exit_code": None}, {"killed_by": "memory"}])
def test_abnormal_end_fails_whatever_was_printed(kw: dict[str, object]) -> None:
    result = verdict(_simulated(0, 400, **kw))
    assert result.value == 0.0 and result.components["sim_completed"] == 0.0


def test_partial_credit_is_the_scaled_matching_fraction() -> None:
    config = RewardConfig(partial_credit=True, partial_scale=0.5)
    # 100 of 400 samples mismatch: match fraction 0.75, reward 0.5 * 0.75 = 0.375
    result = verdict(_simulated(100, 400), config)
    assert result.value == pytest.approx(0.375)
    assert result.components["match_fraction"] == pytest.approx(0.75)
    assert verdict(_simulated(0, 400), config).value == 1.0
    assert verdict(_simulated(0, 200), config).value == 0.0  # samples missing: nothing is credited
    assert verdict(JudgeOutcome("compile"), config).value == 0.0


def test_synthesis_requirement() -> None:
    config = RewardConfig(require_synthesis=True)
    assert verdict(_simulated(0, 400, synthesizable=True), config).value == 1.0
    failed = verdict(_simulated(0, 400, synthesizable=False), config)
    assert failed.value == 0.0 and failed.components["synthesizable"] == 0.0
    with pytest.raises(ValueError, match="partial_scale"):
        RewardConfig(partial_scale=1.0)


def test_components_track_the_stage_reached() -> None:
    lint = verdict(JudgeOutcome("lint", ("`$finish` is not allowed",)))
    assert lint.components["lint"] == 0.0 and "$finish" in lint.reason
    compiled = verdict(JudgeOutcome("compile", compile_log="cand.sv:3: syntax error\n"))
    assert compiled.components == {"lint": 1.0, "compiled": 0.0, "sim_completed": 0.0, "match_fraction": 0.0,
                                   "pass": 0.0}
    assert "cand.sv:3: syntax error" in compiled.reason


def test_feedback_names_mismatching_outputs_first_mismatch_first() -> None:
    sim = parse_sim_output(OUTPUT, NONCE)
    outcome = JudgeOutcome("simulate", exit_code=0, sim=sim, expected_samples=400)
    text = feedback(outcome, verdict(outcome))
    assert text.startswith("FAIL: 12 mismatches in 400 samples")
    assert "output 'q': 12 mismatches, first at time 40 ps" in text and "reset" in text
    outcome = JudgeOutcome("compile", compile_log="cand.sv:3: syntax error")
    assert "cand.sv:3: syntax error" in feedback(outcome, verdict(outcome))


@given(
    mismatches=st.integers(0, 500), samples=st.integers(0, 500), expected=st.integers(1, 500),
    exit_code=st.sampled_from([0, 1, -9, None]), timed_out=st.booleans(),
    killed_by=st.sampled_from([None, "memory", "output"]), partial=st.booleans(),
)
def test_pass_rule_property(mismatches: int, samples: int, expected: int, exit_code: int | None,
                            timed_out: bool, killed_by: str | None, partial: bool) -> None:
    sim = SimSummary(mismatches, samples, 1)
    outcome = JudgeOutcome("simulate", exit_code=exit_code, timed_out=timed_out, killed_by=killed_by, sim=sim,
                           expected_samples=expected)
    result = verdict(outcome, RewardConfig(partial_credit=partial))
    should_pass = (mismatches == 0 and samples == expected and exit_code == 0 and not timed_out
                   and killed_by is None)
    assert result.success == should_pass and (result.value == 1.0) == should_pass
    assert 0.0 <= result.value <= 1.0
    if not should_pass:
        assert result.value <= 0.5  # partial credit never reaches a pass
