"""One RTL problem: a spec, a reference design and a VerilogEval-style testbench.

The layout follows VerilogEval v2 (NVlabs/verilog-eval, MIT): the spec asks for a module ``TopModule``;
the reference is the same design named ``RefModule``; the testbench (module ``tb``) drives both with the
same stimulus, compares their outputs on both clock edges, and prints ``Mismatches: N in M samples``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable
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


_NEAR_MISS_EDITS: tuple[tuple[str, str | Callable[[re.Match[str]], str]], ...] = (
    (r"(?<=[\w)\]}]) \+ (?=[\w{(])", " - "),     # add -> subtract
    (r"(?<=[\w)]) < (?=[\w$(])", " > "),           # less than -> greater than
    (r"(?<=[\w)]) > (?=[\w$(])", " < "),           # greater than -> less than
    (r" == ", " != "),                              # equality -> inequality
    (r"<< ", ">> "),                                # left shift -> right shift
    (r"(?<=[= ])&(?=\w)", "|"),                     # AND reduction -> OR reduction
    (r"(?<=[= ])\|(?=\w)", "&"),                    # OR reduction -> AND reduction
    (r"(?<=[= ])\^(?=\w)", "~^"),                   # XOR reduction -> XNOR reduction
    (r"\$signed\((\w+)\)", r"\1"),                 # signed comparison -> unsigned
    (r"\? ", "? ~"),                                # a condition's true value inverted
    (r"'d(\d+)", lambda m: f"'d{int(m.group(1)) + 1}"),           # the first decimal literal plus one
    (r"(?<== )([a-z]+)(\d+);", lambda m: f"{m.group(1)}{int(m.group(2)) + 1};"),  # the next input selected
    (r"\{(\w+), (\w+)\}", r"{\2, \1}"),            # a concatenation's parts swapped
)


def near_miss_designs(design: str, limit: int = 6) -> list[str]:
    """Wrong designs one edit away from ``design``, as answers: for demonstrations that show the simulator's
    feedback and the recovery from it (``sft.mistake_rate`` draws from an env's ``info["admissible_actions"]``).

    Each near miss applies one edit to the first line after the port list that allows it: an operator swapped
    (``+``/``-``, ``<``/``>``, ``==``/``!=``, ``<<``/``>>``, a reduction ``&``/``|``, ``^`` to ``~^``), a ``$signed``
    cast dropped, a conditional's true value inverted, a decimal literal plus one, the next numbered input
    selected, a concatenation's parts swapped. The interface is never edited, so a near miss compiles and is judged by simulation; on the generated
    problems every near miss fails it (``tests/rlvr_gym_rtl/test_near_misses.py``); on other designs an edit can
    happen to be equivalent (not checked here).

    Args:
        design: a complete design (``module ... endmodule``), without a code fence.
        limit: most near misses returned (the first edits in the order above).

    Returns:
        Up to ``limit`` distinct answers (fenced, as :func:`gold_action`), none equal to ``design``'s.
    """
    header, sep, body = design.partition(");")
    if not sep:
        return []
    misses: list[str] = []
    for pattern, replacement in _NEAR_MISS_EDITS:
        edited = re.sub(pattern, replacement, body, count=1)
        answer = gold_action(header + sep + edited)
        if edited != body and answer not in misses:
            misses.append(answer)
        if len(misses) >= limit:
            break
    return misses


def design_slips(design: str) -> list[str]:
    """Slips of ``design`` that the judge rejects before simulating it, as answers: a semicolon dropped, no
    ``endmodule``, the module under another name, no code at all (the prose alone), the first port one bit
    wider (the interface check's feedback). For demonstrations with invalid actions (see
    ``rlvr_gym_rtl:malformed_designs``, the env-level entry point).

    Returns:
        Up to five distinct answers, none equal to ``design``'s.
    """
    wider = re.sub(r"\[(\d+):0\]", lambda m: f"[{int(m.group(1)) + 1}:0]", design, count=1)
    slips = [design.replace(";", "", 1), design.replace("endmodule", "", 1),
             re.sub(r"\bmodule TopModule\b", "module Top", design, count=1), "The design is below.",
             wider if wider != design else re.sub(r"\b(input|output)( reg)? (\w)", r"\1\2 [1:0] \3", design, count=1)]
    gold = gold_action(design)
    answers = [slip if slip == slips[3] else gold_action(slip) for slip in slips]
    return [a for i, a in enumerate(answers) if a != gold and a not in answers[:i]]
