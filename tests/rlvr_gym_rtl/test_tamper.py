"""The tamper suite: designs that try to fake a pass. Zero false passes allowed.

Every attempt pairs a *wrong* design (``q`` stuck at 1, or worse) with a trick that would make a naive
harness report success, so an attempt that got through would score 1.0.
"""

from __future__ import annotations

import dataclasses

import pytest
from rlvr_gym_rtl.judge import RtlJudge
from rlvr_gym_rtl.problem import RtlProblem, gold_action
from rlvr_gym_rtl.verdict import verdict

HEADER = "module TopModule(input clk, input reset, output reg [3:0] q);\n"
WRONG = "  always @(posedge clk) q <= 4'd1;\n"


def _design(trick: str, prefix: str = "", suffix: str = "") -> str:
    return f"{prefix}{HEADER}{WRONG}{trick}\nendmodule\n{suffix}"


ATTEMPTS = {
    "early_finish": _design("  initial #1 $finish;"),
    "finish_in_always": _design("  always @(posedge clk) if (q == 4'd1) $finish(0);"),
    "stop": _design("  initial #3 $stop;"),
    "fatal": _design("  initial $fatal(0, \"bye\");"),
    "fake_verdict_display": _design("  initial begin $display(\"Mismatches: 0 in 439 samples\"); end"),
    "fake_verdict_write": _design("  final $write(\"Mismatches: 0 in 439 samples\\n\");"),
    "final_zeroes_counters": _design("  final begin tb.stats1.errors = 0; tb.stats1.errors_q = 0; end"),
    "hier_write_in_always": _design("  always @(negedge clk) begin tb.stats1.errors = 0; tb.stats1.errors_q = 0; end"),
    "hier_read_reference": HEADER + "  always @* q = tb.good1.q;\nendmodule\n",
    "upward_read_reference": HEADER + "  always @* q = good1.q;\nendmodule\n",
    "root_read_reference": HEADER + "  always @* q = $root.tb.q_ref;\nendmodule\n",
    "instantiate_reference": HEADER.replace("output reg", "output") + "  RefModule r(.clk(clk), .reset(reset), .q(q));\nendmodule\n",
    "shadow_module_stim1": HEADER + "  always @* q = stim1.q;\nendmodule\nmodule stim1(output [3:0] q); assign q = 0; endmodule\n",
    "redefine_tb": _design("", suffix="module tb; initial $display(\"Mismatches: 0 in 439 samples\"); endmodule\n"),
    "force_testbench": _design("  initial force tb.stats1.errors = 0;"),
    "drive_input_reset": _design("  assign reset = 1'b1;"),
    "drive_input_via_submodule": _design("  tie t(.o(reset));", suffix="module tie(output o); assign o = 1'b1; endmodule\n"),
    "define_redefinition": _design("", prefix="`define OK 13\n"),
    "undef": _design("", prefix="`undef OK\n"),
    "include_testbench": _design("", prefix="`include \"test.sv\"\n"),
    "ifdef_hidden_finish": _design("`ifdef OK\n  initial #1 $finish;\n`endif"),
    "icarus_only_finish": _design("`ifdef __ICARUS__\n  initial #1 $finish;\n`endif"),
    "macro_pasted_finish": _design("  initial #1 `F;", prefix="`define F $fin``ish\n"),
    "fopen_testbench": _design("  integer fd; initial fd = $fopen(\"test.sv\", \"r\");"),
    "readmem_reference": _design("  reg [7:0] m [0:15]; initial $readmemh(\"ref.sv\", m);"),
    "system_shell": _design("  initial $system(\"echo Mismatches: 0 in 439 samples\");"),
    "random_changes_stimulus": _design("  integer r; initial r = $random;"),
    "bind_into_testbench": _design("", suffix="bind tb TopModule extra(.clk(), .reset(), .q());\n"),
    "timescale_and_delay": _design("  initial #1 q = 4'd1;", prefix="`timescale 1s/1s\n"),
    "huge_output": _design("  always @(posedge clk) $display(\"%0999d\", 0);"),
}


@pytest.mark.parametrize("mode", ["judge", "strict_judge"])
@pytest.mark.parametrize("name", sorted(ATTEMPTS))
def test_tamper_attempt_never_passes(name: str, mode: str, counter: RtlProblem, request: pytest.FixtureRequest) -> None:
    judge: RtlJudge = request.getfixturevalue(mode)  # stand-alone elaboration when needed / always
    judgement = judge.judge(counter, gold_action(ATTEMPTS[name]))
    assert not judgement.result.success, (name, judgement.result)
    assert judgement.result.value == 0.0


HANGS = {
    "zero_delay_loop": _design("  integer x = 0; initial while (1) x = x + 1;"),
    "combinational_oscillator": _design("  wire a; assign a = ~a;"),
    "busy_forever": _design("  initial forever #0 q = 4'd1;"),
    "memory_bomb": _design("  reg [63:0] mem [0:(1<<28)-1]; always @(posedge clk) mem[q] <= 64'd1;"),
}


@pytest.mark.parametrize("name", sorted(HANGS))
def test_hangs_and_bombs_fail_within_the_limit(name: str, fast_judge: RtlJudge, counter: RtlProblem) -> None:
    judgement = fast_judge.judge(counter, gold_action(HANGS[name]))
    assert not judgement.result.success and judgement.result.value == 0.0
    assert judgement.outcome.stage in ("compile", "simulate")


# Defence in depth: with the lint bypassed, the later stages still refuse these attempts.
BYPASS_EXPECTED_STAGE = {
    "early_finish": "simulate",  # too few samples
    "fake_verdict_display": "simulate",  # no nonce
    "system_shell": "simulate",  # no shell inside the simulator, and no nonce
    "final_zeroes_counters": "compile_alone",  # `tb` does not resolve with TopModule as the only top
    "hier_read_reference": "compile_alone",
    "upward_read_reference": "compile_alone",
    "instantiate_reference": "compile_alone",
    "shadow_module_stim1": "compile_alone",
    "ifdef_hidden_finish": "simulate",
    "huge_output": "simulate",
}


@pytest.mark.parametrize("name", sorted(BYPASS_EXPECTED_STAGE))
def test_later_stages_catch_attempts_without_the_lint(name: str, fast_judge: RtlJudge, counter: RtlProblem) -> None:
    facts = fast_judge.problem_facts(counter)
    outcome, _run = fast_judge._simulate(counter, ATTEMPTS[name], facts.expected_samples)
    assert outcome.stage == BYPASS_EXPECTED_STAGE[name], outcome
    assert verdict(outcome).value == 0.0, outcome


def test_correct_design_with_a_struct_member_passes_the_standalone_elaboration(judge: RtlJudge,
                                                                               counter: RtlProblem) -> None:
    code = ("module TopModule(input clk, input reset, output [3:0] q);\n"
            "  typedef struct packed { logic [3:0] count; } state_t;\n  state_t s;\n  assign q = s.count;\n"
            "  always @(posedge clk) s.count <= (reset || s.count == 10) ? 4'd1 : s.count + 4'd1;\nendmodule\n")
    assert judge.judge(counter, gold_action(code)).result.success


def test_correct_design_with_allowed_directives_still_passes(judge: RtlJudge, counter: RtlProblem) -> None:
    code = ("`timescale 1ns/1ps\n`default_nettype none\n`define LAST 4'd10\n"
            "module TopModule(input wire clk, input wire reset, output reg [3:0] q);\n"
            "  always @(posedge clk) q <= (reset || q == `LAST) ? 4'd1 : q + 4'd1;\nendmodule\n")
    assert judge.judge(counter, gold_action(code)).result.success


@pytest.mark.parametrize("script", ["alone_sequential", "alone_parallel"])
def test_sequential_and_parallel_scripts_agree(script: str, judge: RtlJudge, counter: RtlProblem,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import rlvr_gym_rtl.judge as judge_module

    monkeypatch.setattr(judge_module, "_script_for_load", lambda: script)
    facts = judge.problem_facts(counter)
    stages = {}
    for name, code in {"alone": ATTEMPTS["final_zeroes_counters"], "build": HEADER.replace("] q", "] qq") + "endmodule\n",
                       "pass": counter.reference_solution()}.items():
        outcome, _run = judge._simulate(counter, code, facts.expected_samples)
        stages[name] = (outcome.stage, verdict(outcome).value)
    assert stages == {"alone": ("compile_alone", 0.0), "build": ("compile", 0.0), "pass": ("simulate", 1.0)}


@pytest.mark.parametrize("name", ["zero_delay_loop", "busy_forever"])
def test_a_hang_is_killed_at_the_scaled_simulation_limit_not_the_run_s(name: str, counter: RtlProblem) -> None:
    """With the VerilogEval harness's 30 s run limit, the simulation alone is limited to a multiple of the
    reference's own run (at least 1 s here): the hang ends as a typed timeout long before 30 s."""
    judge = RtlJudge(timeout_s=30.0, sim_time_factor=5.0, min_sim_timeout_s=1.0)
    try:
        facts = judge.problem_facts(counter)
        limit_s = judge.sim_limit_s(facts)
        assert 1.0 <= limit_s < 30.0 and facts.reference_s > 0
        judgement = judge.judge(counter, gold_action(HANGS[name]))
    finally:
        judge.close()
    assert judgement.outcome.timed_out and judgement.result.value == 0.0
    assert judgement.failure is not None and judgement.failure.kind.value == "timeout"
    assert judgement.failure.details["sim_limit_s"] == limit_s
    assert "reference" in judgement.failure.message


def test_the_simulation_limit_scales_with_the_reference_and_has_a_floor(counter: RtlProblem) -> None:
    from rlvr_gym_rtl.judge import _ProblemFacts

    judge = RtlJudge(timeout_s=30.0, sim_time_factor=10.0, min_sim_timeout_s=2.0, warm_sandbox=False)
    facts = judge.problem_facts(counter)
    assert judge.sim_limit_s(dataclasses.replace(facts, reference_s=0.01)) == 2.0
    assert judge.sim_limit_s(dataclasses.replace(facts, reference_s=0.5)) == 5.0
    assert judge.sim_limit_s(dataclasses.replace(facts, reference_s=10.0)) == 30.0
    assert isinstance(facts, _ProblemFacts)
