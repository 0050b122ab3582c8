"""Test agents for the evaluation harness, rollouts and env authors' tests.

All three follow the :class:`rlvr_gym.evaluation.Agent` protocol (``reset(task)`` then ``act(obs, info)``).
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlvr_gym.core import TextSpace
from rlvr_gym.tasks import Task
from rlvr_gym.testing import fuzz


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
    """A random baseline that speaks each env's grammar, so its pass@k is a floor worth beating.

    Each turn, the first that applies:

    1. the family's hook, ``rlvr_gym_<family>.baselines.random_action(env_id, observation, info, rng) -> str``
       (a click on a random element of a web page, a random design from a Verilog template, a random
       program from a function template, a random shell command on the files shown); it may return None to
       fall through;
    2. a uniform choice from ``info["admissible_actions"]``;
    3. with tools declared in ``info["tools"]``: a call of a random tool with schema-typed random arguments
       (strings drawn from the words seen so far) with probability ``tool_call_prob``, else
       ``<answer>`` with one to three of those words;
    4. random printable text (up to ``max_chars`` characters).

    ``info`` passed to hooks and used for tools is merged over the episode (later steps update the reset's),
    since some envs announce tools or an entry point only at reset. Seeded: the same seed and episodes give
    the same actions.

    Args:
        seed: seeds the generator.
        max_chars: the longest random text, in characters.
        tool_call_prob: the probability of a tool call (rather than an answer) when tools are declared.
    """

    def __init__(self, seed: int = 0, max_chars: int = 64, tool_call_prob: float = 0.7) -> None:
        self.rng = np.random.default_rng(seed)
        self._space = TextSpace(max_length=max_chars, seed=seed)
        self.tool_call_prob = tool_call_prob
        self._env_id: str | None = None
        self._info: dict[str, Any] = {}
        self._words: list[str] = []

    def reset(self, task: Task | None = None) -> None:
        """Starts an episode of ``task`` (its env id picks the family's hook)."""
        self._env_id = None if task is None else task.env_id
        self._info, self._words = {}, []

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Returns a random action in the env's grammar (see the class docstring)."""
        self._info.update(info)
        self._words.extend(w for w in _WORD.findall(observation) if len(w) > 1)
        hook = family_random_action(self._env_id) if self._env_id else None
        if hook is not None and self._env_id is not None:
            action = hook(self._env_id, observation, self._info, self.rng)
            if action is not None:
                return str(action)
        admissible = info.get("admissible_actions")
        if admissible:
            return str(admissible[int(self.rng.integers(len(admissible)))])
        if fuzz.tool_functions(self._info.get("tools")):
            words = sorted(set(self._words)) or ["x"]
            if self.rng.random() < self.tool_call_prob:
                return str(fuzz.random_tool_call(self._info.get("tools"), self.rng, words))
            picked = [words[int(i)] for i in self.rng.integers(len(words), size=int(self.rng.integers(1, 4)))]
            return f"<answer>{' '.join(picked)}</answer>"
        return self._space.sample()


_WORD = re.compile(r"[A-Za-z0-9_.\-]+")
RandomActionHook = Callable[[str, str, dict[str, Any], np.random.Generator], str | None]
"""``random_action(env_id, observation, info, rng) -> action or None``, defined in a family's ``baselines``."""


@functools.lru_cache(maxsize=64)
def family_random_action(env_id: str) -> RandomActionHook | None:
    """The ``random_action`` hook of ``env_id``'s family: ``random_action`` in the module
    ``<family module>.baselines`` (``rlvr_gym_web.baselines``), or None when the family has none."""
    from rlvr_gym.registry import family_modules

    family = env_id.split("/", 1)[0]
    module = family_modules().get(family, f"rlvr_gym_{family}")
    try:
        baselines = importlib.import_module(f"{module}.baselines")
    except ModuleNotFoundError as error:
        if error.name is not None and f"{module}.baselines".startswith(error.name):
            return None
        raise
    hook = getattr(baselines, "random_action", None)
    return hook if callable(hook) else None
