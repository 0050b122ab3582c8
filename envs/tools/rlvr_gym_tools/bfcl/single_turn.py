"""``tools/BFCL-v0``: single-turn Berkeley Function Calling tasks, scored by our AST matcher.

One episode is one request: the observation is the user's message (with any system message of the entry),
``info["tools"]`` lists the entry's functions as JSON schema, and the first action that parses ends the
episode: tool calls are matched against the possible answers (:mod:`rlvr_gym_tools.bfcl.matcher`); an
``<answer>`` or plain text without call syntax (no call, as BFCL decodes it) is right only on irrelevance
tasks. Calls are never executed. Malformed call syntax costs a turn and is explained.
"""

from __future__ import annotations

from typing import Any

from rlvr_gym.core import StepResult
from rlvr_gym.tasks import Task, load_suite
from rlvr_gym.toolcall import Tool, ToolCall, ToolEnv, validate_call
from rlvr_gym.verifier import RewardResult
from rlvr_gym_tools.bfcl.data import resolve, to_json_schema
from rlvr_gym_tools.bfcl.matcher import irrelevance_result, match_calls, standardize_string, value_matches

ENV_ID = "tools/BFCL-v0"
DEFAULT_SUITE = "tools/bfcl_simple_python"


def render_messages(messages: list[dict[str, str]]) -> str:
    """The messages of one BFCL turn as text: the user's content, system messages first and labelled."""
    parts = [f"[{m['role']}] {m['content']}" if m["role"] != "user" else m["content"] for m in messages]
    return "\n\n".join(parts)


def declared_tools(functions: list[dict[str, Any]]) -> list[Tool]:
    """BFCL function docs as declared (not runnable) tools with JSON-schema parameters."""
    return [Tool(f["name"], f.get("description", ""), to_json_schema(f.get("parameters", {}))) for f in functions]


def score_submission(entry: dict[str, Any], calls: list[ToolCall]) -> RewardResult:
    """The reward of a submission for one BFCL entry (``function``, ``ground_truth``; see :func:`resolve`)."""
    if entry["ground_truth"] is None:
        return irrelevance_result(calls)
    if not calls:
        return RewardResult(0.0, {"ast_match": 0.0}, "answered without calling a function")
    return match_calls(calls, entry["ground_truth"], entry["function"])


class BFCLEnv(ToolEnv):
    """Answer a BFCL request with the right function call(s), or with ``<answer>`` when no function fits.

    Args:
        suite: the suite episodes are drawn from when ``reset`` gets no task.
        max_turns, action_formats, describe_tools_in_prompt: see :class:`ToolEnv`.

    Version History:
        v0: first version (BFCL v4 data from ``bfcl-eval==2026.3.23``).
    """

    max_turns = 2

    plain_text_is_answer = True  # BFCL reads a reply that decodes to no call as a text answer

    def __init__(self, suite: str = DEFAULT_SUITE, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite

    def _start(self, task: Task | None) -> tuple[str, list[Tool], dict[str, Any]]:
        if task is None:
            tasks = load_suite(self.suite).tasks
            task = tasks[int(self.np_random.integers(len(tasks)))]
        self.entry = resolve(task.data)
        prompt = render_messages(self.entry["question"][0])
        return prompt, declared_tools(self.entry["function"]), {"category": self.entry["category"]}

    def __deepcopy__(self, memo: dict[int, Any]) -> BFCLEnv:
        if hasattr(self, "entry"):
            memo[id(self.entry)] = self.entry  # the wheel entry is cached and read-only: forks share it
        return super().__deepcopy__(memo)  # type: ignore[return-value]

    def _verify_answer(self, answer: str) -> RewardResult:
        return score_submission(self.entry, [])

    def _handle_calls(self, calls: list[ToolCall]) -> StepResult:
        failures = [f for f in (validate_call(call, self.tools) for call in calls) if f is not None]
        return self._finish(score_submission(self.entry, calls), tool_calls=len(calls), invalid=len(failures),
                            failure=failures[0] if failures else None)


def gold_calls(ground_truth: list[dict[str, Any]], functions: list[dict[str, Any]]) -> list[ToolCall]:
    """One concrete call per ground-truth entry: each parameter takes its first allowed value that is not
    ``""``; parameters that may be omitted (``""`` allowed) are omitted when they only allow ``""`` or are
    missing from the function's doc (a few entries list an optional parameter under the wrong function)."""
    properties = {f["name"]: f.get("parameters", {}).get("properties", {}) for f in functions}
    calls = []
    for entry in ground_truth:
        ((name, params),) = entry.items()
        documented = properties.get(name, {})
        arguments = {
            p: _concrete(_first(options))
            for p, options in params.items()
            if _first(options) != "" and (p in documented or "" not in options)
        }
        calls.append(ToolCall(name, arguments))
    return calls


def _first(options: list[Any]) -> Any:
    return next((o for o in options if o != ""), "")


def _concrete(allowed: Any) -> Any:
    if isinstance(allowed, dict) and all(isinstance(v, list) for v in allowed.values()):
        return {k: _concrete(_first(v)) for k, v in allowed.items() if isinstance(v, list) and _first(v) != ""}
    if isinstance(allowed, list):
        return [_concrete(a) for a in allowed]
    return allowed


def perturbations(entry: dict[str, Any]) -> dict[str, list[ToolCall]]:
    """Wrong submissions for a task, by kind: ``wrong_function`` (a name not expected), ``wrong_argument``
    (a parameter renamed) and ``wrong_value`` (a value no allowed value matches); a kind is missing when the
    gold call has nothing to perturb (no parameters). Irrelevance tasks get one ``spurious_call``."""
    functions, ground_truth = entry["function"], entry["ground_truth"]
    if ground_truth is None:
        return {"spurious_call": [ToolCall(functions[0]["name"] if functions else "search_web", {})]}
    calls = gold_calls(ground_truth, functions)
    first, rest = calls[0], calls[1:]
    expected_names = {next(iter(e)) for e in ground_truth}
    wrong: dict[str, list[ToolCall]] = {
        "wrong_function": [ToolCall(_other_name(functions, expected_names), first.arguments), *rest]
    }
    if first.arguments:
        param = next(iter(first.arguments))
        renamed = {(f"{k}_x" if k == param else k): v for k, v in first.arguments.items()}
        wrong["wrong_argument"] = [ToolCall(first.name, renamed), *rest]
        allowed = next(iter(ground_truth[0].values()))[param]
        changed = {**first.arguments, param: _different_value(first.arguments[param], allowed)}
        wrong["wrong_value"] = [ToolCall(first.name, changed), *rest]
    return wrong


def _other_name(functions: list[dict[str, Any]], expected: set[str]) -> str:
    others = [f["name"] for f in functions if f["name"] not in expected]
    return others[0] if others else f"{min(expected)}_v2"


def _different_value(value: Any, allowed: list[Any]) -> Any:
    """A value of the same type that matches none of ``allowed``."""
    for candidate in _candidates(value):
        if not any(value_matches(candidate, a) for a in allowed if a != ""):
            return candidate
    raise ValueError(f"no perturbation of {value!r} avoids {allowed!r}")


def _candidates(value: Any) -> list[Any]:
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int | float):
        return [value + 1, value + 7.5, -value - 13]
    if isinstance(value, str):
        return [value + "zq", "qz" + value, "zzqq"] if standardize_string(value + "zq") else ["zzqq"]
    if isinstance(value, list):
        return [[*value, value[0] if value else "zq"], value[:-1], ["zq"]]
    if isinstance(value, dict):
        return [{**value, "zq_key": 1}, {}]
    return ["zq"]
