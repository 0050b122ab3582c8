"""``tools/BFCLMultiTurn-v0``: BFCL multi-turn tasks on the wheel's pure-Python back-ends.

An episode is a conversation of several user turns. Within a turn the agent calls the back-end functions
(file system, messaging, trading, travel, vehicle, ...), each call is executed on live back-end instances
loaded from the task's ``initial_config``, and the result comes back as a tool response; ``<answer>...</answer>``
or plain text without call syntax ends the turn (it is the reply to the user, as in BFCL), and the next user
message follows. Calls are parsed, validated
against the function docs and dispatched to a method of an instance; model text is never ``eval``'d
(upstream BFCL ``eval``s call strings).

At the end of each turn the turn is checked the way ``bfcl_eval``'s ``multi_turn_checker`` does: the turn's
ground-truth calls run on a second set of instances; then (a) when the ground truth is empty (the request
cannot be fulfilled: a missing function or parameter) the agent must not have called anything this turn;
(b) otherwise every public attribute of every instance must equal the ground truth's (state check) and the
ground truth's execution results of the turn must all appear among the agent's results so far (unordered
response check). The first failing turn ends the episode with reward 0; passing every turn gives 1.
"""

from __future__ import annotations

import ast
import copy
import importlib
import inspect
import json
from collections import Counter
from typing import Any

from rlvr_gym.core import StepResult
from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym.tasks import Task, load_suite
from rlvr_gym.toolcall import Tool, ToolCall, ToolEnv
from rlvr_gym.verifier import RewardResult
from rlvr_gym_tools.bfcl.data import class_function_docs, resolve, to_json_schema
from rlvr_gym_tools.bfcl.single_turn import render_messages

ENV_ID = "tools/BFCLMultiTurn-v0"
DEFAULT_SUITE = "tools/bfcl_multi_turn_base"
BACKEND_PREFIX = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"
BACKEND_MODULES = {
    "GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api", "MessageAPI": "message_api",
    "TwitterAPI": "posting_api", "TicketAPI": "ticket_api", "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking", "VehicleControlAPI": "vehicle_control",
}  # fmt: skip
STATELESS = ("MathAPI",)


def load_backends(data: dict[str, Any]) -> dict[str, Any]:
    """Fresh back-end instances of a task, by class name, loaded from ``initial_config`` (a deep copy)."""
    instances = {}
    for class_name in data["involved_classes"]:
        module = importlib.import_module(f"{BACKEND_PREFIX}.{BACKEND_MODULES[class_name]}")
        instance = getattr(module, class_name)()
        if class_name not in STATELESS:
            config = copy.deepcopy(data["initial_config"].get(class_name, {}))
            instance._load_scenario(config, long_context="long_context" in data["category"])
        instances[class_name] = instance
    return instances


def execute(instances: dict[str, Any], call: ToolCall) -> str:
    """Runs one call on the instance that has the method and formats the result as BFCL does (str as is,
    dict as JSON, anything else ``str()``; an exception becomes ``"Error during execution: ..."``)."""
    method = next((getattr(i, call.name) for i in instances.values() if _is_public_method(i, call.name)), None)
    if method is None:
        return f"Error during execution: no function {call.name!r}"
    try:
        result = method(**call.arguments)
    except Exception as error:  # noqa: BLE001  # the back-ends signal bad input by raising; BFCL shows the message
        return f"Error during execution: {error}"
    if isinstance(result, str):
        return result
    if isinstance(result, dict):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


def _is_public_method(instance: Any, name: str) -> bool:
    return not name.startswith("_") and inspect.ismethod(getattr(instance, name, None))


def parse_ground_truth_call(text: str, instances: dict[str, Any]) -> ToolCall:
    """Parses a ground-truth call string (literals only, never evaluated); positional arguments are named
    from the back-end method's signature.

    Raises:
        ValueError: when the string is not a call with literal arguments or names no back-end method.
    """
    node = ast.parse(text.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"ground-truth entry {text!r} is not a plain call")  # noqa: TRY004  # bad data, not a type
    name = node.func.id
    owner = next((i for i in instances.values() if _is_public_method(i, name)), None)
    if owner is None:
        raise ValueError(f"ground-truth call {text!r} names no method of {sorted(instances)}")
    params = list(inspect.signature(getattr(owner, name)).parameters)
    arguments = {params[i]: ast.literal_eval(arg) for i, arg in enumerate(node.args)}
    arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg is not None})
    return ToolCall(name, arguments)


def turn_tools(data: dict[str, Any], turn_index: int) -> list[Tool]:
    """The tools offered in user turn ``turn_index``: the docs of the involved classes, without
    ``excluded_function`` and without ``missed_function`` entries of later turns."""
    hidden = set(data.get("excluded_function") or [])
    for turn, names in (data.get("missed_function") or {}).items():
        if int(turn) > turn_index:
            hidden.update(names)
    docs = [d for c in data["involved_classes"] for d in class_function_docs(c) if d["name"] not in hidden]
    return [Tool(d["name"], d.get("description", ""), to_json_schema(d.get("parameters", {}))) for d in docs]


def _state(instance: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(instance).items() if not k.startswith("_")}


def check_turn(
    ground_truth: list[str],
    turn_calls: int,
    model: dict[str, Any],
    expected: dict[str, Any],
    model_results: list[str],
    expected_results: list[str],
) -> str | None:
    """The verdict of one finished turn: None when it passes, else why (see the module docstring)."""
    if not ground_truth:
        return None if turn_calls == 0 else "called functions although the request cannot be fulfilled"
    if turn_calls == 0:
        return "made no function call in a turn that needs one"
    for class_name, instance in expected.items():
        if _state(model[class_name]) != _state(instance):
            differing = sorted(k for k, v in _state(instance).items() if _state(model[class_name]).get(k) != v)
            return f"{class_name} state differs from the ground truth in {differing}"
    missing = Counter(expected_results) - Counter(model_results)
    if missing:
        return f"missing execution results of the ground truth: {list(missing)[:2]}"
    return None


class BFCLMultiTurnEnv(ToolEnv):
    """Carry out a multi-turn BFCL conversation with stateful back-end functions.

    Args:
        suite: the suite episodes are drawn from when ``reset`` gets no task.
        max_turns, max_tool_calls, action_formats, describe_tools_in_prompt: see :class:`ToolEnv`.

    Version History:
        v0: first version (BFCL v4 data and back-ends from ``bfcl-eval==2026.3.23``).
    """

    max_turns = 60
    max_tool_calls = 200

    plain_text_is_answer = True  # BFCL reads a reply that decodes to no call as a text answer

    def __init__(self, suite: str = DEFAULT_SUITE, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite

    def _start(self, task: Task | None) -> tuple[str, list[Tool], dict[str, Any]]:
        if task is None:
            tasks = load_suite(self.suite).tasks
            task = tasks[int(self.np_random.integers(len(tasks)))]
        self.data = resolve(task.data)
        self.model_instances, self.expected_instances = load_backends(self.data), load_backends(self.data)
        self.user_turn, self.turn_calls = 0, 0
        self.model_results: list[str] = []
        prompt = render_messages(self.data["question"][0]) or "(no new message)"
        return prompt, turn_tools(self.data, 0), {"category": self.data["category"], "user_turn": 0}

    def __deepcopy__(self, memo: dict[int, Any]) -> BFCLMultiTurnEnv:
        if hasattr(self, "data"):
            memo[id(self.data)] = self.data  # the wheel entry is cached and read-only: forks share it
        return super().__deepcopy__(memo)  # type: ignore[return-value]

    def _run_tool(self, call: ToolCall) -> tuple[str, Failure | None]:
        self.turn_calls += 1
        result = execute(self.model_instances, call)
        self.model_results.append(result)
        failure = Failure(FailureKind.TOOL_ERROR, result, {"tool": call.name}) if result.startswith("Error") else None
        return result, failure

    def _handle_answer(self, answer: str) -> StepResult:
        ground_truth = self.data["ground_truth"][self.user_turn]
        calls = [parse_ground_truth_call(text, self.expected_instances) for text in ground_truth]
        expected_results = [execute(self.expected_instances, call) for call in calls]
        problem = check_turn(ground_truth, self.turn_calls, self.model_instances, self.expected_instances,
                             self.model_results, expected_results)  # fmt: skip
        last = self.user_turn + 1 == len(self.data["question"])
        if problem is not None or last:
            reason = f"turn {self.user_turn}: {problem}" if problem else f"all {self.user_turn + 1} turns match"
            ok = problem is None
            return self._finish(RewardResult(float(ok), {"turns_passed": float(self.user_turn + ok)}, reason), 0)
        return self._next_user_turn()

    def _next_user_turn(self) -> StepResult:
        self.user_turn, self.turn_calls = self.user_turn + 1, 0
        tools = turn_tools(self.data, self.user_turn)
        added = [t for t in tools if t.name not in self.tools]
        self.tools = {tool.name: tool for tool in tools}
        obs = render_messages(self.data["question"][self.user_turn]) or "(no new message)"
        if added:
            obs += "\n\nNew tools are available: " + ", ".join(t.name for t in added) + "."
        info = {"tool_calls": 0, "invalid_tool_calls": 0, "user_turn": self.user_turn,
                "tools": [t.schema() for t in tools]}  # fmt: skip
        return StepResult(obs, 0.0, False, False, info)

    def _verify_answer(self, answer: str) -> RewardResult:  # answers are handled turn by turn
        raise NotImplementedError


def gold_actions(data: dict[str, Any]) -> list[str]:
    """Per user turn: one action with the ground-truth calls (keyword form, in order), then an answer."""
    instances = load_backends(data)
    actions = []
    for ground_truth in data["ground_truth"]:
        if ground_truth:
            calls = [parse_ground_truth_call(text, instances) for text in ground_truth]
            actions.append("".join(call.to_hermes() for call in calls))
            actions.append("<answer>Done.</answer>")
        else:
            actions.append("<answer>I cannot do that: a needed function or parameter is missing.</answer>")
    return actions


def wrong_actions(data: dict[str, Any]) -> list[str]:
    """The gold actions with the calls of the last turn that has any dropped (that turn then fails)."""
    actions = gold_actions(data)
    last_call_index = max(i for i, a in enumerate(actions) if a.startswith("<tool_call>"))
    return actions[:last_call_index] + actions[last_call_index + 1 :]
