"""VerilogEval problems (NVlabs/verilog-eval v2, spec-to-RTL, MIT licence) and their deliberate mutations.

A VerilogEval directory holds, per problem ``ProbNNN_name``: ``ProbNNN_name_prompt.txt`` (the spec),
``ProbNNN_name_ref.sv`` (``RefModule``) and ``ProbNNN_name_test.sv`` (``tb``). The bundled copy
(``rlvr_gym_rtl/task_suites/verilog-eval/``, also ``tasks/rtl/verilog-eval/``) holds 104 of the 156 problems; :func:`load_problems` reads any directory in this
layout, e.g. a checkout's ``dataset_spec-to-rtl/`` with all 156.

Known iverilog 11 limits (the harness targets iverilog 12): ``Prob151_review2015_fsm`` (enum casts:
"sorry: This cast operation is not yet supported"). Of the problems not bundled, Prob099 and Prob156 fail
to compile and Prob141 hits its ``TIMEOUT`` guard (it still passes under the sample-count rule).
"""

from __future__ import annotations

import re
from pathlib import Path

from rlvr_gym.tasks import find_task_path
from rlvr_gym_rtl.lint import Port
from rlvr_gym_rtl.problem import REF_MODULE, ProblemError, RtlProblem

BUNDLED_DIR = "rtl/verilog-eval"
"""The bundled problems, relative to a ``tasks/`` folder (shipped in ``rlvr_gym_rtl/task_suites/``)."""
IVERILOG11_LIMITS = {
    "Prob099_m2014_q6c": "iverilog 11: fails to compile (SystemVerilog feature needs iverilog 12)",
    "Prob151_review2015_fsm": "iverilog 11: 'sorry: This cast operation is not yet supported' (enum casts)",
    "Prob156_review2015_fancytimer": "iverilog 11: fails to compile (SystemVerilog feature needs iverilog 12)",
}
"""Problems whose reference does not pass with Debian's iverilog 11, and why."""

_MUTATIONS: tuple[tuple[str, str, str], ...] = (
    ("posedge->negedge", r"posedge", "negedge"), ("&->|", r"(?<![&|])&(?![&|=])", "|"),
    ("|->&", r"(?<![&|])\|(?![&|=])", "&"), ("^->&", r"\^", "&"), ("==->!=", r"==", "!="),
    ("+1->+2", r"\+\s*1\b(?!')", "+ 2"), ("1'b0->1'b1", r"1'b0", "1'b1"), ("1'b1->1'b0", r"1'b1", "1'b0"),
    ("drop ~", r"~", ""), ("drop !", r"!(?!=)", ""), ("dead else", r"\belse\b", "else if (1'b0)"),
)
"""Textual mutations ``(label, pattern, replacement)`` tried in order on the reference (first occurrence
only): near misses, not rewrites."""


def problem_names(directory: str | Path) -> list[str]:
    """The problem names in a VerilogEval-layout directory, sorted (``["Prob001_zero", ...]``)."""
    return sorted(p.name.removesuffix("_prompt.txt") for p in Path(directory).glob("*_prompt.txt"))


def load_problem(directory: str | Path, name: str) -> RtlProblem:
    """Reads one problem from a VerilogEval-layout directory.

    Raises:
        ProblemError: when a file is missing, naming it.
    """
    base = Path(directory)
    texts = []
    for suffix in ("_prompt.txt", "_ref.sv", "_test.sv"):
        path = base / f"{name}{suffix}"
        if not path.is_file():
            raise ProblemError(f"VerilogEval problem {name!r}: {path} is missing (expected {name}_prompt.txt, "
                               f"{name}_ref.sv and {name}_test.sv in {base})")
        texts.append(path.read_text(encoding="utf-8"))
    return RtlProblem(name, *texts)


def load_problems(directory: str | Path | None = None) -> list[RtlProblem]:
    """Every problem in a VerilogEval-layout directory (default: the bundled 104).

    Raises:
        FileNotFoundError: when the directory holds no ``*_prompt.txt``.
    """
    base = Path(directory) if directory is not None else find_task_path(BUNDLED_DIR)
    names = problem_names(base)
    if not names:
        raise FileNotFoundError(f"no VerilogEval problems (*_prompt.txt) in {base}")
    return [load_problem(base, name) for name in names]


def resolve_problem_dir(directory: str) -> Path:
    """A task's ``problem_dir``: absolute, or relative to a ``tasks/`` folder (:func:`rlvr_gym.tasks.find_task_path`)."""
    return find_task_path(directory)


def mutations(reference_solution: str) -> list[tuple[str, str]]:
    """Candidate wrong designs ``(label, code)``: each :data:`_MUTATIONS` rule applied to its first match in
    the module body (comments removed)."""
    header_end = reference_solution.find(";", reference_solution.find("module"))
    head, body = reference_solution[: header_end + 1], reference_solution[header_end + 1:]
    body_code = _strip_comments(body)
    found = []
    for label, pattern, replacement in _MUTATIONS:
        mutated = re.sub(pattern, replacement, body_code, count=1)
        if mutated != body_code:
            found.append((label, head + mutated))
    return found


def inverted_output(reference: str, ports: list[Port]) -> str:
    """A wrong design that always works as a mutation: the reference with its first output inverted."""
    core = re.sub(rf"\b{REF_MODULE}\b", "TopModule_core", reference)
    outputs = [p for p in ports if p.direction == "Out"]
    if not outputs:
        raise ProblemError("the reference has no output port to invert")
    declarations = ", ".join(p.describe() for p in ports)
    connections = ", ".join(f".{p.name}({p.name}_core)" if p is outputs[0] else f".{p.name}({p.name})" for p in ports)
    width = f"[{outputs[0].width - 1}:0] " if outputs[0].width > 1 else ""
    wrapper = (f"module TopModule({declarations});\n  wire {width}{outputs[0].name}_core;\n"
               f"  TopModule_core core({connections});\n  assign {outputs[0].name} = ~{outputs[0].name}_core;\n"
               "endmodule\n")
    return wrapper + "\n" + core


def _strip_comments(text: str) -> str:
    return re.sub(r"//[^\n]*|/\*.*?\*/", "", text, flags=re.DOTALL)
