"""tools/BFCL-v0 and tools/BFCLMultiTurn-v0: the AST matcher, the shipped suites, both envs."""

from __future__ import annotations

from typing import Any

import pytest
from rlvr_gym_tools.bfcl.data import MULTI_TURN, SINGLE_TURN, UNSUPPORTED, load_category, resolve, to_json_schema
from rlvr_gym_tools.bfcl.matcher import match_calls, standardize_string, value_matches
from rlvr_gym_tools.bfcl.multi_turn import parse_ground_truth_call, turn_tools
from rlvr_gym_tools.bfcl.single_turn import perturbations, score_submission

import rlvr_gym
from rlvr_gym import FailureKind, load_suite
from rlvr_gym.toolcall import ToolCall, parse_action

DOC = {
    "name": "math.area",
    "parameters": {
        "type": "dict",
        "properties": {"base": {"type": "float"}, "unit": {"type": "string"}, "opts": {"type": "dict"}},
        "required": ["base"],
    },
}
TRUTH = [
    {"math.area": {"base": [10.0], "unit": ["square meters", ""], "opts": ["", {"round": [True], "digits": ["", 2]}]}}
]


@pytest.mark.parametrize(
    ("arguments", "ok"),
    [
        ({"base": 10}, True),  # an int matches an allowed float
        ({"base": 10.0, "unit": "Square-Meters"}, True),  # strings compare after standardisation
        ({"base": True}, False),  # a bool is not a number
        ({"base": 11.0}, False),
        ({"unit": "square meters"}, False),  # required parameter missing
        ({"base": 10, "colour": "red"}, False),  # not in the doc
        ({"base": 10, "opts": {"round": True}}, True),  # optional dict key omitted
        ({"base": 10, "opts": {"round": True, "digits": 3}}, False),
        ({"base": 10, "opts": {"digits": 2}}, False),  # required dict key missing
    ],
)
def test_single_call_rules(arguments: dict[str, Any], ok: bool) -> None:
    assert match_calls([ToolCall("math.area", arguments)], TRUTH, [DOC]).value == float(ok)


def test_names_may_use_underscores_and_parallel_calls_match_in_any_order() -> None:
    assert match_calls([ToolCall("math_area", {"base": 10})], TRUTH, [DOC]).value == 1.0
    truth = [{"f": {"x": [1]}}, {"f": {"x": [2, 1]}}]
    # Greedy pairing (BFCL's) would give f(x=1) to the first answer and fail the second: we search all pairings.
    assert match_calls([ToolCall("f", {"x": 2}), ToolCall("f", {"x": 1})], truth, []).value == 1.0
    assert match_calls([ToolCall("f", {"x": 1}), ToolCall("f", {"x": 1})], truth, []).value == 1.0
    assert match_calls([ToolCall("f", {"x": 2}), ToolCall("f", {"x": 2})], truth, []).value == 0.0
    assert match_calls([ToolCall("f", {"x": 1})], truth, []).reason == "expected 2 call(s), got 1"


def test_value_rules() -> None:
    assert standardize_string("April 1, 2024") == standardize_string("april 1 2024") == "april12024"
    assert value_matches([1, 2], [1, 2]) and not value_matches([2, 1], [1, 2])
    assert value_matches({"lateral": 10.5}, {"lateral": 10.5}) and not value_matches({"lateral": 1}, {"lateral": 10.5})
    assert not value_matches("1", 1) and not value_matches(None, "") and value_matches(None, None)


def test_schema_conversion() -> None:
    schema = to_json_schema(DOC["parameters"])
    assert schema["type"] == "object" and schema["properties"]["base"] == {"type": "number"}
    assert schema["properties"]["opts"] == {"type": "object", "properties": {}}
    assert to_json_schema({"type": "tuple", "items": {"type": "any"}}) == {"type": "array", "items": {}}


def test_unsupported_categories_are_refused_with_a_reason() -> None:
    assert set(UNSUPPORTED).isdisjoint(SINGLE_TURN + MULTI_TURN)
    with pytest.raises(ValueError, match="live web search"):
        load_category("web_search")


@pytest.mark.parametrize("category", SINGLE_TURN)
def test_every_shipped_gold_scores_one_and_every_perturbation_zero(category: str) -> None:
    suite = load_suite(f"tools/bfcl_{category}")
    assert len(suite) >= 0.99 * len(load_category(category))  # only the listed broken entries are left out
    kinds_seen: set[str] = set()
    for task in suite:
        entry = resolve(task.data)
        assert score_submission(entry, list(parse_action(task.gold[0]).calls)).value == 1.0, task.id
        assert score_submission(entry, list(parse_action(task.wrong[0]).calls)).value == 0.0, task.id
        for kind, calls in perturbations(entry).items():
            kinds_seen.add(kind)
            assert score_submission(entry, calls).value == 0.0, (task.id, kind)
    expected = {"spurious_call"} if "irrelevance" in category else {"wrong_function", "wrong_argument", "wrong_value"}
    assert kinds_seen == expected


def test_single_turn_env() -> None:
    env = rlvr_gym.make("tools/BFCL-v0")
    task = load_suite("tools/bfcl_parallel")[0]
    obs, info = env.reset(options={"task": task})
    assert obs.startswith(resolve(task.data)["question"][0][-1]["content"]) and info["category"] == "parallel"
    assert info["tools"][0]["function"]["parameters"]["type"] == "object"
    result = env.step('spotify.play(artist="x"')  # malformed call syntax: explained, costs a turn
    assert not result.terminated and result.info["failure"].kind is FailureKind.PARSE_ERROR
    result = env.step(task.gold[0])
    assert (result.reward, result.terminated, result.info["tool_calls"]) == (1.0, True, 2)
    env.reset(options={"task": task})
    python_style = "[" + ", ".join(c.to_python() for c in parse_action(task.gold[0]).calls) + "]"
    assert env.step(python_style).reward == 1.0
    env.reset(options={"task": task})
    assert env.step("<answer>no idea</answer>").reward == 0.0
    env.reset(options={"task": task})
    result = env.step("I am not sure")  # plain text is a text reply, as BFCL decodes it: no call
    assert result.terminated and result.reward == 0.0


def test_irrelevance_env_and_invalid_call_count() -> None:
    env = rlvr_gym.make("tools/BFCL-v0")
    task = load_suite("tools/bfcl_irrelevance")[0]
    env.reset(options={"task": task})
    assert env.step(task.gold[0]).reward == 1.0
    env.reset(options={"task": task})
    result = env.step("nonexistent_function(x=1)")
    assert result.reward == 0.0 and result.info["invalid_tool_calls"] == 1
    failure = result.info["failure"]
    assert failure.kind is FailureKind.INVALID_ACTION and "nonexistent_function" in failure.message


def test_an_invalid_call_is_typed_and_a_valid_one_is_not() -> None:
    env = rlvr_gym.make("tools/BFCL-v0")
    task = load_suite("tools/bfcl_simple_python")[0]
    env.reset(options={"task": task})
    assert "failure" not in env.step(task.gold[0]).info
    name = env.entry["function"][0]["name"]
    env.reset(options={"task": task})
    result = env.step(f"{name}(not_a_parameter=1)")
    assert result.info["failure"].kind is FailureKind.INVALID_ACTION
    assert "not_a_parameter" in result.info["failure"].message


def _play(env: rlvr_gym.Env, actions: list[str]) -> float:
    total = 0.0
    for action in actions:
        result = env.step(action)
        total += result.reward
        if result.terminated or result.truncated:
            break
    return total


@pytest.mark.parametrize("category", MULTI_TURN)
def test_multi_turn_gold_and_wrong_sample(category: str) -> None:
    env = rlvr_gym.make("tools/BFCLMultiTurn-v0")
    for task in list(load_suite(f"tools/bfcl_{category}"))[::25]:
        env.reset(options={"task": task})
        assert _play(env, task.gold) == 1.0, task.id
        env.reset(options={"task": task})
        assert _play(env, task.wrong) == 0.0, task.id


@pytest.mark.slow
@pytest.mark.parametrize("category", MULTI_TURN)
def test_multi_turn_gold_and_wrong_all(category: str) -> None:
    env = rlvr_gym.make("tools/BFCLMultiTurn-v0")
    for task in load_suite(f"tools/bfcl_{category}"):
        env.reset(options={"task": task})
        assert _play(env, task.gold) == 1.0, task.id
        env.reset(options={"task": task})
        assert _play(env, task.wrong) == 0.0, task.id


def test_missing_function_turn_reveals_tools_and_punishes_calls() -> None:
    task = next(t for t in load_suite("tools/bfcl_multi_turn_miss_func") if t.id == "multi_turn_miss_func_0")
    entry = resolve(task.data)
    assert "sort" not in {t.name for t in turn_tools(entry, 2)} and "sort" in {t.name for t in turn_tools(entry, 3)}
    assert "cp" not in {t.name for t in turn_tools(entry, 3)}  # excluded_function
    env = rlvr_gym.make("tools/BFCLMultiTurn-v0")
    env.reset(options={"task": task})
    for action in task.gold[:4]:  # turns 0 and 1: calls then answer
        env.step(action)
    result = env.step(task.gold[4])  # turn 2 cannot be fulfilled: answering without calls passes it
    assert "New tools are available: sort." in result.observation
    assert "sort" in {t["function"]["name"] for t in result.info["tools"]}
    env.reset(options={"task": task})
    for action in task.gold[:4]:
        env.step(action)
    env.step("ls(a=True)")  # a call in the turn that cannot be fulfilled
    result = env.step("<answer>done</answer>")
    assert (
        result.terminated and result.reward == 0.0 and "although the request cannot be fulfilled" in result.observation
    )


def test_multi_turn_fork_copies_backend_state() -> None:
    task = load_suite("tools/bfcl_multi_turn_base")[0]
    env = rlvr_gym.make("tools/BFCLMultiTurn-v0")
    env.reset(options={"task": task})
    env.step(task.gold[0])
    child = env.fork()
    assert _play(child, task.gold[1:]) == 1.0
    assert _play(env, task.gold[1:]) == 1.0  # the child's calls did not touch the parent's back-ends


def test_ground_truth_strings_are_parsed_not_evaluated() -> None:
    task = load_suite("tools/bfcl_multi_turn_base")[0]
    from rlvr_gym_tools.bfcl.multi_turn import load_backends

    instances = load_backends(resolve(task.data))
    assert parse_ground_truth_call("sort('a.txt')", instances) == ToolCall("sort", {"file_name": "a.txt"})
    with pytest.raises(ValueError):
        parse_ground_truth_call("sort(file_name=__import__('os').getcwd())", instances)


def test_forks_share_the_read_only_wheel_entry() -> None:
    for env_id, suite in (
        ("tools/BFCL-v0", "tools/bfcl_simple_python"),
        ("tools/BFCLMultiTurn-v0", "tools/bfcl_multi_turn_base"),
    ):
        env = rlvr_gym.make(env_id)
        env.reset(options={"task": load_suite(suite)[0]})
        child = env.fork()
        entry = "entry" if env_id == "tools/BFCL-v0" else "data"
        assert getattr(child, entry) is getattr(env, entry)


def test_null_defaults_make_parameters_nullable() -> None:
    schema = to_json_schema({"type": "integer", "enum": [1, 2], "default": None})
    assert schema["type"] == ["integer", "null"] and schema["enum"] == [1, 2, None]
    assert to_json_schema({"type": "string", "default": "x"})["type"] == "string"
