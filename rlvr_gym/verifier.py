"""Verifiers and reward results.

A verifier is pure: it maps (task data, what the agent produced) to a :class:`RewardResult`, with no model,
browser or network involved, so it can be unit-tested on gold and deliberately wrong solutions. Environments
call their verifier; they never compute rewards inline.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class RewardResult:
    """The outcome of verifying an episode or a submission.

    Attributes:
        value: the reward, a finite float. Binary verifiers use 0.0 (fail) and 1.0 (pass).
        components: named parts of the reward (e.g. ``{"tests_passed": 0.6, "format": 1.0}``), reported
            separately in ``info["reward_details"]``; they need not sum to ``value``.
        reason: a short human-readable explanation of the verdict.
    """

    value: float
    components: dict[str, float] = dataclasses.field(default_factory=dict)
    reason: str = ""

    def __post_init__(self) -> None:
        if not math.isfinite(self.value):
            raise ValueError(f"RewardResult.value must be finite, got {self.value!r}")

    @property
    def success(self) -> bool:
        """True when the value is at least 1.0 (the maximum of a binary verifier)."""
        return self.value >= 1.0

    def to_dict(self) -> dict[str, Any]:
        """Returns ``{"value": float, "components": dict, "reason": str}``."""
        return {"value": self.value, "components": dict(self.components), "reason": self.reason}


@runtime_checkable
class Verifier(Protocol):
    """Scores what an agent produced for a task.

    ``task`` is the task's data (usually :attr:`rlvr_gym.Task.data` or a family-specific object);
    ``submission`` is whatever the family verifies: a final world state, a program, a design, a final
    answer string. Implementations must be deterministic and side-effect free (except in a sandbox).
    """

    def __call__(self, task: Any, submission: Any) -> RewardResult:
        """Returns the reward for ``submission`` on ``task``."""
        ...
