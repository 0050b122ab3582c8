"""Extraction and the pyslang lint (no simulator needed)."""

from __future__ import annotations

import pytest
from rlvr_gym_rtl.lint import Port, extract_code, harness_names, has_dotted_names, lint_candidate, module_ports
from rlvr_gym_rtl.problem import RtlProblem

PORTS = [Port("clk", "In", 1), Port("reset", "In", 1), Port("q", "Out", 4)]
GOOD = """module TopModule(input clk, input reset, output reg [3:0] q);
  always @(posedge clk) q <= (reset || q == 10) ? 4'd1 : q + 4'd1;
endmodule
"""


@pytest.fixture(scope="module")
def names(counter: RtlProblem):  # type: ignore[no-untyped-def]
    return harness_names(counter.testbench, counter.reference)


def test_extract_prefers_the_last_verilog_fence() -> None:
    action = f"Thinking...\n```python\nprint(1)\n```\nfirst try:\n```verilog\nmodule A; endmodule\n```\nfinal:\n```systemverilog\n{GOOD}```"
    assert extract_code(action) == GOOD
    assert extract_code(f"Here is the module you asked for:\n{GOOD.strip()} hope it helps") == GOOD
    assert extract_code(f"`timescale 1ns/1ps\n{GOOD}") == f"`timescale 1ns/1ps\n{GOOD}"
    assert extract_code("no code here") is None
    flat = GOOD.replace("\n", " ")
    assert extract_code(f"``` verilog {flat} ```") == flat.strip() + "\n"  # word-level decoding
    assert extract_code(f"```verilog\n{GOOD}") == GOOD  # unclosed (truncated) block
    assert extract_code(f"```{flat}```") == flat.strip() + "\n"
    assert extract_code(f"so: {flat}") == flat.strip() + "\n"


def test_harness_names_and_reference_ports(names, counter: RtlProblem) -> None:  # type: ignore[no-untyped-def]
    assert {"tb", "stimulus_gen", "RefModule"} <= names.modules
    assert {"stim1", "good1", "top_module1"} <= names.instances
    assert {"OK", "INCORRECT"} <= names.macros
    assert module_ports(counter.reference, "RefModule") == PORTS


@pytest.mark.parametrize("prefix", ["", "`timescale 1ns / 1ps\n", "`default_nettype none\n",
                                    "`define NEXT(x) ((x) + 4'd1)\n"])
def test_ordinary_designs_pass(prefix: str, names) -> None:  # type: ignore[no-untyped-def]
    helper = "\nmodule helper(input [3:0] a, output [3:0] y); assign y = a; endmodule\n"
    package = "package p; localparam int TEN = 10; endpackage\n"
    code = prefix + package + GOOD.replace("q == 10", "q == p::TEN") + helper
    assert lint_candidate(code, PORTS, names) == []


@pytest.mark.parametrize("snippet, expected", [
    ("initial $finish;", "$finish"),
    ("initial $display(\"Mismatches: 0 in 439 samples\");", "$display"),
    ("always @(posedge clk) $strobe(\"x\");", "$strobe"),
    ("integer f; initial f = $fopen(\"test.sv\", \"r\");", "$fopen"),
    ("reg [7:0] m [0:3]; initial $readmemh(\"ref.sv\", m);", "$readmemh"),
    ("initial $system(\"rm -rf /\");", "$system"),
    ("initial $dumpfile(\"x.vcd\");", "$dumpfile"),
    ("wire r = $random;", "$random"),
    ("final tb.stats1.errors = 0;", "final"),
    ("always @(posedge clk) tb.stats1.errors = 0;", "tb.stats1.errors"),
    ("wire [3:0] copy = good1.q;", "good1.q"),
    ("wire w = $root.tb.clk;", "$root"),
    ("initial force tb.clk = 0;", "force"),
    ("initial release q;", "release"),
    ("defparam tb.x = 1;", "defparam"),
    ("RefModule cheat(.clk(clk), .reset(reset), .q());", "RefModule"),
    ("assign reset = 1'b0;", "input port `reset`"),
    ("`define OK 0\n", "redefines a testbench macro"),
    ("`undef OK\n", "`undef"),
    ("`include \"test.sv\"\n", "`include"),
    ("`ifdef __ICARUS__\ninitial $finish;\n`endif\n", "`ifdef"),
    ("`define F $fin``ish\ninitial `F;\n", "$finish"),
])
def test_forbidden_constructs_are_rejected(snippet: str, expected: str, names) -> None:  # type: ignore[no-untyped-def]
    code = GOOD.replace("endmodule", snippet + "\nendmodule")
    problems = lint_candidate(code, PORTS, names)
    assert any(expected in p for p in problems), problems


@pytest.mark.parametrize("code, expected", [
    (GOOD.replace("TopModule", "Top"), "no module named `TopModule`"),
    (GOOD.replace("output reg [3:0] q", "output reg [4:0] q"), "wrong interface"),
    (GOOD.replace("input reset", "input rst").replace("reset ||", "rst ||"), "wrong interface"),
    (GOOD + "module tb; endmodule\n", "reserved by the testbench"),
    (GOOD + "module stim1(output x); endmodule\n", "reserved by the testbench"),
    (GOOD + "primitive RefModule(output o, input a); table 0 : 0; 1 : 1; endtable endprimitive\n", "reserved"),
    (GOOD + "package good1; endpackage\n", "reserved by the testbench"),
    (GOOD + "program p; endprogram\n", "`program`"),
    (GOOD + "interface i; endinterface\n", "interfaces"),
    (GOOD + "class C; endclass\n", "classes"),
    (GOOD + "bind TopModule helper h();\n", "bind"),
    (GOOD.replace("endmodule", "specify endspecify\nendmodule"), "specify"),
    ("module TopModule(input clk, inout reset, output [3:0] q); endmodule", "inout"),
    (GOOD.replace("always", "alwayz"), "syntax error"),
    (GOOD.replace("endmodule", "genvar i;\nfor (i = 0; i < 100000000; i = i + 1) begin : g wire w; end\nendmodule"),
     "exceeds elaboration limits"),
])
def test_structure_and_interface_problems(code: str, expected: str, names) -> None:  # type: ignore[no-untyped-def]
    problems = lint_candidate(code, PORTS, names)
    assert any(expected in p for p in problems), problems


def test_driving_an_input_through_a_submodule_output_is_rejected(names) -> None:  # type: ignore[no-untyped-def]
    code = GOOD.replace("endmodule", "drv d(.o(reset));\nendmodule") + "module drv(output o); assign o = 1'b0; endmodule\n"
    assert any("input port `reset`" in p for p in lint_candidate(code, PORTS, names))


def test_dotted_names_are_detected_but_not_port_connections() -> None:
    assert not has_dotted_names(GOOD)
    assert not has_dotted_names(GOOD.replace("endmodule", "sub u(.a(q), .y());\nendmodule"))
    assert has_dotted_names(GOOD.replace("endmodule", "wire w = u.y;\nendmodule"))
    assert has_dotted_names(GOOD.replace("endmodule", "wire w = $root.tb.clk;\nendmodule"))
