"""One episode's env, crash-safe: the one owner of starting, stepping and closing an env for an episode.

Every consumer that runs episodes goes through :class:`EnvEpisode`: the evaluation harness
(:mod:`rlvr_gym.evaluation`), the trainer's episode runner (``rlvr_gym_agents.rollout.episode``, used by the flat
and tree samplers and by policy evaluation) and demonstration collection. So they agree on what an env crash is,
how a failing ``close()`` is recorded, which failure a step carries, what counts as success and where the
GiGPO anchor (``info["state_key"]``) comes from.

Nothing an env does escapes as an exception: a raise in construction, ``reset``, ``step``, ``fork`` or ``close``
becomes a :class:`~rlvr_gym.failures.Failure` of kind ``ENV_CRASH``. The one exception is
:class:`~rlvr_gym.registry.UnknownEnvError`: an env id that is not registered is a configuration error, raised
before any episode runs.

Example::

    episode, failure = EnvEpisode.start(task)
    while episode is not None and not episode.done:
        outcome = episode.step(agent(episode.observation))
    if episode is not None:
        episode.close()
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable
from typing import Any

from rlvr_gym.core import Env
from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym.registry import UnknownEnvError, make
from rlvr_gym.tasks import Task

__all__ = ["EnvEpisode", "StepOutcome", "crash_failure", "info_failure", "info_success"]


def crash_failure(where: str, error: BaseException) -> Failure:
    """An ``ENV_CRASH`` failure for an exception the env raised in ``where`` (``"reset"``, ``"step"``, ...).

    The message names the call, the exception type and its text; ``details["traceback"]`` keeps the last
    2,000 characters of the formatted traceback.
    """
    tail = "".join(traceback.format_exception(error))[-2000:]
    return Failure(FailureKind.ENV_CRASH, f"env raised in {where}(): {type(error).__name__}: {error}",
                   {"traceback": tail})


def info_failure(info: dict[str, Any]) -> Failure | None:
    """The typed failure in ``info["failure"]``: a :class:`Failure`, or its dict form (envs behind a process
    boundary send ``Failure.to_dict()``); None when there is none or it is not a failure."""
    failure = info.get("failure")
    if isinstance(failure, Failure):
        return failure
    if isinstance(failure, dict) and "kind" in failure:
        try:
            return Failure.from_dict(failure)
        except (ValueError, KeyError):
            return Failure(FailureKind.ENV_CRASH, f"unknown failure kind in info: {failure!r}")
    return None


def info_success(info: dict[str, Any]) -> bool:
    """Whether the step that ended an episode solved its task: ``info["success"]`` when the env gives it, else
    ``info["reward_details"].value >= 1`` (a verifier's full score), else False."""
    if "success" in info:
        return bool(info["success"])
    details = info.get("reward_details")
    value = getattr(details, "value", None)
    if value is None and isinstance(details, dict):
        value = details.get("value")
    return value is not None and float(value) >= 1.0


@dataclasses.dataclass
class StepOutcome:
    """What one :meth:`EnvEpisode.step` produced.

    Attributes:
        action: the action sent.
        observation: the observation after the step ("" after a crash).
        reward: the step reward (0.0 after a crash).
        terminated / truncated: how the episode ended (a crash is truncated); both False while it goes on.
        info: the env's info ({} after a crash).
        failure: the step's typed failure (the env's own, or ``ENV_CRASH`` when it raised), or None.
        state_key: ``info["state_key"]`` of the state the step led to, or None.
    """

    action: str
    observation: str
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    failure: Failure | None = None
    state_key: str | None = None

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated

    @property
    def success(self) -> bool:
        return self.done and info_success(self.info)


class EnvEpisode:
    """The env of one running episode and where it stands.

    Attributes:
        task: the task. env: the env (None once closed).
        observation / info: the latest observation and info (after reset, then after each step).
        state_key: ``info["state_key"]`` of the current state (GiGPO's anchor), or None.
        done: the episode ended (terminated, truncated or crashed).
        turns: steps taken.
    """

    def __init__(self, task: Task, env: Env, observation: str, info: dict[str, Any]) -> None:
        self.task = task
        self.env: Env | None = env
        self.observation, self.info = observation, info
        self.state_key: str | None = info.get("state_key")
        self.done = False
        self.turns = 0

    @classmethod
    def start(cls, task: Task, env_factory: Callable[..., Env] = make,
              max_turns: int | None = None) -> tuple[EnvEpisode | None, Failure | None]:
        """Builds ``task.env_id`` with ``env_factory`` and resets it with the task.

        Args:
            task: what to run (``options={"task": task}`` at reset).
            env_factory: ``env_factory(env_id)`` or, with ``max_turns``, ``env_factory(env_id, max_turns=...)``.
            max_turns: overrides the env's turn limit when given.

        Returns:
            ``(episode, None)``, or ``(None, ENV_CRASH failure)`` when construction or reset raised.

        Raises:
            UnknownEnvError: ``task.env_id`` is not registered (a configuration error, not an episode failure).
        """
        try:
            env = env_factory(task.env_id) if max_turns is None else env_factory(task.env_id, max_turns=max_turns)
        except UnknownEnvError:
            raise
        except Exception as error:  # noqa: BLE001 - an env must never kill the batch
            return None, crash_failure("make", error)
        try:
            observation, info = env.reset(options={"task": task})
        except Exception as error:  # noqa: BLE001
            failure = crash_failure("reset", error)
            _close_quietly(env)
            return None, failure
        return cls(task, env, observation, dict(info)), None

    def step(self, action: str) -> StepOutcome:
        """Steps the env with ``action``; a raise ends the episode as truncated with an ``ENV_CRASH`` failure.

        Raises:
            RuntimeError: the episode already ended (an internal error of the caller).
        """
        if self.done or self.env is None:
            raise RuntimeError(f"step() on an episode of {self.task.id} that already ended")
        self.turns += 1
        try:
            observation, reward, terminated, truncated, info = self.env.step(action)
        except Exception as error:  # noqa: BLE001 - an env must never kill the batch
            self.done = True
            return StepOutcome(action, "", 0.0, False, True, {}, crash_failure("step", error))
        info = dict(info)
        outcome = StepOutcome(action, observation, float(reward), bool(terminated), bool(truncated), info,
                              info_failure(info), info.get("state_key"))
        self.observation, self.info, self.state_key = observation, info, outcome.state_key
        self.done = outcome.done
        return outcome

    def fork(self) -> EnvEpisode:
        """An independent episode in the same state (``env.fork()``); raises whatever the env's fork raises."""
        if self.env is None:
            raise RuntimeError(f"fork() on a closed episode of {self.task.id}")
        child = EnvEpisode(self.task, self.env.fork(), self.observation, dict(self.info))
        child.state_key, child.done, child.turns = self.state_key, self.done, self.turns
        return child

    @property
    def supports_fork(self) -> bool:
        return bool(getattr(self.env, "supports_fork", False))

    def close(self) -> Failure | None:
        """Closes the env once (later calls do nothing); returns an ``ENV_CRASH`` failure when ``close()`` raised."""
        env, self.env = self.env, None
        if env is None:
            return None
        try:
            env.close()
        except Exception as error:  # noqa: BLE001 - a failing close is recorded, never raised
            return crash_failure("close", error)
        return None


def _close_quietly(env: Env) -> None:
    try:
        env.close()
    except Exception:  # noqa: BLE001, S110 - the reset failure is what gets recorded
        pass
