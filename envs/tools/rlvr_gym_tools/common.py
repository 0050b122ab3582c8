"""Tools shared by the family (``calculator``, ``python``) and the exact-answer verifier."""

from __future__ import annotations

import re
import string

from rlvr_gym.failures import FailureKind
from rlvr_gym.toolcall import Tool, ToolError
from rlvr_gym.verifier import RewardResult
from rlvr_gym_tools.calculator import evaluate_expression, format_number

PYTHON_TIMEOUT_S = 5.0
PYTHON_OUTPUT_CHARS = 2000


def calculator(expression: str) -> str:
    """The ``calculator`` tool: the value of an arithmetic expression, as text."""
    return format_number(evaluate_expression(expression))


def run_python(code: str) -> str:
    """The ``python`` tool: runs ``code`` with ``python3`` in :mod:`rlvr_gym.sandbox` (``get_sandbox("auto")``,
    5 s wall clock, no network) and returns its stdout (last 2,000 characters).

    Raises:
        ToolError: with kind ``TIMEOUT``/``SANDBOX_ERROR`` when the sandbox says so (or none is available),
            ``TOOL_ERROR`` with the stderr tail when the program exited non-zero.
    """
    from rlvr_gym.sandbox import SandboxLimits, SandboxUnavailableError, get_sandbox

    try:
        sandbox = get_sandbox("auto")
    except SandboxUnavailableError as error:
        raise ToolError(f"the python tool is unavailable here: {error}", FailureKind.SANDBOX_ERROR) from None
    result = sandbox.run(
        ["python3", "main.py"], files={"main.py": code}, limits=SandboxLimits(timeout_s=PYTHON_TIMEOUT_S)
    )
    failure = result.failure()
    if failure is not None:
        raise ToolError(failure.message, failure.kind)
    if result.exit_code != 0:
        raise ToolError(result.stderr.strip()[-PYTHON_OUTPUT_CHARS:] or f"exit status {result.exit_code}")
    return result.stdout[-PYTHON_OUTPUT_CHARS:] or "(no output; use print() to see values)"


CALCULATOR_TOOL = Tool(
    "calculator",
    "Evaluates an arithmetic expression with + - * / // % ** and abs, round, min, max, sqrt.",
    {
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "e.g. (12 + 7) * 3"}},
        "required": ["expression"],
    },
    calculator,
)
PYTHON_TOOL = Tool(
    "python",
    "Runs a Python 3 program in a sandbox and returns what it prints.",
    {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "a complete program; print the result"}},
        "required": ["code"],
    },
    run_python,
)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation.replace(".", "").replace("-", ""))


def normalize_answer(text: str) -> str:
    """SQuAD-style normalisation (Rajpurkar et al., 2016): lower case, drop punctuation (but keep ``.`` and
    ``-`` inside numbers), drop articles, collapse spaces; digit-group commas in numbers are removed."""
    text = re.sub(r"(?<=\d),(?=\d{3})", "", text.lower())
    text = text.translate(_PUNCTUATION)
    text = re.sub(r"[.-](?!\d)", " ", text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def verify_exact_answer(gold: str, answer: str) -> RewardResult:
    """1.0 when ``answer`` equals ``gold`` after :func:`normalize_answer`, or both are numbers with equal
    values (relative tolerance 1e-9); else 0.0."""
    norm_gold, norm_answer = normalize_answer(gold), normalize_answer(answer)
    ok = norm_gold == norm_answer or _same_number(norm_gold, norm_answer)
    reason = "exact match" if ok else f"answer {answer.strip()[:80]!r} does not match the expected answer"
    return RewardResult(float(ok), {"exact_match": float(ok)}, reason)


def _same_number(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return abs(x - y) <= 1e-9 * max(1.0, abs(x), abs(y))
