"""The environment contract: text in, text out, verified rewards.

Every rlvr_gym environment is a :class:`gymnasium.Env` whose observations and actions are Python ``str``
(see :class:`TextSpace`). Subclasses implement three hooks, :meth:`Env._reset`, :meth:`Env._step` and,
when they can, :meth:`Env.fork`; the base class handles seeding, turn limits, the action history and the
shape of what is returned.

Episode life cycle::

    obs, info = env.reset(seed=0, options={"task": task})   # task: rlvr_gym.Task (or a dict)
    while True:
        obs, reward, terminated, truncated, info = env.step(action_text)
        if terminated or truncated:
            break
    env.close()

Return values of :meth:`Env.step` (a :class:`StepResult`, which unpacks like Gymnasium's 5-tuple):

- ``observation`` (str): what the agent sees next. After a malformed action it says what was wrong.
- ``reward`` (float): from the task's verifier. Most envs give 0.0 until the end and the verified reward on
  the step that terminates.
- ``terminated`` (bool): the *task* ended: solved, failed irrecoverably, or an answer was submitted.
- ``truncated`` (bool): a *budget* ran out (turn limit, wall clock, context window). Never conflated with
  ``terminated``: a truncated episode may still be bootstrapped, a terminated one may not.
- ``info`` (dict): always ``turn`` (int, 1-based), ``task_id`` (str or None); on the last step
  ``reward_details`` (``RewardResult.to_dict()``) and ``success`` (bool); ``failure``
  (:class:`rlvr_gym.Failure`) whenever something went wrong; family-specific keys such as
  ``admissible_actions`` or ``tools``; optionally ``state_key`` (str), equal for two envs exactly when
  they are in the same state, which step-level credit (GiGPO anchor groups) uses instead of the observation
  text (identical texts such as "Nothing happens." can come from different states).

Forking: :meth:`Env.fork` returns an independent env in the same state, used by tree rollouts to branch.
In-memory envs deep-copy their state (the default); envs holding processes or browsers replay the action
history from the same ``reset`` arguments (:meth:`Env.fork_by_replay`); envs that can do neither set
``supports_fork = False`` and tree samplers branch only at the root for them.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, ClassVar, NamedTuple

import gymnasium
import numpy as np

from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym.tasks import Task


class TextSpace(gymnasium.spaces.Space[str]):
    """A space of arbitrary Unicode strings up to ``max_length`` characters.

    Gymnasium's ``spaces.Text`` only accepts letters and digits by default, so ``"go to desk 1"`` is outside
    it. This space accepts any ``str``. ``sample()`` returns printable ASCII text (for fuzzing), drawn from
    the space's own generator.

    Args:
        max_length: the longest string in the space, in characters.
        sample_alphabet: the characters ``sample()`` draws from (default: printable ASCII). Only sampling
            uses it; ``contains`` accepts any ``str``. An env narrows it when some characters make its
            dynamics racy (a shell's ``&`` starts background jobs whose output order varies).
    """

    def __init__(self, max_length: int = 1_000_000, seed: int | None = None, sample_alphabet: str | None = None) -> None:
        self.max_length = int(max_length)
        self.sample_alphabet = sample_alphabet or "".join(chr(c) for c in range(32, 127))
        super().__init__(shape=None, dtype=None, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        length = int(self.np_random.integers(0, min(64, self.max_length) + 1))
        picks = self.np_random.integers(0, len(self.sample_alphabet), size=length)
        return "".join(self.sample_alphabet[int(i)] for i in picks)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


class StepResult(NamedTuple):
    """What :meth:`Env.step` returns; unpacks as ``obs, reward, terminated, truncated, info``."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class ForkNotSupportedError(RuntimeError):
    """Raised by :meth:`Env.fork` on an env that can neither copy its state nor replay its history."""


class Env(gymnasium.Env[str, str]):
    """Base class of every rlvr_gym environment.

    Set in all subclasses:
        ``_reset(task)`` and ``_step(action)``; a class docstring with a "Version History" section.
    Set in some subclasses:
        ``fork()`` (the default deep-copies the env; override with :meth:`fork_by_replay` for envs that own
        processes, or set ``supports_fork = False``); ``close()`` for envs that own resources;
        ``max_turns`` (default 50) as a class attribute or constructor argument.

    Attributes:
        max_turns: the turn limit; reaching it ends the episode with ``truncated=True`` and a
            ``turn_limit`` failure.
        supports_fork: whether :meth:`fork` works for this env.
        concurrent_steps: whether separate instances of this env may be reset and stepped from different
            threads at once, and gain from it (their steps wait on a sandbox or a simulator, and nothing in
            them is bound to one thread); the evaluation harness and the trainer then step them on threads by
            default. False (the default) for in-memory envs, where the GIL leaves nothing to gain, and for
            envs bound to one thread (Playwright's sync API).
        turn: the number of steps taken in the current episode.
        task: the task of the current episode (a :class:`rlvr_gym.Task` or None).
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi"]}  # noqa: RUF012  (declared so by gymnasium.Env)
    supports_fork: ClassVar[bool] = True
    concurrent_steps: ClassVar[bool] = False
    max_turns: int = 50

    def __init__(self, max_turns: int | None = None, render_mode: str | None = None) -> None:
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        if max_turns is not None:
            if max_turns < 1:
                raise ValueError(f"max_turns must be >= 1, got {max_turns}")
            self.max_turns = int(max_turns)
        self.render_mode = render_mode
        self.turn = 0
        self.task: Any = None
        self.last_observation = ""
        self.action_history: list[str] = []
        self._reset_args: tuple[int | None, dict[str, Any] | None] = (None, None)
        self._done = False
        self._started = False

    # -- hooks for subclasses -------------------------------------------------------------------------
    def _reset(self, task: Any) -> tuple[str, dict[str, Any]]:
        """Starts an episode on ``task`` (None when no task was given); returns ``(obs, info)``.

        All randomness must come from ``self.np_random``, which :meth:`reset` has already seeded.
        """
        raise NotImplementedError

    def _step(self, action: str) -> StepResult:
        """Applies one action. Must not raise on a malformed action: return an explanatory observation
        and put a :class:`Failure` in ``info["failure"]``."""
        raise NotImplementedError

    # -- the public contract --------------------------------------------------------------------------
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Starts a new episode.

        Args:
            seed: seeds ``self.np_random``. When None and the task's options carry a ``seed``, that seed is
                used, so a task alone determines its episode.
            options: ``{"task": Task | dict}``; other keys are passed on to the subclass unchanged.

        Returns:
            ``(observation, info)`` with ``info["task_id"]`` and ``info["turn"] == 0``.
        """
        task = _coerce_task((options or {}).get("task"))
        if seed is None and task is not None:
            seed = task.options.get("seed")
        super().reset(seed=seed)
        self._reset_args = (seed, copy.deepcopy(options))
        self.turn, self.task, self.action_history, self._done = 0, task, [], False
        self._started = True
        obs, info = self._reset(task)
        self.last_observation = obs
        info.setdefault("task_id", getattr(task, "id", None))
        info["turn"] = 0
        return obs, info

    def step(self, action: str) -> StepResult:  # type: ignore[override]
        """Takes one turn. See the module docstring for the meaning of each returned value.

        An action that is not valid Unicode (a lone surrogate, which no encoder, file or parser takes) never
        reaches the env: the turn is spent and answered with a ``parse_error`` observation.

        Raises:
            RuntimeError: when called before :meth:`reset` or after the episode ended (a caller bug, not an
                agent mistake).
        """
        if not self._started:
            raise RuntimeError("step() called before reset(); call env.reset(options={'task': ...}) first")
        if self._done:
            raise RuntimeError("step() called after the episode ended; call reset() to start a new one")
        if not isinstance(action, str):
            action = str(action)
        self.turn += 1
        self.action_history.append(action)
        result = _invalid_text_step(action) or self._step(action)
        info = dict(result.info)
        info["turn"] = self.turn
        info.setdefault("task_id", getattr(self.task, "id", None))
        truncated = result.truncated
        if not result.terminated and not truncated and self.turn >= self.max_turns:
            truncated = True
            # The turn limit is what ended the episode, so it is the step's failure; a failure of the
            # action itself (a parse error, say) is kept in its details.
            step_failure = info.get("failure")
            details = {"step_failure": step_failure.to_dict()} if isinstance(step_failure, Failure) else {}
            info["failure"] = Failure(FailureKind.TURN_LIMIT, f"turn limit of {self.max_turns} reached", details)
        self._done = result.terminated or truncated
        self.last_observation = result.observation
        return StepResult(result.observation, float(result.reward), result.terminated, truncated, info)

    def fork(self) -> Env:
        """Returns an independent env in the same state: the same actions give the same observations and
        rewards in both copies, and stepping one leaves the other unchanged.

        The default deep-copies the env (random generator included). Envs that own processes override this
        with :meth:`fork_by_replay`.

        Raises:
            ForkNotSupportedError: when ``supports_fork`` is False.
        """
        if not self.supports_fork:
            raise ForkNotSupportedError(f"{type(self).__name__} cannot fork; tree rollouts branch at the root")
        return copy.deepcopy(self)

    def fork_by_replay(self) -> Env:
        """Builds a fresh env of the same class and constructor arguments, resets it with the same
        arguments and replays the action history. Cost: one reset plus one step per past turn."""
        clone = self.spawn()
        seed, options = self._reset_args
        clone.reset(seed=seed, options=copy.deepcopy(options))
        for action in self.action_history:
            clone.step(action)
        return clone

    def spawn(self) -> Env:
        """Returns a new, un-reset env built with this env's constructor arguments.

        The default calls ``type(self)(**self.init_kwargs)``; :func:`rlvr_gym.make` records ``init_kwargs``.
        """
        return type(self)(**getattr(self, "init_kwargs", {}))

    def render(self) -> str | None:
        """Returns the last observation (render mode ``"ansi"``)."""
        return self.last_observation

    def close(self) -> None:
        """Releases every process, browser and temporary file the env started. Safe to call twice."""

    @classmethod
    def hold_shared_resources(cls) -> contextlib.AbstractContextManager[object]:
        """Keeps what this class's envs share within a process open for the duration of a ``with`` block, so envs
        made and closed inside it reuse it instead of starting it again (the web family's Chromium: ~1 s per
        launch, once per episode otherwise). Default: nothing is shared (a no-op context). Enter it on the thread
        that will step the envs."""
        return contextlib.nullcontext()


def invalid_text_failure(text: str) -> Failure | None:
    """A ``PARSE_ERROR`` when ``text`` is not valid Unicode (a lone surrogate such as ``"\\ud800"``, which no
    encoding, file, process argument or parser accepts), else None."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        bad = text[error.start:error.start + 1]
        return Failure(
            FailureKind.PARSE_ERROR,
            f"the action is not valid Unicode: a lone surrogate {bad!r} at character {error.start}; "
            "send text that encodes as UTF-8",
            {"position": error.start},
        )
    return None


def first_invalid_text(value: Any) -> str | None:
    """Describes the first string in ``value`` (nested lists, tuples, dict keys and values) that is not valid
    Unicode, or returns None. For parsed actions, whose escapes (JSON ``"\\ud800"``, Python ``"\\ud800"``)
    can make a lone surrogate out of ASCII text."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            failure = invalid_text_failure(item)
            if failure is not None:
                return f"a lone surrogate in {item[:40]!r}"
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return None


def _invalid_text_step(action: str) -> StepResult | None:
    """The step for an action that is not valid Unicode (it never reaches the env), or None."""
    failure = invalid_text_failure(action)
    if failure is None:
        return None
    return StepResult(f"Invalid action: {failure.message}.", 0.0, False, False, {"failure": failure})


def _coerce_task(task: Any) -> Any:
    """Accepts a Task, a dict in Task form, or None."""
    if task is None or isinstance(task, Task):
        return task
    if isinstance(task, dict):
        return Task.model_validate(task)
    raise TypeError(f"options['task'] must be a rlvr_gym.Task or a dict, got {type(task).__name__}")


def draw_seed(rng: np.random.Generator) -> int:
    """Draws a 31-bit integer seed from ``rng`` (for sub-generators that need an int)."""
    return int(rng.integers(0, 2**31 - 1))
