"""The random baseline's grammar for the RTL family (used by ``rlvr_gym.testing.RandomAgent``): a design
from a template, with the interface the spec lists (`` - input  a (12 bits)``) and each output assigned a
random expression: a constant (all zeros, all ones), an input, or ``&``, ``|``, ``^``, ``+`` of two inputs.
Combinational specs that such an expression meets (a constant output, an adder, a bitwise gate) are solved.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

_PORT = re.compile(r"^\s*-\s*(input|output)\s+(\w+)(?:\s*\((\d+) bits?\))?", re.MULTILINE)
OPERATORS = ("&", "|", "^", "+")


def random_action(env_id: str, observation: str, info: dict[str, Any], rng: np.random.Generator) -> str | None:
    """A random ``TopModule`` in a ```verilog block, or None when the observation lists no ports."""
    ports = [(kind, name, int(width or 1)) for kind, name, width in _PORT.findall(observation)]
    if not any(kind == "output" for kind, _, _ in ports):
        return None
    header = ",\n".join(f"  {kind} {f'[{width - 1}:0] ' if width > 1 else ''}{name}" for kind, name, width in ports)
    inputs = [name for kind, name, _ in ports if kind == "input" and name not in ("clk", "reset", "areset")]
    body = [f"  assign {name} = {_expression(inputs, width, rng)};" for kind, name, width in ports if kind == "output"]
    return "```verilog\nmodule TopModule (\n" + header + "\n);\n" + "\n".join(body) + "\nendmodule\n```"


def _expression(inputs: list[str], width: int, rng: np.random.Generator) -> str:
    choice = int(rng.integers(4 if inputs else 2))
    if choice == 0:
        return f"{width}'d0"
    if choice == 1:
        return f"{{{width}{{1'b1}}}}"
    first = inputs[int(rng.integers(len(inputs)))]
    if choice == 2 or len(inputs) < 2:
        return first
    second = inputs[int(rng.integers(len(inputs)))]
    return f"{first} {OPERATORS[int(rng.integers(len(OPERATORS)))]} {second}"
