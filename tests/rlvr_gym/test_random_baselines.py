"""``--agent random`` speaks each family's grammar and solves some tasks of every family by chance.

Measured on more tasks by ``benchmarks/random_baselines.py``; these tests pin a few tasks per family where
a random valid-looking action is known to succeed, and check the actions parse.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import rlvr_gym
from rlvr_gym.evaluation import evaluate
from rlvr_gym.testing import RandomAgent
from rlvr_gym.testing.agents import family_random_action


def _tasks(suite: str, ids: list[str]) -> list[rlvr_gym.Task]:
    return [t for t in rlvr_gym.load_suite(suite) if t.id in ids]


@pytest.mark.parametrize(("suite", "task_ids", "k"), [
    ("textworld/starter-test", None, 8),  # all 200 tasks: random admissible actions
    ("tools/bfcl_irrelevance", ["irrelevance_0", "irrelevance_3"], 8),  # answering without a call is right
    ("rtl/verilogeval", ["ve-Prob001_zero", "ve-Prob007_wire"], 8),  # a constant / an input on the output
    ("code/humaneval", ["humaneval-023"], 16),  # strlen: `return len(args[0])`
])
def test_random_agent_solves_some_tasks_of_each_family(suite: str, task_ids: list[str] | None, k: int) -> None:
    tasks = rlvr_gym.load_suite(suite).tasks if task_ids is None else _tasks(suite, task_ids)
    report = evaluate(RandomAgent(seed=0), tasks, k=k, progress=False)
    assert report.metrics[f"pass@{k}"] > 0, report.metrics["episodes_ended_by"]
    assert report.metrics["episodes_ended_by"].get("parse_error", 0) < len(report.records)


def test_random_tool_calls_are_schema_typed_and_parse() -> None:
    task = rlvr_gym.load_suite("tools/bfcl_simple_python")[0]
    env = rlvr_gym.make(task.env_id)
    agent = RandomAgent(seed=1, tool_call_prob=1.0)
    agent.reset(task)
    observation, info = env.reset(options={"task": task})
    action = agent.act(observation, info)
    call = json.loads(action.removeprefix("<tool_call>").removesuffix("</tool_call>"))
    schema = info["tools"][0]["function"]["parameters"]
    assert set(schema["required"]) <= set(call["arguments"])
    _, _, _, _, step_info = env.step(action)
    env.close()
    assert step_info.get("failure") is None or step_info["failure"].kind.value != "parse_error"


def test_family_hooks_follow_each_grammar() -> None:
    rng = np.random.default_rng(0)
    web = family_random_action("web/MiniWoB-v0")
    assert web is not None
    page = "Goal: Click the button.\nPage:\n[3] text 'Click the button.'\n[5] button 'Click Me!'"
    actions = {web("web/MiniWoB-v0", page, {}, rng) for _ in range(40)}
    assert {'click("3")', 'click("5")', "done()"} <= actions
    rtl = family_random_action("rtl/Generated-v0")
    assert rtl is not None
    spec = " - input  a (12 bits)\n - input  b (12 bits)\n - output sum (12 bits)\n - output cout\n"
    design = rtl("rtl/Generated-v0", spec, {}, rng)
    assert design is not None and "input [11:0] a" in design and "assign cout =" in design
    code = family_random_action("code/HumanEval-v0")
    assert code is not None and "def strlen(" in str(code("code/HumanEval-v0", "", {"entry_point": "strlen"}, rng))
    assert family_random_action("textworld/ALFWorld-v0") is None  # admissible actions need no hook


@pytest.mark.browser
def test_random_clicks_solve_a_miniwob_page() -> None:
    tasks = [t for t in rlvr_gym.load_suite("web/miniwob") if "click-test" in json.dumps(t.options | t.data)][:1]
    report = evaluate(RandomAgent(seed=0), tasks, k=4, progress=False)
    assert report.metrics["pass@4"] > 0
