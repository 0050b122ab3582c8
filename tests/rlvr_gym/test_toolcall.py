"""The tool-call protocol: parser, validation and the ToolEnv step loop."""

from __future__ import annotations

from typing import Any

import pytest

from rlvr_gym import FailureKind, RewardResult
from rlvr_gym.toolcall import (
    Tool,
    ToolCall,
    ToolEnv,
    ToolError,
    describe_tools,
    parse_action,
    validate_call,
)

ADD = Tool(
    "add",
    "Adds two integers.",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
)


def _add(a: int, b: int) -> str:
    if a < 0:
        raise ToolError("a must be non-negative")
    return str(a + b)


class AdderEnv(ToolEnv):
    """Adds numbers with a tool; the answer is 5.

    Version History:
        v0: test double.
    """

    max_turns = 5
    max_tool_calls = 2

    def _start(self, task: Any) -> tuple[str, list[Tool], dict[str, Any]]:
        return "What is 2 + 3?", [Tool(ADD.name, ADD.description, ADD.parameters, _add)], {}

    def _verify_answer(self, answer: str) -> RewardResult:
        ok = answer.strip() == "5"
        return RewardResult(float(ok), {"exact_match": float(ok)}, "exact match" if ok else "expected 5")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>', [("add", {"a": 1, "b": 2})]),
        ('<tool_call>{"name": "add", "parameters": {"a": 1}}</tool_call>', [("add", {"a": 1})]),
        ('<tool_call>{"name": "f", "arguments": "{\\"x\\": [1]}"}</tool_call>', [("f", {"x": [1]})]),
        ('<tool_call>{"name": "f"}</tool_call> and <tool_call>{"name": "g", "arguments": {}}', [("f", {}), ("g", {})]),
        ("add(a=1, b=-2)", [("add", {"a": 1, "b": -2})]),
        ('<tool_call><tool_name>add</tool_name><arguments>{"a": 1}</arguments></tool_call>', [("add", {"a": 1})]),
        ("<tool_call>\n<tool_name>ls</tool_name>\n</tool_call>", [("ls", {})]),
        (
            '[math.hypot(x=4, y=5), g(s="t", l=(1, 2), d={"k": None})]',
            [("math.hypot", {"x": 4, "y": 5}), ("g", {"s": "t", "l": [1, 2], "d": {"k": None}})],
        ),
        ("```python\nf(a=True)\ng(b=1.5)\n```", [("f", {"a": True}), ("g", {"b": 1.5})]),
    ],
)
def test_parser_reads_calls(text: str, expected: list[tuple[str, dict[str, Any]]]) -> None:
    parsed = parse_action(text)
    assert parsed.kind == "calls", parsed.failure
    assert [(c.name, c.arguments) for c in parsed.calls] == expected


def test_parser_reads_answer() -> None:
    parsed = parse_action("I think so. <answer>  Paris </answer>")
    assert (parsed.kind, parsed.answer) == ("answer", "Paris")


def test_tags_tolerate_spaces_as_word_level_tokenizers_decode_them() -> None:
    assert parse_action("< answer > Paris </ answer >").answer == "Paris"
    parsed = parse_action('< tool_call >{"name": "add", "arguments": {"a": 1}}</ tool_call >')
    assert parsed.calls == (ToolCall("add", {"a": 1}),)
    assert parse_action("lookup ( entity =' Upper Falmont ')").calls == (
        ToolCall("lookup", {"entity": " Upper Falmont "}),
    )
    assert parse_action("< search > x </ search >", ("tags",), {"search": "query"}).calls[0].arguments == {
        "query": " x "
    }
    assert parse_action("< answer > unclosed").failure is not None


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("just words", "no tool call or answer found"),
        ("<tool_call>{not json}</tool_call>", "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'string "name"'),
        ('<tool_call>{"name": "f", "arguments": [1]}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>', "NaN is not a valid JSON value"),
        ("<tool_call>[]</tool_call>", "empty list"),
        ("add(1, 2)", "positional arguments"),
        ("add(a=x)", "not a literal"),
        ("add(a={1, 2})", "set, not a JSON value"),
        ("f(**kw)", "**kwargs"),
        ("<answer>1</answer><answer>2</answer>", "found 2 <answer>"),
        ('<tool_call>{"name": "f"}</tool_call><answer>1</answer>', "not both"),
        ("<answer>unclosed", "unclosed <answer>"),
        ("(lambda: 1)()", "must name a tool"),
    ],
)
def test_parser_explains_failures(text: str, fragment: str) -> None:
    parsed = parse_action(text)
    assert parsed.kind == "error" and parsed.failure is not None
    assert parsed.failure.kind is FailureKind.PARSE_ERROR
    assert fragment in parsed.failure.message


def test_formats_can_be_restricted() -> None:
    assert parse_action("add(a=1, b=2)", formats=("hermes",)).kind == "error"
    failure = parse_action('<tool_call>{"name": "f"}</tool_call>', formats=("python",)).failure
    assert failure is not None and "not accepted" in failure.message


def test_python_calls_are_never_evaluated(tmp_path: Any) -> None:
    marker = tmp_path / "pwned"
    parsed = parse_action(f"open(file={str(marker)!r}, mode='w')")
    assert parsed.kind == "calls" and not marker.exists()
    assert parse_action(f"f(x=open({str(marker)!r}, 'w'))").kind == "error" and not marker.exists()


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"a": 1}, "missing required argument 'b'"),
        ({"a": 1, "b": 2, "c": 3}, "unexpected argument 'c'"),
        ({"a": "1", "b": 2}, "'1' is not of type 'integer'"),
    ],
)
def test_validation_messages(arguments: dict[str, Any], fragment: str) -> None:
    failure = validate_call(ToolCall("add", arguments), {"add": ADD})
    assert failure is not None and failure.kind is FailureKind.INVALID_ACTION
    assert fragment in failure.message


def test_validation_accepts_valid_and_rejects_unknown() -> None:
    assert validate_call(ToolCall("add", {"a": 1, "b": 2}), {"add": ADD}) is None
    failure = validate_call(ToolCall("sub", {}), {"add": ADD})
    assert failure is not None and "unknown tool 'sub'; available tools: add" in failure.message


def test_tool_schema_is_openai_function_format() -> None:
    assert ADD.schema() == {
        "type": "function",
        "function": {"name": "add", "description": "Adds two integers.", "parameters": ADD.parameters},
    }
    assert "add(a: integer, b: integer)" in describe_tools([ADD])


def test_env_runs_tools_and_scores_answer() -> None:
    env = AdderEnv()
    obs, info = env.reset(seed=0)
    assert info["tools"][0]["function"]["name"] == "add" and "Tools:" in obs
    obs, reward, terminated, truncated, info = env.step("add(a=2, b=3)")
    assert obs == '<tool_response name="add">\n5\n</tool_response>'
    assert (reward, terminated, truncated, info["tool_calls"], info["invalid_tool_calls"]) == (0.0, False, False, 1, 0)
    assert "failure" not in info
    obs, reward, terminated, truncated, info = env.step("<answer>5</answer>")
    assert (reward, terminated, info["success"], info["tool_calls"]) == (1.0, True, True, 0)
    assert info["reward_details"]["components"] == {"exact_match": 1.0}


def test_env_reports_invalid_calls_and_tool_errors() -> None:
    env = AdderEnv()
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step("add(a=1)\nadd(a=-1, b=1)\nmul(a=1)")
    assert not terminated and (info["tool_calls"], info["invalid_tool_calls"]) == (3, 2)
    assert info["failure"].kind is FailureKind.INVALID_ACTION and "missing required argument 'b'" in obs
    assert "Error: a must be non-negative" in obs and "unknown tool 'mul'" in obs
    assert env.num_tool_calls == 1  # only the valid call ran
    obs, _, _, _, info = env.step("gibberish")
    assert info["failure"].kind is FailureKind.PARSE_ERROR and obs.startswith("Invalid action: no tool call")
    assert (info["tool_calls"], info["invalid_tool_calls"]) == (1, 1)


def test_tool_error_is_typed() -> None:
    env = AdderEnv()
    env.reset(seed=0)
    _, _, _, _, info = env.step("add(a=-1, b=1)")
    assert info["failure"].kind is FailureKind.TOOL_ERROR and info["invalid_tool_calls"] == 0


def test_budget_exceeded_truncates_with_zero_reward() -> None:
    env = AdderEnv()
    env.reset(seed=0)
    env.step("add(a=1, b=1)\nadd(a=1, b=2)")
    obs, reward, terminated, truncated, info = env.step("add(a=2, b=3)")
    assert (reward, terminated, truncated, info["success"]) == (0.0, False, True, False)
    assert info["failure"].kind is FailureKind.BUDGET_EXCEEDED and "budget of 2" in obs


def test_wrong_answer_scores_zero_and_fork_is_independent() -> None:
    env = AdderEnv()
    env.reset(seed=0)
    env.step("add(a=2, b=3)")
    child = env.fork()
    assert child.step("<answer>5</answer>").reward == 1.0
    assert env.step("<answer>6</answer>").reward == 0.0


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="action_formats"):
        AdderEnv(action_formats=("xml",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_tool_calls"):
        AdderEnv(max_tool_calls=-1)


def test_fork_shares_the_frozen_task_and_copies_the_generator() -> None:
    from rlvr_gym.tasks import Task

    env = AdderEnv()
    task = Task(id="t", env_id="testing/Adder-v0", data={"x": [1]})
    env.reset(seed=3, options={"task": task})
    env.step("add(a=2, b=3)")
    child = env.fork()
    assert child.task is env.task and child.tools["add"] is not env.tools["add"]
    assert child.np_random is not env.np_random
    assert child.np_random.integers(1_000_000) == env.np_random.integers(1_000_000)
    child.step("add(a=1, b=1)")
    assert (child.num_tool_calls, env.num_tool_calls) == (2, 1)


def test_tag_tools() -> None:
    tags = {"search": "query", "python": "code"}
    parsed = parse_action("Let me look. <search>founder of X</search>", ("tags",), tags)
    assert parsed.calls == (ToolCall("search", {"query": "founder of X"}),)
    parsed = parse_action("<python>\nprint(1)\n</python> then <search>y</search>", ("tags",), tags)
    assert parsed.calls == (ToolCall("python", {"code": "print(1)"}), ToolCall("search", {"query": "y"}))
    assert parse_action("<search>x</search><answer>1</answer>", ("tags",), tags).kind == "error"
    assert parse_action("<search>x</search>", ("hermes", "python"), tags).kind == "error"  # tags not enabled
    assert parse_action("<other>x</other>", ("tags",), tags).kind == "error"


def test_env_accepts_tag_tools_for_single_string_argument_tools() -> None:
    from rlvr_gym.toolcall import _tag_arguments

    echo = Tool("echo", "Echoes.", {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]})
    assert _tag_arguments([ADD, echo]) == {"echo": "text"}  # add has two integer arguments


def test_invalid_tool_schema_fails_at_reset() -> None:
    class BadEnv(AdderEnv):
        def _start(self, task: Any) -> tuple[str, list[Tool], dict[str, Any]]:
            return "x", [Tool("bad", "Bad.", {"type": "object", "properties": {"a": {"type": "integr"}}})], {}

    with pytest.raises(ValueError, match="tool 'bad' declares an invalid JSON schema"):
        BadEnv().reset(seed=0)


def test_plain_text_can_be_the_answer() -> None:
    assert parse_action("just words").failure.details == {"plain_text": True}  # type: ignore[union-attr]
    assert parse_action("f(").failure.details == {}  # type: ignore[union-attr]

    class ChatEnv(AdderEnv):
        plain_text_is_answer = True

    env = ChatEnv()
    env.reset(seed=0)
    assert env.step("5").reward == 1.0
