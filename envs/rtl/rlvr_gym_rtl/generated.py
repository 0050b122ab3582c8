"""Generated RTL problems: unlimited, seeded, parametric spec-to-RTL tasks with references and testbenches.

Each problem kind draws its parameters from a ``numpy`` generator and returns a spec, the ports and a
reference body; :func:`generate_problem` wraps them in VerilogEval's conventions (module ``TopModule`` in the
spec, ``RefModule`` in the reference, a ``tb`` that drives both with the same random stimulus, compares every
output on both clock edges with VerilogEval's X-tolerant match, and prints per-output hints and
``Mismatches: N in M samples``), so the same judge scores both families.

Kinds: combinational ``mux``, ``adder``, ``comparator``, ``reduce``, ``decoder``, ``priority``; sequential
``counter``, ``shift``, ``edge``, ``seqdet`` (a sequence-detector FSM). Sequential problems have an
active-high synchronous ``reset`` and trigger on the rising edge of ``clk``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from rlvr_gym_rtl.problem import RtlProblem


@dataclasses.dataclass(frozen=True)
class Design:
    """What a kind generator returns: spec text, ports ``(direction, name, width)`` and the reference body."""

    kind: str
    description: str
    ports: tuple[tuple[str, str, int], ...]
    body: str
    sequential: bool


def _w(width: int) -> str:
    return f"[{width - 1}:0] " if width > 1 else ""


def _mux(rng: np.random.Generator) -> Design:
    n, w = int(rng.choice([2, 4, 8])), int(rng.integers(1, 9))
    sel_w = n.bit_length() - 1
    ports = (("input", "sel", sel_w), *(("input", f"in{i}", w) for i in range(n)), ("output", "out", w))
    cases = "\n".join(f"      {sel_w}'d{i}: out = in{i};" for i in range(n))
    body = f"  always @(*) begin\n    case (sel)\n{cases}\n      default: out = {w}'d0;\n    endcase\n  end\n"
    desc = f"The module is a {n}-to-1 multiplexer: out equals in<sel> (in0 when sel is 0, in1 when sel is 1, ...)."
    return Design("mux", desc, ports, body, False)


def _adder(rng: np.random.Generator) -> Design:
    w, cin = int(rng.integers(2, 17)), bool(rng.integers(0, 2))
    ports = (("input", "a", w), ("input", "b", w), *((("input", "cin", 1),) if cin else ()),
             ("output", "sum", w), ("output", "cout", 1))
    body = f"  assign {{cout, sum}} = a + b{' + cin' if cin else ''};\n"
    desc = (f"The module adds the two {w}-bit unsigned numbers a and b{' and the carry-in cin' if cin else ''}. "
            f"sum is the low {w} bits of the result and cout is the carry out of the most significant bit.")
    return Design("adder", desc, ports, body, False)


def _comparator(rng: np.random.Generator) -> Design:
    w, signed = int(rng.integers(2, 13)), bool(rng.integers(0, 2))
    ports = (("input", "a", w), ("input", "b", w), ("output", "eq", 1), ("output", "lt", 1), ("output", "gt", 1))
    cast = ("$signed(a)", "$signed(b)") if signed else ("a", "b")
    body = (f"  assign eq = a == b;\n  assign lt = {cast[0]} < {cast[1]};\n  assign gt = {cast[0]} > {cast[1]};\n")
    kind = "two's-complement signed" if signed else "unsigned"
    desc = (f"The module compares a and b as {kind} {w}-bit numbers: eq is 1 when a equals b, lt is 1 when "
            "a is less than b, and gt is 1 when a is greater than b.")
    return Design("comparator", desc, ports, body, False)


def _reduce(rng: np.random.Generator) -> Design:
    w = int(rng.integers(3, 17))
    op = str(rng.choice(["and", "or", "xor", "popcount"]))
    if op == "popcount":
        out_w = w.bit_length()
        ports = (("input", "in", w), ("output", "out", out_w))
        terms = " + ".join(f"{{{out_w - 1}'d0, in[{i}]}}" for i in range(w))
        desc = f"The module counts the 1 bits of the {w}-bit input in: out is the number of bits of in that are 1."
        return Design("reduce", desc, ports, f"  assign out = {terms};\n", False)
    symbol = {"and": "&", "or": "|", "xor": "^"}[op]
    meaning = {"and": "1 when every bit of in is 1", "or": "1 when any bit of in is 1",
               "xor": "1 when an odd number of bits of in are 1 (even parity bit)"}[op]
    ports = (("input", "in", w), ("output", "out", 1))
    return Design("reduce", f"The module reduces the {w}-bit input in: out is {meaning}.", ports,
                  f"  assign out = {symbol}in;\n", False)


def _decoder(rng: np.random.Generator) -> Design:
    n = int(rng.integers(2, 5))
    ports = (("input", "en", 1), ("input", "in", n), ("output", "out", 2**n))
    body = f"  assign out = en ? ({2**n}'d1 << in) : {2**n}'d0;\n"
    desc = (f"The module is a {n}-to-{2**n} decoder with enable: when en is 1, bit in of out is 1 and all "
            "other bits are 0; when en is 0, out is all zeros.")
    return Design("decoder", desc, ports, body, False)


def _priority(rng: np.random.Generator) -> Design:
    w, highest = int(rng.choice([4, 8, 16])), bool(rng.integers(0, 2))
    idx_w = (w - 1).bit_length()
    ports = (("input", "in", w), ("output", "pos", idx_w), ("output", "valid", 1))
    order = range(w) if highest else range(w - 1, -1, -1)
    loop = "\n".join(f"    if (in[{i}]) pos = {idx_w}'d{i};" for i in order)
    body = f"  assign valid = |in;\n  always @(*) begin\n    pos = {idx_w}'d0;\n{loop}\n  end\n"
    which = "highest" if highest else "lowest"
    desc = (f"The module is a {w}-bit priority encoder: pos is the index of the {which}-numbered bit of in that "
            "is 1, and valid is 1 when any bit is 1. When in is zero, pos is 0 and valid is 0.")
    return Design("priority", desc, ports, body, False)


def _counter(rng: np.random.Generator) -> Design:
    w = int(rng.integers(3, 7))
    modulus, start = int(rng.integers(3, 2**w + 1)), 0
    start = int(rng.integers(0, modulus))
    ports = (("input", "clk", 1), ("input", "reset", 1), ("input", "ena", 1), ("output", "q", w))
    body = (f"  always @(posedge clk)\n    if (reset) q <= {w}'d{start};\n    else if (ena) q <= "
            f"(q == {w}'d{modulus - 1}) ? {w}'d0 : q + 1'b1;\n")
    desc = (f"The module is a {w}-bit counter that counts 0, 1, ..., {modulus - 1}, 0, 1, ... : on each rising "
            f"edge of clk where ena is 1 it increments q, wrapping from {modulus - 1} back to 0 (if q is ever "
            f"above {modulus - 1} it still just increments). reset is active-high synchronous and sets q to {start}; it has "
            "priority over ena.")
    return Design("counter", desc, ports, body, True)


def _shift(rng: np.random.Generator) -> Design:
    w, left = int(rng.integers(4, 9)), bool(rng.integers(0, 2))
    ports = (("input", "clk", 1), ("input", "reset", 1), ("input", "load", 1), ("input", "d", w),
             ("input", "sin", 1), ("output", "q", w))
    shifted = f"{{q[{w - 2}:0], sin}}" if left else f"{{sin, q[{w - 1}:1]}}"
    body = (f"  always @(posedge clk)\n    if (reset) q <= {w}'d0;\n    else if (load) q <= d;\n"
            f"    else q <= {shifted};\n")
    way = "left (towards the most significant bit), sin entering at q[0]" if left else \
        f"right (towards the least significant bit), sin entering at q[{w - 1}]"
    desc = (f"The module is a {w}-bit shift register. On each rising edge of clk: if reset (active-high, "
            "synchronous) is 1, q becomes 0; otherwise if load is 1, q becomes d; otherwise q shifts "
            f"{way}.")
    return Design("shift", desc, ports, body, True)


def _edge(rng: np.random.Generator) -> Design:
    w, mode = int(rng.integers(1, 9)), str(rng.choice(["rising", "falling", "any"]))
    ports = (("input", "clk", 1), ("input", "reset", 1), ("input", "in", w), ("output", "out", w))
    expr = {"rising": "in & ~prev", "falling": "~in & prev", "any": "in ^ prev"}[mode]
    body = (f"  reg {_w(w)}prev;\n  always @(posedge clk)\n    if (reset) begin prev <= {w}'d0; out <= {w}'d0; end\n"
            f"    else begin prev <= in; out <= {expr}; end\n")
    change = {"rising": "went from 0 to 1", "falling": "went from 1 to 0", "any": "changed value"}[mode]
    desc = (f"The module detects {mode} edges on each bit of the {w}-bit input in, sampled at the rising edge "
            f"of clk. After each rising edge of clk, out[i] is 1 when in[i] {change} between the previous "
            "clock edge and this one, else 0. reset is active-high synchronous: it clears out and makes the "
            "remembered previous value of in 0.")
    return Design("edge", desc, ports, body, True)


def _seqdet(rng: np.random.Generator) -> Design:
    length = int(rng.integers(3, 6))
    pattern = "".join(str(int(b)) for b in rng.integers(0, 2, size=length))
    ports = (("input", "clk", 1), ("input", "reset", 1), ("input", "in", 1), ("output", "found", 1))
    cnt_w = length.bit_length()
    body = (f"  reg [{length - 1}:0] hist;\n  reg [{cnt_w - 1}:0] seen;\n  always @(posedge clk)\n"
            f"    if (reset) begin hist <= 0; seen <= 0; found <= 1'b0; end\n    else begin\n"
            f"      hist <= {{hist[{length - 2}:0], in}};\n"
            f"      if (seen != {cnt_w}'d{length}) seen <= seen + 1'b1;\n"
            f"      found <= ({{hist[{length - 2}:0], in}} == {length}'b{pattern}) && "
            f"(seen >= {cnt_w}'d{length - 1});\n    end\n")
    desc = (f"The module is a Moore state machine that detects the bit sequence {pattern} (first bit first) on "
            "the serial input in, sampled at each rising edge of clk. Overlapping occurrences count. After the "
            f"rising edge at which the last {length} bits received since reset, oldest first, equal {pattern}, "
            "found is 1 for that clock cycle; otherwise found is 0. reset is active-high synchronous: it makes "
            "found 0 and forgets every bit received before it.")
    return Design("seqdet", desc, ports, body, True)


KINDS: dict[str, Callable[[np.random.Generator], Design]] = {
    "mux": _mux, "adder": _adder, "comparator": _comparator, "reduce": _reduce, "decoder": _decoder,
    "priority": _priority, "counter": _counter, "shift": _shift, "edge": _edge, "seqdet": _seqdet,
}
"""Problem kinds, by name."""
EASY_KINDS = ("adder", "comparator", "decoder", "mux", "reduce")
"""Combinational kinds whose references are one or two lines (for small policies)."""


def generate_problem(seed: int, kind: str | None = None) -> RtlProblem:
    """Generates one problem from a seed (the same seed and kind always give the same problem).

    Args:
        seed: any non-negative int.
        kind: one of :data:`KINDS`, or None to draw one from the seed.

    Raises:
        ValueError: on an unknown kind or a negative seed.
    """
    if seed < 0:
        raise ValueError(f"seed must be >= 0, got {seed}")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"unknown problem kind {kind!r}; choose one of {', '.join(KINDS)}")
    rng = np.random.default_rng(seed)
    kind = kind or str(rng.choice(sorted(KINDS)))
    design = KINDS[kind](rng)
    samples = int(rng.integers(150, 400))
    name = f"gen_{kind}_{seed}"
    return RtlProblem(name, _prompt(design), _reference(design), _testbench(design, samples, seed))


def _port_lines(design: Design) -> str:
    return "\n".join(f" - {d:<6} {n}" + (f" ({w} bits)" if w > 1 else "") for d, n, w in design.ports)


def _prompt(design: Design) -> str:
    clock = ("\nAssume all sequential logic is triggered on the positive edge of the clock.\n"
             if design.sequential else "\n")
    return ("I would like you to implement a module named TopModule with the following\ninterface. All input "
            "and output ports are one bit unless otherwise\nspecified.\n\n" + _port_lines(design) + "\n\n"
            + design.description + clock)


def _reference(design: Design) -> str:
    decls = ",\n".join(f"  {d} {'reg ' if d == 'output' and _is_procedural(design, n) else ''}{_w(w)}{n}"
                       for d, n, w in design.ports)
    return f"module RefModule (\n{decls}\n);\n\n{design.body}\nendmodule\n"


def _is_procedural(design: Design, name: str) -> bool:
    return f" {name} =" in design.body or f" {name} <=" in design.body or f"{name} <= " in design.body


def _testbench(design: Design, samples: int, seed: int) -> str:
    inputs = [(n, w) for d, n, w in design.ports if d == "input" and n != "clk"]
    outputs = [(n, w) for d, n, w in design.ports if d == "output"]
    return _stimulus(design, inputs, samples, seed) + "\n" + _tb_module(design, inputs, outputs)


def _stimulus(design: Design, inputs: list[tuple[str, int]], samples: int, seed: int) -> str:
    decls = "".join(f",\n\toutput reg {_w(w)}{n}" for n, w in inputs)
    data = [(n, w) for n, w in inputs if n != "reset"]
    data_names = ", ".join(n for n, _ in data)
    words = ", ".join(["$random(seed)"] * max(1, -(-sum(w for _, w in data) // 32)))
    has_reset = any(n == "reset" for n, _ in inputs)
    reset_init = "\t\treset <= 1'b1;\n\t\trepeat(2) @(posedge clk);\n\t\treset <= 1'b0;\n" if has_reset else ""
    reset_rand = "\t\t\treset <= !($random(seed) & 31);\n" if has_reset else ""
    return (
        "`timescale 1 ps/1 ps\n\nmodule stimulus_gen (\n\tinput clk" + decls + "\n);\n"
        f"\tinteger seed = {seed % 2**31};\n\tinitial begin\n\t\t{{{data_names}}} <= 0;\n{reset_init}"
        f"\t\trepeat({samples}) @(posedge clk, negedge clk) begin\n\t\t\t{{{data_names}}} <= {{{words}}};\n"
        f"{reset_rand}\t\tend\n\t\t#1 $finish;\n\tend\nendmodule\n"
    )


def _tb_module(design: Design, inputs: list[tuple[str, int]], outputs: list[tuple[str, int]]) -> str:
    stats = "".join(f"\t\tint errors_{n};\n\t\tint errortime_{n};\n" for n, _ in outputs)
    signals = "".join(f"\tlogic {_w(w)}{n};\n" for n, w in inputs)
    signals += "".join(f"\tlogic {_w(w)}{n}_ref;\n\tlogic {_w(w)}{n}_dut;\n" for n, w in outputs)
    clk_conn = [".clk(clk)"] if any(n == "clk" for _, n, _ in design.ports) else []
    in_conn = clk_conn + [f".{n}({n})" for n, _ in inputs]
    ref_conn = ", ".join(in_conn + [f".{n}({n}_ref)" for n, _ in outputs])
    dut_conn = ", ".join(in_conn + [f".{n}({n}_dut)" for n, _ in outputs])
    stim_conn = ", ".join([".clk(clk)"] + [f".{n}({n})" for n, _ in inputs])
    hints = "".join(
        f"\t\tif (stats1.errors_{n}) $display(\"Hint: Output '%s' has %0d mismatches. First mismatch occurred at "
        f"time %0d.\", \"{n}\", stats1.errors_{n}, stats1.errortime_{n});\n"
        f"\t\telse $display(\"Hint: Output '%s' has no mismatches.\", \"{n}\");\n" for n, _ in outputs)
    refs = ", ".join(f"{n}_ref" for n, _ in outputs)
    duts = ", ".join(f"{n}_dut" for n, _ in outputs)
    checks = "".join(
        f"\t\tif ({n}_ref !== ({n}_ref ^ {n}_dut ^ {n}_ref)) begin\n\t\t\tif (stats1.errors_{n} == 0) "
        f"stats1.errortime_{n} = $time;\n\t\t\tstats1.errors_{n} = stats1.errors_{n} + 1'b1;\n\t\tend\n"
        for n, _ in outputs)
    return (
        "module tb();\n\ttypedef struct packed {\n\t\tint errors;\n\t\tint errortime;\n" + stats
        + "\t\tint clocks;\n\t} stats;\n\tstats stats1;\n\n\treg clk = 0;\n\tinitial forever #5 clk = ~clk;\n\n"
        + signals + "\n\twire tb_match;\n"
        f"\tstimulus_gen stim1 ({stim_conn});\n\tRefModule good1 ({ref_conn});\n"
        f"\tTopModule top_module1 ({dut_conn});\n\n\tfinal begin\n" + hints
        + "\t\t$display(\"Hint: Total mismatched samples is %1d out of %1d samples\\n\", stats1.errors, "
        "stats1.clocks);\n\t\t$display(\"Simulation finished at %0d ps\", $time);\n"
        "\t\t$display(\"Mismatches: %1d in %1d samples\", stats1.errors, stats1.clocks);\n\tend\n\n"
        f"\tassign tb_match = ({{{refs}}} === ({{{refs}}} ^ {{{duts}}} ^ {{{refs}}}));\n"
        "\talways @(posedge clk, negedge clk) begin\n\t\tstats1.clocks++;\n\t\tif (!tb_match) begin\n"
        "\t\t\tif (stats1.errors == 0) stats1.errortime = $time;\n\t\t\tstats1.errors++;\n\t\tend\n" + checks
        + "\tend\n\n\tinitial begin\n\t\t#1000000\n\t\t$display(\"TIMEOUT\");\n\t\t$finish();\n\tend\nendmodule\n"
    )
