"""Policy evaluation: records mean what the core harness means; the policy-backed BatchAgent."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlvr_gym_agents.cli import load_agent
from rlvr_gym_agents.evaluate import PolicyAgent, evaluate_policy
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat

from rlvr_gym.evaluation import BatchAgent, evaluate
from rlvr_gym.testing.toy import echo_tasks


def test_rollout_evaluation_matches_the_harness_with_the_same_policy(tiny_model_dir: Path) -> None:
    """Greedy decoding is deterministic, so both routes must give identical records and metrics."""
    tasks = echo_tasks(6)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=4)
    policy = TransformersPolicy.from_pretrained(str(tiny_model_dir))
    chat = ChatFormat(policy.tokenizer)
    ours, records = evaluate_policy(policy, chat, tasks, 2, sampling)
    agent = PolicyAgent(policy, chat, sampling)
    assert isinstance(agent, BatchAgent)
    harness = evaluate(agent, tasks, k=2, progress=False)
    assert [r.actions for r in records] == [r.actions for r in harness.records]
    assert [(r.success, r.turns, r.truncated, r.failure) for r in records] == \
        [(r.success, r.turns, r.truncated, r.failure) for r in harness.records]
    for key in ("pass@1", "pass@2", "mean_reward", "mean_turns", "truncation_rate", "episodes_ended_by"):
        assert ours[key] == harness.metrics[key], key
    assert agent.contexts == {}  # end_episodes freed every context


def test_load_agent_from_a_model_directory(tiny_model_dir: Path, tmp_path: Path) -> None:
    agent = load_agent(str(tiny_model_dir), temperature=0.0, max_new_tokens=3)
    actions = agent.act_batch(["a#0", "b#0"], ["Say the word: apple", "Say the word: hat"], [{}, {}])
    assert len(actions) == 2 and all(isinstance(a, str) for a in actions)
    with pytest.raises(FileNotFoundError, match="missing_model"):
        load_agent(str(tmp_path / "missing_model"))
