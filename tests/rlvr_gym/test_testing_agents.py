"""Tests of the test agents: scripted, gold and random."""

from __future__ import annotations

import pytest

from rlvr_gym import Task
from rlvr_gym.evaluation import evaluate
from rlvr_gym.testing import GoldAgent, RandomAgent, ScriptedAgent, echo_tasks


def test_scripted_agent_replays_then_falls_back() -> None:
    agent = ScriptedAgent(["a", "b"], fallback="z")
    assert [agent.act("", {}) for _ in range(3)] == ["a", "b", "z"]
    agent.reset(None)
    assert agent.act("", {}) == "a"


def test_gold_agent_solves_echo_and_rejects_tasks_without_gold() -> None:
    report = evaluate(GoldAgent(), echo_tasks(5), k=2, progress=False)
    assert report.metrics["pass@1"] == 1.0 and all(r.turns == 1 for r in report.records)
    with pytest.raises(ValueError, match="needs tasks with gold actions; 'x' has none"):
        GoldAgent().reset(Task(id="x", env_id="testing/Echo-v0"))


def test_random_agent_is_seeded_and_uses_admissible_actions() -> None:
    info = {"admissible_actions": ["say apple", "say bread", "say candle"]}
    first = [RandomAgent(seed=3).act("", info) for _ in range(1)] + [RandomAgent(seed=3).act("", info)]
    assert first[0] == first[1] and first[0] in info["admissible_actions"]
    picks = {RandomAgent(seed=s).act("", info) for s in range(30)}
    assert picks == set(info["admissible_actions"])
    agent_a, agent_b = RandomAgent(seed=5, max_chars=10), RandomAgent(seed=5, max_chars=10)
    texts = [agent_a.act("", {}) for _ in range(5)]
    assert texts == [agent_b.act("", {}) for _ in range(5)] and all(len(t) <= 10 for t in texts)
    # Echo lists admissible actions, so a random agent succeeds about 1 time in 8.
    report = evaluate(RandomAgent(seed=0), echo_tasks(8), k=8, progress=False)
    assert 0.0 < report.metrics["pass@1"] < 0.5
