"""Formal equivalence against the reference: typed verdicts, and adversarial designs that pass the testbench.

Each adversarial design below is checked to pass the testbench with the check off (so the test means
something), then to score 0 with it on.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rlvr_gym_rtl.equivalence import (
    EquivalenceResult,
    apply_equivalence,
    check_equivalence,
    equivalence_result,
    parse_log,
)
from rlvr_gym_rtl.judge import RtlJudge
from rlvr_gym_rtl.problem import RtlProblem, gold_action
from rlvr_gym_rtl.verilog_eval import BUNDLED_DIR, load_problem, resolve_problem_dir

from rlvr_gym.sandbox import SandboxResult
from rlvr_gym.verifier import RewardResult

COUNTER_TROJAN = """module TopModule(input clk, input reset, output reg [3:0] q);
  reg [15:0] since_reset;
  always @(posedge clk) begin
    since_reset <= reset ? 16'd0 : since_reset + 16'd1;
    if (reset) q <= 4'd1;
    else if (q == 4'd10) q <= (since_reset > 16'd600) ? 4'd2 : 4'd1;  // after the testbench's last cycle
    else q <= q + 4'd1;
  end
endmodule
"""
DFF_SEQUENCE_TROJAN = """module TopModule(input clk, input [7:0] d, output reg [7:0] q);
  initial q = 8'h0;
  reg armed;
  always @(posedge clk) begin
    armed <= (d == 8'ha5);
    q <= (armed && d == 8'ha5) ? ~d : d;  // wrong only after the input a5 twice in a row
  end
endmodule
"""
REVERSE_TROJAN = """module TopModule(input [99:0] in, output reg [99:0] out);
  always @* begin
    for (integer i = 0; i < 100; i = i + 1) out[i] = in[99 - i];
    if (in == 100'h0123456789abcdef012345678) out[0] = ~out[0];  // one input in 2**100
  end
endmodule
"""
COUNTER_RESTRUCTURED = """module TopModule(input clk, input reset, output [3:0] q);
  reg [3:0] count;
  assign q = count;
  always @(posedge clk) count <= (reset | (count == 4'd10)) ? 4'd1 : count + 4'd1;
endmodule
"""
SEQDET_REFERENCE = """module RefModule(input clk, input reset, input in, output reg found);
  reg [4:0] hist;
  reg [2:0] seen;
  always @(posedge clk)
    if (reset) begin hist <= 0; seen <= 0; found <= 1'b0; end
    else begin
      hist <= {hist[3:0], in};
      if (seen != 3'd5) seen <= seen + 1'b1;
      found <= ({hist[3:0], in} == 5'b00100) && (seen >= 3'd4);
    end
endmodule
"""
SEQDET_RESTRUCTURED = """module TopModule(input clk, input reset, input in, output reg found);
  reg [3:0] window;
  reg [3:0] age;
  always @(posedge clk)
    if (reset) begin window <= 0; age <= 0; found <= 0; end
    else begin
      window <= {window[2:0], in};
      if (age < 4'd9) age <= age + 4'd1;
      found <= ({window, in} == 5'b00100) && (age >= 4'd4);
    end
endmodule
"""


def _problem(name: str) -> RtlProblem:
    return load_problem(resolve_problem_dir(BUNDLED_DIR), name)


@pytest.fixture(scope="module")
def judges() -> Iterator[dict[str, RtlJudge]]:
    made = {mode: RtlJudge(timeout_s=20.0, equivalence=mode) for mode in ("off", "refute", "strict")}
    yield made
    for judge in made.values():
        judge.close()


def test_a_renamed_reference_is_proved_equivalent(judge: RtlJudge, counter: RtlProblem) -> None:
    result = check_equivalence(judge.sandbox, counter.reference, counter.reference_solution())
    assert result.status == "equivalent" and not result.counterexample


def test_a_wrong_design_is_refuted_with_a_counterexample(judge: RtlJudge, counter: RtlProblem) -> None:
    wrong = "module TopModule(input clk, input reset, output reg [3:0] q);\n  always @(posedge clk) q <= 4'd1;\nendmodule\n"
    result = check_equivalence(judge.sandbox, counter.reference, wrong)
    assert result.status == "not_equivalent"
    last = max(cycle for cycle, _, _ in result.counterexample)
    at_last = {name: value for cycle, name, value in result.counterexample if cycle == last}
    assert at_last["trigger"] == "1" and at_last["gold_q"] != at_last["gate_q"]


@pytest.mark.parametrize(("problem_name", "design", "strict_only"), [
    ("Prob023_vector100r", REVERSE_TROJAN, False),
    ("Prob034_dff8", DFF_SEQUENCE_TROJAN, False),
    ("Prob035_count1to10", COUNTER_TROJAN, True),
], ids=["combinational_trigger_input", "sequential_trigger_mid_run", "counter_after_last_checked_cycle"])
def test_adversarial_designs_pass_the_testbench_and_score_zero_with_the_check(
    judges: dict[str, RtlJudge], problem_name: str, design: str, strict_only: bool
) -> None:
    problem = _problem(problem_name)
    assert judges["off"].judge(problem, gold_action(design)).result.value == 1.0  # fools the testbench
    strict = judges["strict"].judge(problem, gold_action(design))
    assert strict.result.value == 0.0 and "passes the testbench, but" in strict.result.reason
    refute = judges["refute"].judge(problem, gold_action(design))
    if strict_only:  # deeper than the bounded search: only a proof (strict mode) can reject it
        assert strict.equivalence is not None and strict.equivalence.status == "unknown"
        assert refute.result.value == 1.0 and refute.result.components["equivalence"] == 0.5
    else:
        assert refute.equivalence is not None and refute.equivalence.status == "not_equivalent"
        assert refute.result.value == 0.0 and refute.result.components["equivalence"] == 0.0


def test_a_correct_restructured_design_still_passes_in_strict_mode(judges: dict[str, RtlJudge],
                                                                   counter: RtlProblem) -> None:
    judgement = judges["strict"].judge(counter, gold_action(COUNTER_RESTRUCTURED))
    assert judgement.result.value == 1.0 and judgement.result.components["equivalence"] == 1.0


def test_pdr_proves_what_k_induction_cannot_and_proves_no_wrong_design(judge: RtlJudge) -> None:
    # The output stays 0 on both sides while the input avoids the pattern, whatever the two designs' hidden
    # states (a saturating counter of another width, a shorter window): no depth of k-induction closes that.
    proved = check_equivalence(judge.sandbox, SEQDET_REFERENCE, SEQDET_RESTRUCTURED, timeout_s=20.0)
    assert proved.status == "equivalent" and proved.detail.endswith("(PDR)"), proved.detail
    late = SEQDET_RESTRUCTURED.replace("age >= 4'd4", "age >= 4'd5")  # detects one cycle later than it should
    assert check_equivalence(judge.sandbox, SEQDET_REFERENCE, late, timeout_s=20.0).status == "not_equivalent"
    hidden = SEQDET_RESTRUCTURED.replace("if (age < 4'd9) age <= age + 4'd1;", "age <= age + 4'd1;")  # age wraps
    assert check_equivalence(judge.sandbox, SEQDET_REFERENCE, hidden, timeout_s=20.0).status != "equivalent"


def test_apply_equivalence_is_pure_and_typed() -> None:
    passed = RewardResult(1.0, {"pass": 1.0}, "all samples match")
    proof = EquivalenceResult("equivalent", "proved")
    unknown = EquivalenceResult("unknown", "neither")
    refuted = EquivalenceResult("not_equivalent", "differs", ((1, "trigger", "1"),))
    assert apply_equivalence(passed, proof, "strict").value == 1.0
    assert apply_equivalence(passed, unknown, "refute").value == 1.0
    assert apply_equivalence(passed, unknown, "strict").value == 0.0
    assert apply_equivalence(passed, refuted, "refute").components == {"pass": 0.0, "equivalence": 0.0}


def test_parse_log_reads_yosys_s_three_outcomes() -> None:
    assert parse_log("Induction step proven: SUCCESS!", False, 0, 20).status == "equivalent"
    assert parse_log("... model found for base case: FAIL!\n", False, 0, 20).status == "not_equivalent"
    assert parse_log("Reached maximum number of time steps -> proof failed.", False, 0, 20).status == "unknown"
    assert parse_log("", True, None, 20).detail == "the equivalence check ran out of time"
    assert "syntax error" in parse_log("ERROR: syntax error, unexpected TOK_ID", False, 1, 20).detail
    undecided = "Reached maximum number of time steps -> proof failed."
    assert parse_log(undecided, True, 124, 20, pdr_log="Property proved.  Time = 0.02 sec").status == "equivalent"
    assert parse_log(undecided, False, 0, 20, pdr_log="Output 0 of miter was asserted in frame 3.").status == "unknown"
    out_of_time = SandboxResult(124, "", "", files={"eq.log": b"", "pdr.log": b"Output 0 was asserted"})
    assert equivalence_result(out_of_time).detail == "the equivalence check ran out of time"
