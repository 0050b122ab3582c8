"""Step rewards as credit assignment sees them: the env's reward less the invalid-action penalty, applied here once.

verl-agent's invalid-action penalty: a turn whose action the env rejected (a ``parse_error`` or ``invalid_action``
failure) loses ``invalid_action_penalty`` from its step reward, so failing episodes differ and all-failure groups
carry signal. Every credit method (flat or tree, episode or turn level) reads step rewards through
:func:`turn_reward`, so the penalty is applied exactly once per rejected turn.
"""

from __future__ import annotations

from rlvr_gym import FailureKind
from rlvr_gym_agents.rollout.types import Trajectory, Turn

REJECTED = (FailureKind.PARSE_ERROR, FailureKind.INVALID_ACTION)
"""Failure kinds that mean the env rejected the action."""


def rejected(turn: Turn) -> bool:
    """True when the env rejected the turn's action (a parse error or an invalid action)."""
    return turn.failure is not None and turn.failure.kind in REJECTED


def turn_reward(turn: Turn | None, invalid_action_penalty: float = 0.0) -> float:
    """The turn's step reward less ``invalid_action_penalty`` (>= 0) when the env rejected its action; 0 for None."""
    if turn is None:
        return 0.0
    return turn.reward - invalid_action_penalty * rejected(turn)


def episode_return(trajectory: Trajectory, invalid_action_penalty: float = 0.0) -> float:
    """The episode's return for credit: the env's return less the penalty of each rejected turn."""
    return trajectory.reward - invalid_action_penalty * sum(rejected(turn) for turn in trajectory.turns)
