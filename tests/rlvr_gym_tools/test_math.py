"""tools/Math-v0: problem generation, the oracle and the shipped suites."""

from __future__ import annotations

import time

import pytest
from rlvr_gym_tools.calculator import evaluate_expression
from rlvr_gym_tools.math_env import TEMPLATES, MathEnv, MathOracle, generate_problem
from rlvr_gym_tools.suites import math_task, run_oracle

import rlvr_gym
from rlvr_gym import load_suite


def test_problems_are_seeded_and_answers_match_solutions() -> None:
    assert generate_problem(4) == generate_problem(4)
    seen = set()
    for seed in range(300):
        data = generate_problem(seed)
        seen.add(data["template"])
        assert float(data["answer"]) == pytest.approx(evaluate_expression(data["solution"]))
    assert seen == set(TEMPLATES)


def test_hand_computed_problem() -> None:
    data = generate_problem(0, ["warehouse"])
    # "A warehouse holds a crates with b items in each. It ships out c crates." -> (a - c) * b
    numbers = [int(w) for w in data["question"].replace(".", " ").split() if w.isdigit()]
    a, b, c = numbers
    assert data["answer"] == str((a - c) * b)


def test_oracle_solves_500_generated_tasks_quickly() -> None:
    env, oracle = MathEnv(enable_python=False), MathOracle()
    start = time.perf_counter()
    returns = [run_oracle(env, oracle, math_task(20_000 + i, "train"))[1] for i in range(500)]
    elapsed = time.perf_counter() - start
    assert returns == [1.0] * 500
    assert elapsed < 30, f"500 oracle episodes took {elapsed:.1f} s"


def test_gold_and_wrong_on_the_shipped_test_suite() -> None:
    env = rlvr_gym.make("tools/Math-v0")
    for task in load_suite("tools/math_test"):
        for actions, expected in ((task.gold, 1.0), (task.wrong, 0.0)):
            env.reset(options={"task": task})
            assert sum(env.step(a).reward for a in actions) == expected, task.id


def test_answer_without_tool_is_scored_and_wrong_template_rejected() -> None:
    env = MathEnv()
    task = math_task(3, "test")
    env.reset(options={"task": task})
    result = env.step(f"<answer>{task.data['answer']}</answer>")
    assert result.reward == 1.0 and result.info["tool_calls"] == 0
    with pytest.raises(ValueError, match="unknown templates"):
        MathEnv(templates=["poetry"])


def test_oracle_action_solves_seeded_episodes() -> None:
    env = MathEnv(enable_python=False)
    for seed in range(20):
        env.reset(seed=seed)
        first = env.oracle_action()
        assert first.startswith("calculator(expression=")
        env.step(first)
        assert env.step(env.oracle_action()).reward == 1.0
