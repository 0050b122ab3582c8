"""Turn-level credit for flat groups: GiGPO step advantages over the turns of independent episodes.

The episodes of a flat group share no token segments, but they revisit the same env states: every episode of
a task starts from one state, and short action sequences lead different episodes to the same place. GiGPO
(Feng et al. 2025, arXiv 2505.10978) groups the turns that start from the same state (an *anchor state*) and
compares their discounted returns-to-go, so an action is judged against the other actions taken from the same
state, not against whole episodes. Episode-level credit alone gives every turn of a failing episode the same
negative advantage; a verb shared by good and bad turns (``go`` in ``go to X``) is then pushed down by the long
failing episodes that hold more of it.

The anchor of a turn is the env's ``info["state_key"]`` of the state it started from (exact state identity),
or the observation text when the env gives no key (the paper's choice).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch
from torch import Tensor

from rlvr_gym_agents.credit.estimators import gigpo_advantages
from rlvr_gym_agents.credit.rewards import NO_PENALTY, Penalty, turn_reward
from rlvr_gym_agents.rollout.types import Trajectory, Turn


def anchor_key(turn: Turn) -> Hashable:
    """The turn's anchor: its start state's ``state_key``, else its observation text."""
    return ("state", turn.state_key) if turn.state_key is not None else ("observation", turn.observation)


def gigpo_token_advantages(
    trajectories: Sequence[Trajectory],
    gamma: float = 0.95,
    omega: float = 1.0,
    std_norm: bool = False,
    penalty: Penalty = NO_PENALTY,
) -> list[Tensor]:
    """Per-token GiGPO advantages of flat episodes, one row per trajectory (``Trajectory.group`` = the group).

    Each turn's step reward is the env's reward minus its ``penalty`` (:meth:`Penalty.of`: the per-turn penalty when
    the turn failed with a penalised kind); :func:`rlvr_gym_agents.credit.estimators.gigpo_advantages` turns them into A = A^E + omega * A^S per turn,
    and every generated token of the turn gets its turn's advantage.

    Args:
        trajectories: B episodes; their turns carry ``reward``, ``failure`` and ``state_key``.
        gamma: step discount of the returns-to-go, in [0, 1]. omega: weight of the step advantage.
        std_norm: divide by the group std (GiGPO's ALFWorld setting) or not.
        penalty: what each penalised turn loses from its reward.

    Returns:
        B float32 tensors of length ``len(trajectory.token_ids)``: 0 on prompt and observation ids and for
        episodes without turns.
    """
    rewards, traj, groups, keys, spans = [], [], [], [], []
    for row, trajectory in enumerate(trajectories):
        for turn in trajectory.turns:
            rewards.append(turn_reward(turn, penalty))
            traj.append(row)
            groups.append(trajectory.group)
            keys.append(anchor_key(turn))
            spans.append((row, turn.span))
    rows = [torch.zeros(len(t.token_ids), dtype=torch.float32) for t in trajectories]
    if not rewards:
        return rows
    adv = gigpo_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor(traj), torch.tensor(groups),
                           keys, gamma, omega, std_norm)
    for (row, (start, end)), value in zip(spans, adv.tolist(), strict=True):
        rows[row][start:end] = value
    return rows
