"""Test agents for the evaluation harness, rollouts and env authors' tests.

All three follow the :class:`rlvr_gym.evaluation.Agent` protocol (``reset(task)`` then ``act(obs, info)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlvr_gym.core import TextSpace
from rlvr_gym.tasks import Task


class ScriptedAgent:
    """Plays a fixed list of actions, the same in every episode; ``fallback`` once they run out.

    Args:
        actions: the actions, in order.
        fallback: what to say after the script is exhausted.
    """

    def __init__(self, actions: Sequence[str], fallback: str = "") -> None:
        self.actions, self.fallback = list(actions), fallback
        self._next = 0

    def reset(self, task: Task | None = None) -> None:
        """Restarts the script."""
        self._next = 0

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Returns the next scripted action."""
        action = self.actions[self._next] if self._next < len(self.actions) else self.fallback
        self._next += 1
        return action


class GoldAgent(ScriptedAgent):
    """Replays ``task.gold`` of each episode's task: the known optimum of every suite.

    Raises:
        ValueError: from ``reset`` when the task has no gold actions.
    """

    def __init__(self) -> None:
        super().__init__([])

    def reset(self, task: Task | None = None) -> None:
        """Loads the task's gold actions."""
        if task is None or not task.gold:
            raise ValueError(f"GoldAgent needs tasks with gold actions; {getattr(task, 'id', None)!r} has none")
        self.actions, self._next = list(task.gold), 0


class RandomAgent:
    """Picks uniformly from ``info["admissible_actions"]`` when the env lists them, else random printable
    text (up to ``max_chars`` characters). Seeded: the same seed gives the same actions.

    Args:
        seed: seeds the generator.
        max_chars: the longest random text, in characters.
    """

    def __init__(self, seed: int = 0, max_chars: int = 64) -> None:
        self.rng = np.random.default_rng(seed)
        self._space = TextSpace(max_length=max_chars, seed=seed)

    def reset(self, task: Task | None = None) -> None:
        """No per-episode state."""

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Returns a random admissible action or random text."""
        admissible = info.get("admissible_actions")
        if admissible:
            return str(admissible[int(self.rng.integers(len(admissible)))])
        return self._space.sample()
