"""Shared pieces of the desktop apps' task generators, verifiers and scripted solvers."""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.observation import Node, bid_of, find, parse_tree

# A scripted GUI solver: a generator that receives observations and yields action strings, ending with
# done() or answer(...). Start it with next(solver), then solver.send(observation) for each action.
GuiSolver = Generator[str, str, None]


def tool(name: str, description: str, **params: tuple[str | list[str], str]) -> dict[str, Any]:
    """An OpenAI-style function schema; ``params`` maps each (required) argument to ``(json_type, doc)``,
    in positional order."""
    properties = {key: {"type": kind, "description": doc} for key, (kind, doc) in params.items()}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(params)},
        },
    }


def call(name: str, **kwargs: Any) -> str:
    """The action text of an API call, e.g. ``api.move_file(path='/a', folder='/b')``."""
    return f"api.{name}(" + ", ".join(f"{key}={value!r}" for key, value in kwargs.items()) + ")"


def score(checks: dict[str, bool], what: str) -> RewardResult:
    """Binary reward: 1.0 when every named check holds; ``components["checks_passed"]`` is the fraction."""
    passed = sum(checks.values())
    failed = [name for name, ok in checks.items() if not ok]
    reason = f"{what}: all {len(checks)} checks pass" if not failed else f"{what}: failed {', '.join(failed[:5])}"
    return RewardResult(1.0 if not failed else 0.0, {"checks_passed": passed / max(1, len(checks))}, reason)


def normalise_answer(text: Any) -> str:
    """Lower case, surrounding spaces and quotes and a trailing full stop removed; numbers canonical."""
    value = str(text if text is not None else "").strip().strip("'\"").rstrip(".").strip().lower()
    try:
        number = float(value.replace(",", ""))
    except ValueError:
        return value
    return str(int(number)) if number == int(number) else f"{number:g}"


def verify_answer(expected: str, answer: Any) -> RewardResult:
    """1.0 when the normalised answer equals the normalised expected answer."""
    ok = answer is not None and normalise_answer(answer) == normalise_answer(expected)
    shown = "no answer" if answer is None else repr(str(answer)[:60])
    return RewardResult(1.0 if ok else 0.0, {"answer_correct": float(ok)}, f"answered {shown}, expected {expected!r}")


def heading(nodes: list[Node]) -> str:
    """The name of the first ``heading`` node ('' when none)."""
    found = find(nodes, "heading")
    return nodes[found[0]].name if found else ""


def click(nodes: list[Node], role: str, name: str) -> str:
    """``click("<bid>")`` on the node with that role and name (LookupError when absent)."""
    return f'click("{bid_of(nodes, role, name)}")'


def fill(nodes: list[Node], role: str, name: str, value: str) -> str:
    """``fill("<bid>", value)`` on the node with that role and name."""
    return f'fill("{bid_of(nodes, role, name)}", {value!r})'


def fill_until(obs: str, fields: dict[str, str]) -> str | None:
    """The fill action for the first textbox (by name) whose value differs from ``fields``, or None."""
    nodes = parse_tree(obs)
    for name, value in fields.items():
        index = find(nodes, "textbox", name)[0]
        if nodes[index].value != value:
            return fill(nodes, "textbox", name, value)
    return None


def run_policy(step: Callable[[str], str | None], finish: str = "done()") -> GuiSolver:
    """Wraps a reactive rule ``step(observation) -> action or None (finished)`` as a :data:`GuiSolver`."""
    obs = yield ""
    while True:
        action = step(obs)
        if action is None:
            yield finish
            return
        obs = yield action
