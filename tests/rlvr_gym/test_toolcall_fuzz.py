"""Fuzzing the action parser: it never raises and always returns calls, an answer or a typed parse failure."""

from __future__ import annotations

import json
import keyword

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlvr_gym import FailureKind
from rlvr_gym.toolcall import ACTION_FORMATS, ParsedAction, ToolCall, parse_action

TAG_TOOLS = {"search": "query", "python": "code"}

_FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<answer>",
    "</answer>",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    '"name"',
    '"arguments"',
    ":",
    ",",
    "=",
    "search",
    "query",
    "'x'",
    '"y"',
    "1",
    "-2.5",
    "None",
    "True",
    "NaN",
    "\n",
    "```",
    "**",
    "lambda",
    "f.g",
    "\\",
    "\x00",
    "1e999",
    "<tool_name>",
    "</tool_name>",
    "<arguments>",
    "</arguments>",
    "<search>",
    "</search>",
    "<python>",
    "</python>",
]
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
_IDENTIFIERS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True).filter(lambda s: not keyword.iskeyword(s))
_NAMES = st.one_of(_IDENTIFIERS, st.builds(lambda a, b: f"{a}.{b}", _IDENTIFIERS, _IDENTIFIERS))
_ACTIONS = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=4), max_size=30).map("".join),
    st.builds(
        lambda n, a: f"<tool_call>{json.dumps({'name': n, 'arguments': a})}</tool_call>",
        _NAMES,
        st.dictionaries(st.text(max_size=6), _JSON_VALUES, max_size=3),
    ),
)


def _check(parsed: ParsedAction) -> None:
    assert isinstance(parsed, ParsedAction)
    if parsed.kind == "calls":
        assert parsed.calls and all(isinstance(c, ToolCall) and c.name for c in parsed.calls)
        for call in parsed.calls:
            json.dumps(call.arguments)  # arguments are JSON values
    elif parsed.kind == "answer":
        assert isinstance(parsed.answer, str)
    else:
        assert parsed.kind == "error" and parsed.failure is not None
        assert parsed.failure.kind is FailureKind.PARSE_ERROR and parsed.failure.message


@settings(max_examples=1_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(_ACTIONS)
def test_parser_total_1k(text: str) -> None:
    _check(parse_action(text))
    _check(parse_action(text, ACTION_FORMATS, TAG_TOOLS))


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck))
@given(_ACTIONS)
def test_parser_total_10k(text: str) -> None:
    _check(parse_action(text))
    _check(parse_action(text, ACTION_FORMATS, TAG_TOOLS))


@settings(max_examples=300, deadline=None)
@given(_NAMES, st.dictionaries(_IDENTIFIERS, _JSON_VALUES, max_size=3))
def test_round_trip_both_formats(name: str, arguments: dict) -> None:
    call = ToolCall(name, arguments)
    for text in (call.to_hermes(), call.to_python()):
        parsed = parse_action(text)
        assert parsed.kind == "calls", (text, parsed.failure)
        assert parsed.calls == (call,)


@pytest.mark.parametrize("depth", [200, 5_000])
def test_deep_nesting_is_a_parse_error_not_a_crash(depth: int) -> None:
    for text in ("f(x=" + "[" * depth + "]" * depth + ")", "<tool_call>" + "[" * depth + "]" * depth + "</tool_call>"):
        _check(parse_action(text))
