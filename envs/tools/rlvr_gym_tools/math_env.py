"""``tools/Math-v0``: arithmetic word problems with large numbers, where a tool is the reliable path.

Each problem comes from a template and a seed; its ``solution`` is an arithmetic expression the
``calculator`` tool accepts (the ``python`` tool works too), and its answer is that expression's value,
an integer or a number rounded to cents. Answers are checked by value (relative tolerance 1e-9).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlvr_gym.core import draw_seed
from rlvr_gym.tasks import Task
from rlvr_gym.toolcall import Tool, ToolCall, ToolEnv
from rlvr_gym.verifier import RewardResult
from rlvr_gym_tools.calculator import evaluate_expression, format_number
from rlvr_gym_tools.common import CALCULATOR_TOOL, PYTHON_TOOL, verify_exact_answer

ENV_ID = "tools/Math-v0"
Problem = tuple[str, str]  # (question, solution expression)


def _warehouse(r: np.random.Generator) -> Problem:
    a, b = int(r.integers(2_000, 90_000)), int(r.integers(12, 480))
    c = int(r.integers(100, a // 2))
    return (
        (
            f"A warehouse holds {a} crates with {b} items in each. It ships out {c} crates. "
            "How many items are left in the warehouse?"
        ),
        f"({a} - {c}) * {b}",
    )


def _journey(r: np.random.Generator) -> Problem:
    a, b, c, d = (int(x) for x in (r.integers(41, 297), r.integers(3, 29), r.integers(41, 297), r.integers(3, 29)))
    return (
        (
            f"A train travels at {a} km per hour for {b} hours, then at {c} km per hour for {d} hours. "
            "How many kilometres does it travel in total?"
        ),
        f"{a} * {b} + {c} * {d}",
    )


def _defects(r: np.random.Generator) -> Problem:
    a, b, c = int(r.integers(11, 95)) * 100, int(r.integers(7, 61)), int(r.integers(2, 19))
    return (
        (
            f"A factory makes {a} widgets per day for {b} days, and {c} percent of them are defective. "
            "How many widgets are not defective?"
        ),
        f"{a} * {b} * (100 - {c}) // 100",
    )


def _chests(r: np.random.Generator) -> Problem:
    a, b = int(r.integers(100_000, 9_000_000)), int(r.integers(13, 997))
    if r.random() < 0.5:
        return f"{a} coins are shared equally among {b} chests. How many coins are left over?", f"{a} % {b}"
    return f"{a} coins are shared equally among {b} chests. How many whole coins go in each chest?", f"{a} // {b}"


def _savings(r: np.random.Generator) -> Problem:
    a, b, n = int(r.integers(1_000, 50_000)), int(r.integers(2, 12)), int(r.integers(3, 15))
    return (
        (
            f"A savings account starts with {a} dollars and earns {b} percent interest per year, compounded "
            f"yearly. How many dollars does it hold after {n} years, rounded to the nearest cent?"
        ),
        f"round({a} * (1 + {b} / 100) ** {n}, 2)",
    )


def _multiples(r: np.random.Generator) -> Problem:
    a, b = int(r.integers(3, 40)), int(r.integers(1_000, 100_000))
    k = (b - 1) // a
    return f"What is the sum of all positive multiples of {a} that are less than {b}?", f"{a} * {k} * ({k} + 1) // 2"


TEMPLATES: dict[str, Callable[[np.random.Generator], Problem]] = {
    "warehouse": _warehouse,
    "journey": _journey,
    "defects": _defects,
    "chests": _chests,
    "savings": _savings,
    "multiples": _multiples,
}


def generate_problem(seed: int, templates: Sequence[str] = tuple(TEMPLATES)) -> dict[str, Any]:
    """Task data for one problem: ``{"question", "solution", "answer", "template"}``, a pure function of
    ``seed`` and ``templates``.

    Raises:
        ValueError: on an unknown template name.
    """
    unknown = set(templates) - set(TEMPLATES)
    if unknown or not templates:
        raise ValueError(f"unknown templates {sorted(unknown)}; choose from {sorted(TEMPLATES)}")
    rng = np.random.default_rng(seed)
    name = list(templates)[int(rng.integers(len(templates)))]
    question, solution = TEMPLATES[name](rng)
    return {
        "question": question,
        "solution": solution,
        "answer": format_number(evaluate_expression(solution)),
        "template": name,
    }


class MathEnv(ToolEnv):
    """Solve a word problem with the ``calculator`` or ``python`` tool; answer with ``<answer>N</answer>``.

    Args:
        templates: templates drawn for problems generated from a seed (tasks carry their own).
        enable_python: offer the sandboxed ``python`` tool.
        max_turns, max_tool_calls, action_formats, describe_tools_in_prompt: see :class:`ToolEnv`.

    Version History:
        v0: first version.
    """

    max_turns = 6
    max_tool_calls = 6

    def __init__(self, templates: Sequence[str] = tuple(TEMPLATES), enable_python: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        generate_problem(0, templates)  # validates the names
        self.templates, self.enable_python = tuple(templates), enable_python
        self.answer = ""

    def _start(self, task: Task | None) -> tuple[str, list[Tool], dict[str, Any]]:
        data = task.data if task is not None else generate_problem(draw_seed(self.np_random), self.templates)
        self.answer, self.solution = str(data["answer"]), str(data["solution"])
        prompt = (
            "Solve the problem. Use a tool for the arithmetic, then give only the number as "
            f"<answer>...</answer>.\nProblem: {data['question']}"
        )
        return prompt, [CALCULATOR_TOOL] + ([PYTHON_TOOL] if self.enable_python else []), {}

    def _verify_answer(self, answer: str) -> RewardResult:
        return verify_exact_answer(self.answer, answer)

    def oracle_action(self) -> str:
        """The next action of :class:`MathOracle` (Python-style call) for this episode: an expert for
        behaviour cloning on problems generated from seeds. Assumes the episode so far followed the oracle."""
        if self.turn == 0 or not hasattr(self, "_oracle"):
            self._oracle = MathOracle(call_format="python")
            self._oracle.start(self.solution)
        return self._oracle.act(self.last_observation, {})


class MathOracle:
    """Calls the calculator with the task's ``solution`` and answers with what it returns (``Agent`` protocol).

    Args:
        call_format: ``"hermes"`` (``<tool_call>`` JSON, as in the shipped gold) or ``"python"`` (shorter).
    """

    def __init__(self, call_format: str = "hermes") -> None:
        self.call_format = call_format

    def reset(self, task: Task) -> None:
        self.start(task.data["solution"])

    def start(self, solution: str) -> None:
        """Starts an episode from a solution expression."""
        self.solution, self.asked = solution, False

    def act(self, observation: str, info: dict[str, Any]) -> str:
        if not self.asked:
            self.asked = True
            call = ToolCall("calculator", {"expression": self.solution})
            return call.to_python() if self.call_format == "python" else call.to_hermes()
        match = re.search(r"<tool_response[^>]*>\n(.*)\n</tool_response>", observation, re.DOTALL)
        return f"<answer>{match.group(1) if match else ''}</answer>"
