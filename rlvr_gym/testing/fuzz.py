"""Actions that look right but are not: what the malformed-action check sends, and what random agents say.

An env is most likely to crash on input that passes its first parse: a known command with an object id
that does not exist, a tool call whose arguments have the wrong types, a command cut in half. This module
derives such actions from what the env itself shows (``info["admissible_actions"]``, ``info["tools"]``) and
from a task's gold actions, and draws schema-typed random tool calls. Everything is seeded by the
``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

NUMBER = re.compile(r"-?\d+")
WRONG_NUMBERS = ("0", "1", "-1", "999999")
"""Replacements for the first number of an action: ids and counts that usually do not exist."""
LONE_SURROGATES = ("\ud800", "\udfff")
"""Unpaired UTF-16 surrogates: valid in a Python ``str``, invalid in UTF-8 (``.encode()`` raises)."""


def tool_functions(tools: Any) -> list[dict[str, Any]]:
    """The ``function`` parts (``name``, ``parameters``) of OpenAI-style tool schemas; malformed ones skipped."""
    functions = []
    for tool in tools or []:
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            functions.append(dict(function))
    return functions


def random_json_value(schema: Any, rng: np.random.Generator, words: Sequence[str] = (), depth: int = 0) -> Any:
    """A random value of a JSON schema's type: ``enum`` members, strings (a word of ``words`` when given),
    integers in [-10, 100], numbers, booleans, short arrays, objects with their required properties."""
    schema = schema if isinstance(schema, Mapping) else {}
    if schema.get("enum"):
        return schema["enum"][int(rng.integers(len(schema["enum"])))]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = kind[int(rng.integers(len(kind)))] if kind else "string"
    if kind == "integer":
        return int(rng.integers(-10, 101))
    if kind == "number":
        return round(float(rng.uniform(-10, 100)), 2)
    if kind == "boolean":
        return bool(rng.integers(2))
    if kind == "array" and depth < 3:
        return [random_json_value(schema.get("items"), rng, words, depth + 1) for _ in range(int(rng.integers(1, 3)))]
    if kind == "object" and depth < 3:
        return random_arguments(schema, rng, words, depth + 1)
    if kind == "null":
        return None
    return str(words[int(rng.integers(len(words)))]) if words else f"x{int(rng.integers(100))}"


def random_arguments(parameters: Any, rng: np.random.Generator, words: Sequence[str] = (), depth: int = 0
                     ) -> dict[str, Any]:
    """Arguments for a tool's ``parameters`` schema: every required property, and each optional one with
    probability 1/2, each a :func:`random_json_value` of its schema."""
    parameters = parameters if isinstance(parameters, Mapping) else {}
    properties = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    return {name: random_json_value(schema, rng, words, depth) for name, schema in properties.items()
            if name in required or rng.integers(2)}


def tool_call_text(name: str, arguments: Any) -> str:
    """A Hermes/Qwen tool call, ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False) + "</tool_call>"


def random_tool_call(tools: Any, rng: np.random.Generator, words: Sequence[str] = ()) -> str | None:
    """A call of a random declared tool with schema-typed random arguments, or None when no tool is declared."""
    functions = tool_functions(tools)
    if not functions:
        return None
    function = functions[int(rng.integers(len(functions)))]
    return tool_call_text(function["name"], random_arguments(function.get("parameters"), rng, words))


def mutations(action: str) -> dict[str, str]:
    """Near misses of one valid action: its first number replaced by each of :data:`WRONG_NUMBERS` (or
    ``" 1"`` appended when it has none), the number spelled as a word, the last word replaced by an unknown
    name, and the first half of the text. Keys name the mutation."""
    found = NUMBER.search(action)
    near: dict[str, str] = {}
    if found:
        for number in WRONG_NUMBERS:
            near[f"id {number}"] = action[: found.start()] + number + action[found.end():]
        near["id as a word"] = action[: found.start()] + "one" + action[found.end():]
    else:
        near["id 1 appended"] = f"{action.rstrip()} 1"
    words = action.split()
    if len(words) > 1:
        near["unknown name"] = " ".join([*words[:-1], "zzunknown"])
    if len(action) > 1:
        near["truncated"] = action[: len(action) // 2]
    return {key: text for key, text in near.items() if text != action}


def tool_call_mutations(function: Mapping[str, Any], rng: np.random.Generator) -> dict[str, str]:
    """Near misses of a call to one declared tool: random well-typed arguments, no arguments, each
    argument of the wrong type, an unknown tool name, arguments that are a list, and the call cut in half."""
    name = str(function["name"])
    arguments = random_arguments(function.get("parameters"), rng)
    wrong_types = {key: ([value] if isinstance(value, str) else "not a number") for key, value in arguments.items()}
    full = tool_call_text(name, arguments)
    return {
        f"{name}: random typed arguments": full,
        f"{name}: no arguments": tool_call_text(name, {}),
        f"{name}: wrong argument types": tool_call_text(name, wrong_types),
        f"{name}: arguments as a list": tool_call_text(name, list(arguments.values())),
        f"{name}: python style, wrong types": f"{name}(" + ", ".join(f"{k}=[[]]" for k in arguments) + ")",
        "unknown tool": tool_call_text(name + "_zz", arguments),
        f"{name}: truncated": full[: len(full) // 2],
    }


def plausible_actions(
    info: Mapping[str, Any], gold: Sequence[str] | None, rng: np.random.Generator, limit: int = 24
) -> dict[str, str]:
    """Plausible wrong actions for a reset env: mutations of up to two admissible actions and of the first two
    gold actions, and :func:`tool_call_mutations` of up to two declared tools. At most ``limit``, chosen
    with ``rng`` (always including some of each source); keys say where each came from."""
    sources: dict[str, dict[str, str]] = {}
    admissible = [str(a) for a in info.get("admissible_actions") or []]
    for index in rng.permutation(len(admissible))[:2] if admissible else []:
        action = admissible[int(index)]
        sources[f"admissible {action!r}"] = mutations(action)
    for action in list(gold or [])[:2]:
        sources[f"gold {_head(action)!r}"] = mutations(action)
    functions = tool_functions(info.get("tools"))
    for index in rng.permutation(len(functions))[:2] if functions else []:
        sources[f"tool {functions[int(index)]['name']!r}"] = tool_call_mutations(functions[int(index)], rng)
    chosen: dict[str, str] = {}
    pools = [[(f"{source}: {kind}", text) for kind, text in near.items()] for source, near in sources.items()]
    while len(chosen) < limit and any(pools):
        for pool in pools:  # round robin, so every source is represented
            if pool and len(chosen) < limit:
                key, text = pool.pop(int(rng.integers(len(pool))))
                chosen.setdefault(key, text)
    return chosen


def surrogate_actions(info: Mapping[str, Any], gold: Sequence[str] | None) -> dict[str, str]:
    """Actions holding lone surrogates (:data:`LONE_SURROGATES`): alone, inside an otherwise valid action, and
    inside a tool call's argument. A text env must answer them like any malformed text, not raise on
    ``str.encode``."""
    admissible = [str(a) for a in info.get("admissible_actions") or []]
    base = admissible[0] if admissible else (list(gold or []) or ["look"])[0]
    actions = {"lone surrogate": LONE_SURROGATES[0], "valid action + lone surrogate": f"{base} {LONE_SURROGATES[1]}"}
    functions = tool_functions(info.get("tools"))
    if functions:
        properties = (functions[0].get("parameters") or {}).get("properties") or {"x": {}}
        arguments = {key: LONE_SURROGATES[0] for key in properties}
        actions["tool call with a lone surrogate"] = tool_call_text(str(functions[0]["name"]), arguments)
    return actions


def _head(text: str, limit: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
