"""Our own AST matcher for single-turn BFCL categories (a re-implementation of the rules of
``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` for Python, Apache-2.0; no code is imported from it).

Ground truth: a list with one entry per expected call, ``{"func_name": {"param": [allowed values...]}}``;
``""`` among the allowed values means the parameter may be omitted. A submission (a list of
:class:`~rlvr_gym.toolcall.ToolCall`) matches when there are exactly as many calls as entries and the calls
can be paired one-to-one with the entries (any order, as BFCL's ``parallel_function_checker_no_order``; we
search all pairings, where BFCL pairs greedily) such that, for each pair:

- the names are equal (``.`` may be written ``_``, as BFCL allows for models that cannot emit dots);
- every required parameter of the function doc is present and no parameter is outside the doc or the entry;
- every given value matches one allowed value, and every omitted parameter allows ``""``.

Values match by type-aware equality: strings after BFCL's ``standardize_string`` (lower case, without spaces
and ``,./-_*^``, single quotes as double), numbers by value (an int matches an allowed float, a bool never
matches a number), lists element by element in order, dicts key by key where an allowed dict's values are
themselves lists of allowed values (BFCL's ``dict_checker``; a dict whose values are not all lists is a
literal, compared key by key). Differences from BFCL: no separate type check
(a value of the wrong type never equals an allowed value, except int-for-float, which BFCL also allows at
the top level and we also allow inside lists).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from rlvr_gym.toolcall import ToolCall
from rlvr_gym.verifier import RewardResult

_STANDARDIZE = re.compile(r"[ ,./\-_*^]")


def standardize_string(text: str) -> str:
    """BFCL's string normalisation: drop spaces and ``,./-_*^``, lower-case, ``'`` -> ``"``."""
    return _STANDARDIZE.sub("", text).lower().replace("'", '"')


def value_matches(value: Any, allowed: Any) -> bool:
    """Whether ``value`` (from a call) equals one allowed value (from the ground truth)."""
    if isinstance(allowed, dict):
        if not all(isinstance(v, list) for v in allowed.values()):  # a literal dict, as nested in live_multiple
            return (
                isinstance(value, dict)
                and value.keys() == allowed.keys()
                and all(value_matches(value[k], allowed[k]) for k in allowed)
            )
        return isinstance(value, dict) and _dict_matches(value, allowed)
    if isinstance(allowed, list):
        return (
            isinstance(value, list | tuple)
            and len(value) == len(allowed)
            and all(value_matches(v, a) for v, a in zip(value, allowed, strict=True))
        )
    if isinstance(allowed, str):
        return isinstance(value, str) and standardize_string(value) == standardize_string(allowed)
    if isinstance(allowed, bool) or allowed is None:
        return type(value) is type(allowed) and value == allowed
    if isinstance(allowed, int | float):
        return isinstance(value, int | float) and not isinstance(value, bool) and value == allowed
    return bool(value == allowed)


def _dict_matches(value: dict[str, Any], allowed: dict[str, Any]) -> bool:
    for key, item in value.items():
        options = allowed.get(key)
        if not isinstance(options, list) or not any(value_matches(item, o) for o in options if o != ""):
            return False
    return all(key in value or "" in options for key, options in allowed.items())


def check_call(call: ToolCall, expected: dict[str, dict[str, list[Any]]], doc: dict[str, Any] | None) -> str | None:
    """Checks one call against one ground-truth entry; returns None when it matches, else the reason."""
    ((name, params),) = expected.items()
    if call.name not in (name, name.replace(".", "_")):
        return f"expected a call to {name!r}, got {call.name!r}"
    properties = (doc or {}).get("parameters", {}).get("properties", {})
    for required in (doc or {}).get("parameters", {}).get("required", []):
        if required not in call.arguments:
            return f"{name}: missing required parameter {required!r}"
    for param, value in call.arguments.items():
        if param not in params or (doc is not None and param not in properties):
            return f"{name}: unexpected parameter {param!r}"
        if not any(value_matches(value, option) for option in params[param] if option != ""):
            return f"{name}: value {value!r} of {param!r} is not one of {params[param]!r}"
    for param, options in params.items():
        if param not in call.arguments and "" not in options:
            return f"{name}: parameter {param!r} is missing"
    return None


def match_calls(
    calls: Sequence[ToolCall], ground_truth: list[dict[str, Any]], functions: Sequence[dict[str, Any]]
) -> RewardResult:
    """Scores a single-turn submission: 1.0 when ``calls`` pair one-to-one with the ``ground_truth`` entries
    (see the module docstring), else 0.0 with the reason. ``functions`` are the task's BFCL function docs."""
    if len(calls) != len(ground_truth):
        return _result(False, f"expected {len(ground_truth)} call(s), got {len(calls)}")
    docs = {f["name"]: f for f in functions}
    reasons = [[check_call(c, e, docs.get(next(iter(e)))) for e in ground_truth] for c in calls]
    if _perfect_matching([[r is None for r in row] for row in reasons]):
        return _result(True, "all calls match the possible answers")
    first_problem = next((r for row in reasons for r in row if r is not None), "no pairing of calls to answers")
    return _result(False, first_problem)


def irrelevance_result(calls: Sequence[ToolCall]) -> RewardResult:
    """Scores an irrelevance task: 1.0 when no function was called."""
    return _result(
        not calls, "no function call, as required" if not calls else "called a function on an irrelevant request"
    )


def _perfect_matching(ok: list[list[bool]]) -> bool:
    """Whether rows (calls) can be matched to distinct columns (answers), every pair allowed (augmenting paths)."""
    owner: dict[int, int] = {}

    def assign(row: int, seen: set[int]) -> bool:
        for col, allowed in enumerate(ok[row]):
            if allowed and col not in seen:
                seen.add(col)
                if col not in owner or assign(owner[col], seen):
                    owner[col] = row
                    return True
        return False

    return all(assign(row, set()) for row in range(len(ok)))


def _result(ok: bool, reason: str) -> RewardResult:
    return RewardResult(float(ok), {"ast_match": float(ok)}, reason)
