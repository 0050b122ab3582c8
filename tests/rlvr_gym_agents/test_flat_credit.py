"""GiGPO credit over flat groups: hand-computed per-turn advantages, anchors, the trainer wiring."""

from __future__ import annotations

import pytest
import torch
from rlvr_gym_agents.config import ConfigError, load_config
from rlvr_gym_agents.credit.rewards import Penalty, episode_return
from rlvr_gym_agents.credit.turns import anchor_key, gigpo_token_advantages
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout import Trajectory, Turn, run_episodes

import rlvr_gym
from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym.tasks import Task
from rlvr_gym.testing.toy import echo_tasks


def _turn(key: str | None, start: int, reward: float = 0.0, rejected: bool = False, obs: str = "o") -> Turn:
    failure = Failure(FailureKind.INVALID_ACTION, "x") if rejected else None
    return Turn(obs, "a", (start, start + 2), reward=reward, failure=failure, state_key=key)


def _episode(turns: list[Turn], group: int = 0) -> Trajectory:
    # prompt id 0, then per turn 2 generated ids and 1 observation id
    mask = [0] + [1, 1, 0] * len(turns)
    return Trajectory("t", "e", token_ids=list(range(len(mask))), loss_mask=mask, turns=turns,
                      reward=sum(t.reward for t in turns), group=group)


def _two_episodes() -> list[Trajectory]:
    # A: s0 -> s1 -> success (reward 1). B: a rejected action in s0 (stays in s0), then a turn in s0 again.
    a = _episode([_turn("s0", 1), _turn("s1", 4, reward=1.0)])
    b = _episode([_turn("s0", 1, rejected=True), _turn("s0", 4)])
    return [a, b]


def test_gigpo_token_advantages_hand_computed() -> None:
    rows = gigpo_token_advantages(_two_episodes(), gamma=0.5, omega=1.0, penalty=Penalty(0.1))
    # step rewards A: (0, 1), B: (-0.1, 0). Episode returns 1 and -0.1, mean 0.45: A^E = +0.55 / -0.55.
    # returns-to-go (gamma 0.5) A: (0.5, 1), B: (-0.1, 0). Anchor s0 holds A0, B0, B1: mean 0.4/3;
    # A^S = 0.5 - 0.13333, -0.1 - 0.13333, 0 - 0.13333; s1 holds A1 alone: 0.
    a0, a1 = 0.55 + 0.5 - 0.4 / 3, 0.55
    b0, b1 = -0.55 - 0.1 - 0.4 / 3, -0.55 - 0.4 / 3
    assert rows[0][[1, 2, 4, 5]].tolist() == pytest.approx([a0, a0, a1, a1], abs=1e-6)
    assert rows[1][[1, 2, 4, 5]].tolist() == pytest.approx([b0, b0, b1, b1], abs=1e-6)
    # prompt and observation ids carry no advantage
    assert rows[0][[0, 3, 6]].tolist() == [0.0, 0.0, 0.0] and rows[1][[0, 3, 6]].tolist() == [0.0, 0.0, 0.0]


def test_gigpo_without_penalty_and_with_step_weight_zero_is_episode_credit() -> None:
    rows = gigpo_token_advantages(_two_episodes(), gamma=0.5, omega=0.0)
    assert rows[0][[1, 4]].tolist() == pytest.approx([0.5, 0.5]) and rows[1][[1, 4]].tolist() == pytest.approx(
        [-0.5, -0.5])


def test_groups_never_share_anchors() -> None:
    a, b = _two_episodes()
    b.group = 1  # same state keys, other task: each group alone, so A^E = 0 and anchors hold one group only
    rows = gigpo_token_advantages([a, b], gamma=0.5)
    # group 0: A0 alone in (0, s0) and A1 alone in (0, s1): 0. group 1: B0, B1 in (1, s0): returns 0, 0.
    assert rows[0].abs().sum() == 0 and rows[1].abs().sum() == 0


def test_anchor_falls_back_to_the_observation_text() -> None:
    assert anchor_key(_turn("k", 0, obs="Nothing happens.")) == ("state", "k")
    assert anchor_key(_turn(None, 0, obs="Nothing happens.")) == ("observation", "Nothing happens.")
    assert episode_return(_two_episodes()[1], Penalty(1.0)) == _two_episodes()[1].reward - 1.0
    assert gigpo_token_advantages([Trajectory("t", "e", token_ids=[1, 2])])[0].tolist() == [0.0, 0.0]


def test_rollouts_record_the_state_each_turn_started_from(tiny_policy: TransformersPolicy) -> None:
    tasks = [Task(id="s", env_id="textworld/ALFWorld-Starter-v0", options={"seed": 4})] * 3
    trajectories = run_episodes(tiny_policy, ChatFormat(tiny_policy.tokenizer), tasks,
                                SamplingParams(max_new_tokens=6), max_turns=3)
    env = rlvr_gym.make("textworld/ALFWorld-Starter-v0")
    _, info = env.reset(options={"task": tasks[0]})
    for trajectory in trajectories:
        keys = [turn.state_key for turn in trajectory.turns]
        assert keys[0] == info["state_key"]  # every episode of a task starts from one anchor
        replay = env.fork()
        replay.reset(options={"task": tasks[0]})
        for turn, key in zip(trajectory.turns[:-1], keys[1:], strict=True):
            assert replay.step(turn.action).info["state_key"] == key


def test_flat_gigpo_credit_in_the_trainer(tiny_policy: TransformersPolicy) -> None:
    from agent_helpers import collect_rollouts

    config = load_config(None, ["train.group_size=4", "algorithm.credit=gigpo", "algorithm.gigpo.gamma=0.9"])
    assert config.algorithm.gigpo.gamma == 0.9
    chat = ChatFormat(tiny_policy.tokenizer)
    rollouts = collect_rollouts(config, tiny_policy, chat, echo_tasks(2), SamplingParams(max_new_tokens=4), 1)
    assert rollouts.advantages.shape == (8, max(len(t.token_ids) for t in rollouts.trajectories))
    expected = gigpo_token_advantages(rollouts.trajectories, gamma=0.9)
    for row, trajectory, want in zip(rollouts.advantages, rollouts.trajectories, expected, strict=True):
        assert torch.equal(row[: len(trajectory.token_ids)], want)
    with pytest.raises(ConfigError, match="needs rollout.sampler=tree"):
        load_config(None, ["algorithm.credit=treerl"])
    with pytest.raises(ConfigError, match="gamma in"):
        load_config(None, ["algorithm.credit=gigpo", "algorithm.gigpo.gamma=1.5"])
