"""The tool-call protocol: declared tools, an action parser, argument validation and a reusable ``ToolEnv``.

Tools are declared as JSON schemas in the OpenAI function format and listed in ``info["tools"]`` at reset::

    {"type": "function", "function": {"name": "search", "description": "...",
                                      "parameters": {"type": "object", "properties": {...}, "required": [...]}}}

An action is one of (see ``environments.md`` §6.5 for the formats in use):

- one or more Hermes/Qwen tool calls, ``<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>``
  (``"parameters"`` is accepted for ``"arguments"``, and the arguments may be a JSON-encoded string as in the
  OpenAI API), or in GEM's MCP form ``<tool_call><tool_name>search</tool_name><arguments>{"query": "x"}
  </arguments></tool_call>``;
- Python-style calls, ``search(query="x")``, one per line or as a list ``[f(a=1), g(b=2)]`` (BFCL style),
  parsed with :mod:`ast`; keyword arguments with literal values only, never evaluated;
- with format ``"tags"`` (ARPO/Tool-Star style), ``<search>query</search>`` or ``<python>code</python>`` for
  tools with exactly one required string argument;
- a final answer, ``<answer>...</answer>``.

Anything else is a :class:`~rlvr_gym.failures.FailureKind.PARSE_ERROR` whose message says what was wrong; a call
to an unknown tool or with arguments that do not match its schema is an ``INVALID_ACTION``; going over the
per-episode tool-call budget is ``BUDGET_EXCEEDED``. None of these raises.

Step-info keys written by :class:`ToolEnv` (read by the evaluation harness):
    ``tool_calls`` (int): tool calls attempted this step; an unparseable action counts as one.
    ``invalid_tool_calls`` (int): how many of those were rejected (parse error, unknown tool, bad arguments).
"""

from __future__ import annotations

import ast
import bisect
import copy
import dataclasses
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal

import jsonschema
import numpy as np

from rlvr_gym.core import Env, StepResult, first_invalid_text
from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym.verifier import RewardResult

ActionFormat = Literal["hermes", "python", "tags"]
ACTION_FORMATS: tuple[ActionFormat, ...] = ("hermes", "python", "tags")
TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
# Tags tolerate spaces inside the brackets ("< answer >"): word-level tokenizers decode with a space between
# tokens, and some models emit them.
_TOOL_CALL_OPEN_RE = re.compile(r"<\s*tool_call\s*>")
_TOOL_CALL_RE = re.compile(r"<\s*tool_call\s*>(.*?)(?:<\s*/\s*tool_call\s*>|\Z)", re.DOTALL)
_ANSWER_TAG_RE = re.compile(r"<\s*(/)?\s*answer\s*>")
_ANSWER_OPEN_RE = re.compile(r"<\s*answer\s*>")
_MCP_RE = re.compile(
    r"<\s*tool_name\s*>(.*?)<\s*/\s*tool_name\s*>\s*(?:<\s*arguments\s*>(.*?)<\s*/\s*arguments\s*>)?", re.DOTALL
)
# No two `\s*` may meet around an optional token: on a megabyte of whitespace that backtracks quadratically.
_CALL_LIKE_RE = re.compile(r"\s*(?:```[a-zA-Z]*\s*)?(?:\[\s*)?[A-Za-z_][\w.]*\s*\(")
_FENCE_RE = re.compile(r"^```[a-zA-Z]*\n?(.*?)\n?```$", re.DOTALL)
_FORMAT_HELP = (
    'call a tool with <tool_call>{"name": "tool", "arguments": {...}}</tool_call> or tool(arg=value), '
    "or give the final answer as <answer>...</answer>"
)


class ToolError(Exception):
    """Raised by a tool function for an error the agent should see (bad semantics, not found, ...).

    Args:
        message: shown to the agent as ``Error: <message>``.
        kind: the failure kind recorded in ``info["failure"]``; ``TOOL_ERROR`` by default, ``TIMEOUT`` or
            ``SANDBOX_ERROR`` for tools that run code.
    """

    def __init__(self, message: str, kind: FailureKind = FailureKind.TOOL_ERROR) -> None:
        super().__init__(message)
        self.kind = kind


@dataclasses.dataclass(frozen=True)
class ToolCall:
    """One parsed call: a tool name and its JSON-like arguments (str, int, float, bool, None, list, dict)."""

    name: str
    arguments: dict[str, Any]

    def to_hermes(self) -> str:
        """The call as ``<tool_call>{json}</tool_call>``."""
        return f"{TOOL_CALL_OPEN}{json.dumps({'name': self.name, 'arguments': self.arguments})}{TOOL_CALL_CLOSE}"

    def to_python(self) -> str:
        """The call as a Python-style string ``name(arg=value, ...)`` (values as Python literals)."""
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.arguments.items())})"


@dataclasses.dataclass(frozen=True)
class ParsedAction:
    """What :func:`parse_action` found: exactly one of calls, an answer or a failure.

    Attributes:
        kind: ``"calls"``, ``"answer"`` or ``"error"``.
        calls: the tool calls, in order (kind ``"calls"``).
        answer: the text inside ``<answer>`` tags, stripped (kind ``"answer"``).
        failure: a ``PARSE_ERROR`` saying what was wrong (kind ``"error"``).
    """

    kind: Literal["calls", "answer", "error"]
    calls: tuple[ToolCall, ...] = ()
    answer: str | None = None
    failure: Failure | None = None


class _ParseError(Exception):
    pass


class _NoCallFound(_ParseError):
    """Plain text: no call syntax and no answer tags at all."""


def _error(message: str, details: dict[str, Any] | None = None) -> ParsedAction:
    return ParsedAction("error", failure=Failure(FailureKind.PARSE_ERROR, message, details or {}))


def parse_action(
    text: str, formats: Sequence[ActionFormat] = ("hermes", "python"), tag_tools: Mapping[str, str] | None = None
) -> ParsedAction:
    """Parses one action into tool calls, a final answer, or a typed parse failure. Never raises.

    Args:
        text: the agent's action text.
        formats: the call formats accepted: ``"hermes"`` (``<tool_call>`` JSON), ``"python"`` (call strings),
            ``"tags"`` (ARPO/Tool-Star tag tools such as ``<search>query</search>``, for the tools in ``tag_tools``).
        tag_tools: for ``"tags"``: tool name -> the argument that receives the text between the tags.

    Returns:
        A :class:`ParsedAction`. An action with both tool calls and an answer is a parse error, as is an action
        with more than one ``<answer>``, or one whose names, arguments or answer hold invalid Unicode (a lone
        surrogate, e.g. from the JSON escape ``"\\ud800"``). Plain text (no call syntax, no answer tags) is a parse error whose
        ``details`` has ``plain_text: True``.
    """
    try:
        parsed = _parse(str(text), tuple(formats), dict(tag_tools or {}) if "tags" in formats else {})
        bad = first_invalid_text([parsed.answer, [(c.name, c.arguments) for c in parsed.calls]])
        if bad is not None:  # an escape such as "\\ud800" in JSON or a Python literal decodes to a lone surrogate
            return _error(f"the action decodes to invalid Unicode ({bad}); escape only whole characters")
        return parsed
    except _NoCallFound as error:
        return _error(str(error), {"plain_text": True})
    except _ParseError as error:
        return _error(str(error))
    except (RecursionError, MemoryError, ValueError, TypeError) as error:  # pathological input
        return _error(f"could not parse the action ({type(error).__name__}); {_FORMAT_HELP}")


def _parse(text: str, formats: tuple[str, ...], tag_tools: dict[str, str]) -> ParsedAction:
    answers = _paired_bodies(text, _ANSWER_TAG_RE)
    has_tags = _TOOL_CALL_OPEN_RE.search(text) is not None
    if has_tags and "hermes" not in formats:
        raise _ParseError("<tool_call> tags are not accepted here; write calls as tool(arg=value)")
    tag_calls = _tag_calls(text, tag_tools) if tag_tools and not has_tags else []
    if answers and (has_tags or tag_calls):
        raise _ParseError("an action is either tool calls or a final <answer>, not both; send the calls first")
    if len(answers) > 1:
        raise _ParseError(f"found {len(answers)} <answer> blocks; give exactly one final answer")
    if answers:
        return ParsedAction("answer", answer=answers[0].strip())
    if _ANSWER_OPEN_RE.search(text):
        raise _ParseError("unclosed <answer> tag; write <answer>...</answer>")
    if has_tags:
        return ParsedAction("calls", calls=tuple(c for body in _TOOL_CALL_RE.findall(text) for c in _hermes(body)))
    if tag_calls:
        return ParsedAction("calls", calls=tuple(tag_calls))
    if "python" in formats:
        calls = _python_calls(text)
        if calls:
            return ParsedAction("calls", calls=tuple(calls))
        if _CALL_LIKE_RE.match(text):
            raise _ParseError(f"{text.strip()[:60]!r} starts like a call but is not one; write tool(arg=value, ...)")
    raise _NoCallFound(f"no tool call or answer found; {_FORMAT_HELP}")


def _tag_calls(text: str, tag_tools: dict[str, str]) -> list[ToolCall]:
    names = "|".join(re.escape(name) for name in sorted(tag_tools, key=len, reverse=True))
    tags = re.compile(rf"<\s*(/)?\s*({names})\s*>")
    return [ToolCall(name, {tag_tools[name]: body.strip("\n")}) for name, body in _paired_bodies(text, tags, True)]


def _paired_bodies(text: str, tags: re.Pattern[str], named: bool = False) -> list[Any]:
    """What ``re.findall(r"<t>(.*?)</t>", text, re.DOTALL)`` gives (each opening tag at or after the end of
    the last match, paired with the next closing tag of the same name), in O(n log n): that ``findall``
    rescans to the end of the text from every unclosed ``<t>``, quadratic in a megabyte of them. ``tags``
    matches an opening or closing tag, group 1 the slash (and group 2 the name when ``named``: the result is
    then ``(name, body)`` pairs)."""
    opens: list[tuple[int, int, str | None]] = []
    closes: dict[str | None, list[tuple[int, int]]] = {}
    for tag in tags.finditer(text):
        name = tag.group(2) if named else None
        if tag.group(1) is None:
            opens.append((tag.start(), tag.end(), name))
        else:
            closes.setdefault(name, []).append((tag.start(), tag.end()))
    found: list[Any] = []
    cursor = 0
    for open_start, open_end, name in opens:
        candidates = closes.get(name, [])
        index = bisect.bisect_left(candidates, (open_end, -1))
        if open_start < cursor or index == len(candidates):
            continue
        close_start, cursor = candidates[index]
        body = text[open_end:close_start]
        found.append((name, body) if named else body)
    return found


def _hermes(body: str) -> list[ToolCall]:
    mcp = _MCP_RE.fullmatch(body.strip())
    if mcp is not None:  # GEM's MCP form: <tool_name>name</tool_name><arguments>{json}</arguments>
        return [_hermes_item({"name": mcp.group(1).strip(), "arguments": mcp.group(2) or "{}"})]
    try:
        payload = json.loads(body.strip(), parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise _ParseError(f"<tool_call> body is not valid JSON ({error.msg} at column {error.colno})") from None
    items = payload if isinstance(payload, list) else [payload]
    if not items:
        raise _ParseError('<tool_call> body is an empty list; expected {"name": ..., "arguments": {...}}')
    return [_hermes_item(item) for item in items]


def _reject_constant(name: str) -> Any:
    raise _ParseError(f"{name} is not a valid JSON value")


def _hermes_item(item: Any) -> ToolCall:
    if not isinstance(item, dict) or not isinstance(item.get("name"), str) or not item["name"]:
        raise _ParseError('each tool call must be a JSON object with a string "name" and an "arguments" object')
    arguments = item.get("arguments", item.get("parameters", {}))
    if isinstance(arguments, str):  # OpenAI sends arguments as a JSON-encoded string
        try:
            arguments = json.loads(arguments, parse_constant=_reject_constant) if arguments.strip() else {}
        except json.JSONDecodeError as error:
            raise _ParseError(
                f"arguments of {item['name']!r} are a string that is not valid JSON ({error.msg})"
            ) from None
    if not isinstance(arguments, dict):
        raise _ParseError(f'"arguments" of {item["name"]!r} must be a JSON object, got {type(arguments).__name__}')
    return ToolCall(item["name"], arguments)


def _python_calls(text: str) -> list[ToolCall]:
    stripped = text.strip()
    fenced = _FENCE_RE.match(stripped)
    source = fenced.group(1) if fenced else stripped
    try:
        module = ast.parse(source, mode="exec")
    except SyntaxError:
        return []
    nodes: list[ast.expr] = []
    for statement in module.body:
        if not isinstance(statement, ast.Expr):
            return []
        value = statement.value
        nodes.extend(value.elts if isinstance(value, ast.List | ast.Tuple) else [value])
    if not nodes or not all(isinstance(node, ast.Call) for node in nodes):
        return []
    return [_python_call(node) for node in nodes if isinstance(node, ast.Call)]


def _python_call(node: ast.Call) -> ToolCall:
    name = _dotted_name(node.func)
    if node.args:
        raise _ParseError(f"{name}(...) has positional arguments; pass every argument by keyword, e.g. {name}(x=1)")
    arguments: dict[str, Any] = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            raise _ParseError(f"{name}(...) uses **kwargs; pass every argument by keyword")
        try:
            value = ast.literal_eval(keyword.value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise _ParseError(f"argument {keyword.arg!r} of {name}(...) is not a literal value") from None
        arguments[keyword.arg] = _to_json_value(value, keyword.arg, name)
    return ToolCall(name, arguments)


def _dotted_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted_name(node.value)}.{node.attr}"
    raise _ParseError("a call must name a tool, like search(query='x')")


def _to_json_value(value: Any, arg: str, name: str) -> Any:
    if isinstance(value, tuple | list):
        return [_to_json_value(v, arg, name) for v in value]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise _ParseError(f"argument {arg!r} of {name}(...) has a dict with non-string keys")
        return {k: _to_json_value(v, arg, name) for k, v in value.items()}
    if value is None or isinstance(value, str | bool | int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise _ParseError(f"argument {arg!r} of {name}(...) is not a finite number")
        return value
    raise _ParseError(f"argument {arg!r} of {name}(...) is a {type(value).__name__}, not a JSON value")


@dataclasses.dataclass(frozen=True)
class Tool:
    """A tool an env declares.

    Attributes:
        name: the function name the agent calls.
        description: one or two sentences for the agent.
        parameters: a JSON schema of type ``object`` for the arguments.
        function: called with the validated arguments as keywords; returns the text the agent sees, or raises
            :class:`ToolError`. None for tools that are declared but not run (calls are the submission, as in BFCL).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., str] | None = None

    def __deepcopy__(self, memo: dict[int, Any]) -> Tool:
        # Forking an env copies its tools: the schema is shared (never mutated), the function is copied so
        # that a bound method follows the env copy it belongs to.
        return Tool(self.name, self.description, self.parameters, copy.deepcopy(self.function, memo))

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-format declaration listed in ``info["tools"]``."""
        function = {"name": self.name, "description": self.description, "parameters": self.parameters}
        return {"type": "function", "function": function}


def validate_call(call: ToolCall, tools: dict[str, Tool]) -> Failure | None:
    """Checks a call against the declared tools: known name, no unexpected argument, schema-valid values.

    Returns:
        None when the call is valid, else an ``INVALID_ACTION`` failure whose message says what to fix.
    """
    tool = tools.get(call.name)
    if tool is None:
        return _invalid(call, f"unknown tool {call.name!r}; available tools: {', '.join(sorted(tools)) or 'none'}")
    properties = tool.parameters.get("properties", {})
    for arg in call.arguments:
        if arg not in properties:
            expected = ", ".join(properties) or "none"
            return _invalid(call, f"unexpected argument {arg!r} for tool {call.name!r}; its arguments are: {expected}")
    errors = sorted(_validator(tool).iter_errors(call.arguments), key=lambda e: list(e.path))
    if not errors:
        return None
    error = errors[0]
    if error.validator == "required":
        missing = [r for r in error.validator_value if r not in call.arguments]
        return _invalid(call, f"tool {call.name!r} is missing required argument {missing[0]!r}")
    where = ".".join(map(str, error.path)) or "arguments"
    return _invalid(call, f"argument {where!r} of tool {call.name!r}: {error.message}")


def _invalid(call: ToolCall, message: str) -> Failure:
    return Failure(FailureKind.INVALID_ACTION, message, {"tool": call.name})


_VALIDATORS: dict[str, Any] = {}


def _validator(tool: Tool) -> Any:
    """The (cached) JSON-schema validator of a tool's parameters.

    Raises:
        ValueError: when the schema itself is invalid, naming the tool (an env bug, raised at reset).
    """
    key = json.dumps(tool.parameters, sort_keys=True)
    if key not in _VALIDATORS:
        cls = jsonschema.validators.validator_for(tool.parameters, default=jsonschema.Draft202012Validator)
        try:
            cls.check_schema(tool.parameters)
        except jsonschema.SchemaError as error:
            raise ValueError(f"tool {tool.name!r} declares an invalid JSON schema: {error.message}") from None
        _VALIDATORS[key] = cls(tool.parameters)
    return _VALIDATORS[key]


def format_tool_response(name: str, content: str) -> str:
    """Wraps one tool result the way Qwen/Hermes chat templates show it to the model."""
    return f'<tool_response name="{name}">\n{content}\n</tool_response>'


def describe_tools(tools: Sequence[Tool]) -> str:
    """A compact text listing of tools and the call format, for prompts of models without a tool template."""
    lines = ["Tools:"]
    for tool in tools:
        props = tool.parameters.get("properties", {})
        args = ", ".join(f"{k}: {_type_name(v.get('type', 'any'))}" for k, v in props.items())
        lines.append(f"- {tool.name}({args}): {tool.description}")
    lines.append(f"To act, {_FORMAT_HELP}.")
    return "\n".join(lines)


def _type_name(schema_type: Any) -> str:
    return " | ".join(map(str, schema_type)) if isinstance(schema_type, list) else str(schema_type)


class ToolEnv(Env):
    """Base of envs whose actions are tool calls and a final answer.

    Subclasses implement :meth:`_start` (the prompt and tools of a task) and :meth:`_verify_answer`; they may
    override :meth:`_handle_calls` when calls are the submission rather than something to run,
    :meth:`_handle_answer` when an answer does not end the episode (several user turns), and
    :meth:`_run_tool` to dispatch calls to a back-end instead of ``Tool.function``.

    Args:
        max_turns: the turn limit.
        max_tool_calls: per-episode budget of tool calls the env runs; a call beyond it ends the episode,
            truncated, with a ``BUDGET_EXCEEDED`` failure and reward 0.
        action_formats: accepted call formats, among ``"hermes"``, ``"python"`` and ``"tags"`` (tag tools, as
            ``<search>query</search>``, for every tool with exactly one required string argument).
        describe_tools_in_prompt: append :func:`describe_tools` to the first observation (for models whose
            chat template does not render ``info["tools"]``).
    """

    max_tool_calls: int = 10
    plain_text_is_answer: bool = False
    """Treat an action with no call syntax and no ``<answer>`` tags as the final answer (a chat reply), as
    BFCL does, instead of a parse error."""

    def __init__(
        self,
        max_turns: int | None = None,
        max_tool_calls: int | None = None,
        action_formats: Sequence[ActionFormat] = ("hermes", "python"),
        describe_tools_in_prompt: bool = True,
        render_mode: str | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        if max_tool_calls is not None:
            if max_tool_calls < 0:
                raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
            self.max_tool_calls = int(max_tool_calls)
        unknown = set(action_formats) - set(ACTION_FORMATS)
        if unknown or not action_formats:
            raise ValueError(f"action_formats must be a non-empty subset of {ACTION_FORMATS}, got {action_formats}")
        self.action_formats = tuple(action_formats)
        self.describe_tools_in_prompt = describe_tools_in_prompt
        self.tools: dict[str, Tool] = {}
        self.num_tool_calls = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> ToolEnv:
        # fork() deep-copies the env. The task is a frozen pydantic model and its data is never mutated, so
        # the copy shares them; the random generator is rebuilt from its state. Both are several times faster
        # than deep copies and were most of the cost of forking a tool env.
        for frozen in (self.task, (self._reset_args[1] or {}).get("task")):
            if frozen is not None and not isinstance(frozen, dict):
                memo[id(frozen)] = frozen
                memo[id(frozen.data)] = frozen.data  # envs keep a reference to the task's data; never mutated
        generator = getattr(self, "_np_random", None)
        if isinstance(generator, np.random.Generator):  # ~20x faster than deep-copying a Generator
            bit_generator = type(generator.bit_generator)()
            bit_generator.state = generator.bit_generator.state
            memo[id(generator)] = np.random.Generator(bit_generator)
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        clone.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return clone

    # -- hooks ------------------------------------------------------------------------------------------
    def _start(self, task: Any) -> tuple[str, list[Tool], dict[str, Any]]:
        """Starts an episode; returns ``(prompt, tools, extra_info)``."""
        raise NotImplementedError

    def _verify_answer(self, answer: str) -> RewardResult:
        """Scores the final answer."""
        raise NotImplementedError

    # -- the protocol -----------------------------------------------------------------------------------
    def _reset(self, task: Any) -> tuple[str, dict[str, Any]]:
        prompt, tools, info = self._start(task)
        self.tools = {tool.name: tool for tool in tools}
        for tool in tools:
            _validator(tool)  # an invalid schema is the env's bug: fail at reset, not at the agent's first call
        self.num_tool_calls = 0
        if self.describe_tools_in_prompt and tools:
            prompt = f"{prompt}\n\n{describe_tools(tools)}"
        return prompt, {**info, "tools": [tool.schema() for tool in tools]}

    def _step(self, action: str) -> StepResult:
        parsed = parse_action(action, self.action_formats, _tag_arguments(self.tools.values()))
        if parsed.kind == "error":
            assert parsed.failure is not None
            if self.plain_text_is_answer and parsed.failure.details.get("plain_text"):
                return self._handle_answer(action.strip())
            obs = f"Invalid action: {parsed.failure.message}."
            return StepResult(obs, 0.0, False, False, _info(1, 1, parsed.failure))
        if parsed.kind == "answer":
            return self._handle_answer(parsed.answer or "")
        return self._handle_calls(list(parsed.calls))

    def _handle_answer(self, answer: str) -> StepResult:
        """Ends the episode with the verified answer. Envs with several user turns override this."""
        return self._finish(self._verify_answer(answer), tool_calls=0)

    def _handle_calls(self, calls: list[ToolCall]) -> StepResult:
        """Validates and runs the calls in order; one observation holds every response."""
        checks = [validate_call(call, self.tools) for call in calls]
        num_valid = sum(check is None for check in checks)
        if self.num_tool_calls + num_valid > self.max_tool_calls:
            message = f"tool-call budget of {self.max_tool_calls} per episode exhausted"
            result = RewardResult(0.0, {"budget_exceeded": 1.0}, message)
            budget = Failure(FailureKind.BUDGET_EXCEEDED, message)
            info = {**_info(len(calls), len(calls) - num_valid, budget), **_final(result)}
            return StepResult(f"Episode over: {message}.", 0.0, False, True, info)
        responses: list[str] = []
        failures: list[Failure | None] = []
        for call, failure in zip(calls, checks, strict=True):
            if failure is None:
                self.num_tool_calls += 1
                content, failure = self._run_tool(call)
            else:
                content = f"Error: {failure.message}"
            failures.append(failure)
            responses.append(format_tool_response(call.name, content))
        first = next((f for f in failures if f is not None), None)
        return StepResult("\n".join(responses), 0.0, False, False, _info(len(calls), len(calls) - num_valid, first))

    def _run_tool(self, call: ToolCall) -> tuple[str, Failure | None]:
        tool = self.tools[call.name]
        if tool.function is None:
            return "(declared tool; nothing was run)", None
        try:
            return str(tool.function(**call.arguments)), None
        except ToolError as error:
            return f"Error: {error}", Failure(error.kind, str(error), {"tool": call.name})

    def _finish(self, result: RewardResult, tool_calls: int, invalid: int = 0,
                failure: Failure | None = None) -> StepResult:
        """Ends the episode with ``result``; ``failure`` (e.g. the first invalid call's) goes in ``info``."""
        obs = "Correct." if result.success else f"Incorrect. {result.reason}".strip()
        return StepResult(obs, result.value, True, False, {**_info(tool_calls, invalid, failure), **_final(result)})


def _tag_arguments(tools: Iterable[Tool]) -> dict[str, str]:
    """Tool name -> argument, for the tools callable as tags: exactly one required argument, a string."""
    found = {}
    for tool in tools:
        required = tool.parameters.get("required", [])
        properties = tool.parameters.get("properties", {})
        if len(required) == 1 and properties.get(required[0], {}).get("type") == "string":
            found[tool.name] = required[0]
    return found


def _info(tool_calls: int, invalid: int, failure: Failure | None) -> dict[str, Any]:
    info: dict[str, Any] = {"tool_calls": tool_calls, "invalid_tool_calls": invalid}
    if failure is not None:
        info["failure"] = failure
    return info


def _final(result: RewardResult) -> dict[str, Any]:
    return {"reward_details": result.to_dict(), "success": result.success}
