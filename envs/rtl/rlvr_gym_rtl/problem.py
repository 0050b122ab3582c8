"""One RTL problem: a spec, a reference design and a VerilogEval-style testbench.

The layout follows VerilogEval v2 (NVlabs/verilog-eval, MIT): the spec asks for a module ``TopModule``;
the reference is the same design named ``RefModule``; the testbench (module ``tb``) drives both with the
same stimulus, compares their outputs on both clock edges, and prints ``Mismatches: N in M samples``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any

REF_MODULE = "RefModule"
"""The reference design's module name in the testbench."""

_VERDICT_DISPLAY = re.compile(r'\$display\(\s*"Mismatches:')
_DUMP_CALL = re.compile(r"\$dump(?:file|vars|on|off|all|limit|flush)\b\s*(?:\([^;]*\))?\s*;")


class ProblemError(ValueError):
    """A problem's files do not follow the VerilogEval layout; the message says what is missing."""


@dataclasses.dataclass(frozen=True)
class RtlProblem:
    """A spec-to-RTL problem.

    Attributes:
        name: e.g. ``"Prob035_count1to10"``.
        prompt: the spec the agent sees (asks for a module named ``TopModule``).
        reference: the reference design, module ``RefModule``.
        testbench: the testbench, module ``tb``, printing ``Mismatches: N in M samples`` exactly once.
    """

    name: str
    prompt: str
    reference: str
    testbench: str

    def __post_init__(self) -> None:
        if f"module {REF_MODULE}" not in self.reference:
            raise ProblemError(f"problem {self.name}: the reference must define `module {REF_MODULE}`")
        if len(_VERDICT_DISPLAY.findall(self.testbench)) != 1:
            raise ProblemError(f"problem {self.name}: the testbench must print `Mismatches: N in M samples` "
                               "with exactly one $display")

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> RtlProblem:
        """Builds a problem from a task's ``data`` (keys ``name``, ``prompt``, ``reference``, ``testbench``).

        Raises:
            ProblemError: on missing keys or a malformed reference/testbench.
        """
        missing = [k for k in ("name", "prompt", "reference", "testbench") if not data.get(k)]
        if missing:
            raise ProblemError(f"RTL task data lacks {', '.join(missing)}; expected keys name, prompt, "
                               "reference, testbench (see rlvr_gym_rtl.verilog_eval.load_problems)")
        return cls(str(data["name"]), str(data["prompt"]), str(data["reference"]), str(data["testbench"]))

    def to_data(self) -> dict[str, str]:
        """The inverse of :meth:`from_data`."""
        return {"name": self.name, "prompt": self.prompt, "reference": self.reference, "testbench": self.testbench}

    @property
    def key(self) -> str:
        """SHA-256 of the reference and testbench: the cache key of anything derived from them."""
        return hashlib.sha256(f"{self.reference}\0{self.testbench}".encode()).hexdigest()

    def reference_solution(self) -> str:
        """The reference renamed to ``TopModule``: a correct candidate."""
        return re.sub(rf"\b{REF_MODULE}\b", "TopModule", self.reference)

    def prepared_testbench(self, nonce: str) -> str:
        """The testbench as the judge runs it: waveform dumping removed (it only costs time and disk), and
        the verdict line tagged with ``nonce`` so that nothing else can print a verdict that counts."""
        text = _DUMP_CALL.sub(";", self.testbench)
        return _VERDICT_DISPLAY.sub(f'$display("{nonce} Mismatches:', text)


def gold_action(code: str) -> str:
    """Wraps a design as an agent answer: a fenced ``verilog`` block."""
    return f"```verilog\n{code.strip()}\n```"
