"""Step rewards as credit assignment sees them: the env's reward less the per-turn penalty, applied here once.

verl-agent's invalid-action penalty: a turn whose action the env rejected (a ``parse_error`` or ``invalid_action``
failure) loses ``Penalty.per_turn`` from its step reward, so failing episodes differ and all-failure groups carry
signal. ``Penalty.kinds`` chooses the failure kinds penalised: a tool family may add ``tool_error`` (a call the
env accepted that the tool refused, such as a lookup of an entity that does not exist). Every credit method (flat
or tree, episode or turn level) reads step rewards through :func:`turn_reward`, so the penalty is applied exactly
once per penalised turn.
"""

from __future__ import annotations

import dataclasses
import math

from rlvr_gym import FailureKind
from rlvr_gym_agents.rollout.types import Trajectory, Turn

REJECTED = frozenset({FailureKind.PARSE_ERROR, FailureKind.INVALID_ACTION})
"""Failure kinds that mean the env rejected the action: the kinds penalised by default."""


@dataclasses.dataclass(frozen=True)
class Penalty:
    """What a turn loses from its step reward: ``per_turn`` when its failure's kind is in ``kinds``.

    ``kinds`` may be given as any collection of :class:`FailureKind` s or their values; it is stored as a frozenset
    of :class:`FailureKind`. An empty ``kinds`` penalises nothing.

    Raises:
        ValueError: ``per_turn`` is negative, not finite or a bool, or a kind is not a :class:`FailureKind` value.
    """

    per_turn: float = 0.0
    """Subtracted from the step reward of each penalised turn, >= 0 (0: no penalty)."""
    kinds: frozenset[FailureKind] = REJECTED
    """The failure kinds penalised (default: the env rejected the action)."""

    def __post_init__(self) -> None:
        if isinstance(self.per_turn, bool) or not (math.isfinite(self.per_turn) and self.per_turn >= 0):
            raise ValueError(f"the per-turn penalty must be finite and >= 0, got {self.per_turn!r}")
        try:
            kinds = frozenset(FailureKind(kind) for kind in self.kinds)
        except ValueError:
            raise ValueError(f"unknown failure kind in {sorted(str(k) for k in self.kinds)}; choose from "
                             f"{sorted(kind.value for kind in FailureKind)}") from None
        object.__setattr__(self, "kinds", kinds)

    def of(self, turn: Turn) -> float:
        """``per_turn`` when ``turn`` failed with a penalised kind, else 0."""
        return self.per_turn if turn.failure is not None and turn.failure.kind in self.kinds else 0.0


NO_PENALTY = Penalty()
"""The env's rewards unchanged."""


def turn_reward(turn: Turn | None, penalty: Penalty = NO_PENALTY) -> float:
    """The turn's step reward less its penalty (:meth:`Penalty.of`); 0 for None."""
    if turn is None:
        return 0.0
    return turn.reward - penalty.of(turn)


def episode_return(trajectory: Trajectory, penalty: Penalty = NO_PENALTY) -> float:
    """The episode's return for credit: the env's return less the penalty of each penalised turn."""
    return trajectory.reward - sum(penalty.of(turn) for turn in trajectory.turns)
