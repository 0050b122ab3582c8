"""The one episode runner on the policy side: a turn's generation in, the env's step and the next ids out.

:class:`PolicyEpisode` wraps :class:`rlvr_gym.episode.EnvEpisode` (crash-safe env stepping) with what the policy
needs: the context length in ids, the ids to feed next and the context-window policy. The flat sampler
(:mod:`.flat`), the tree sampler (:mod:`.tree_sampler`; one per path, forked at branch points) and policy
evaluation (:mod:`rlvr_gym_agents.evaluate`, through the flat sampler) all run their turns through it.

The context-window policy (:meth:`PolicyEpisode.overflow`): before every turn the context, whose last
observation's ids are appended but not yet fed, must leave room for ``max_new_tokens`` within the policy's
window; otherwise the episode ends as truncated with a ``CONTEXT_OVERFLOW`` failure, the unfed observation is
dropped from what is trained on, and the policy never sees a context longer than its window.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

import rlvr_gym
from rlvr_gym import Env, Failure, FailureKind, Task
from rlvr_gym.episode import EnvEpisode, StepOutcome
from rlvr_gym_agents.policy.base import Generation
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout.types import Turn


def with_env_kwargs(make: Callable[..., Env], env_id: str, kwargs: dict[str, Any]) -> Callable[..., Env]:
    """``make`` whose calls building ``env_id`` get ``kwargs`` (a call's own keyword arguments win; other env ids
    are built as ``make`` builds them); ``make`` itself when ``kwargs`` is empty."""
    if not kwargs:
        return make

    def make_with_kwargs(called_id: str, **overrides: Any) -> Env:
        return make(called_id, **({**kwargs, **overrides} if called_id == env_id else overrides))

    return make_with_kwargs


def context_overflow(context_tokens: int, max_new_tokens: int, window: int) -> Failure | None:
    """The context-window policy: a ``CONTEXT_OVERFLOW`` failure when ``context_tokens + max_new_tokens`` exceeds
    ``window`` (all in tokens), else None."""
    if context_tokens + max_new_tokens <= window:
        return None
    return Failure(FailureKind.CONTEXT_OVERFLOW,
                   f"context of {context_tokens} tokens + {max_new_tokens} new tokens exceeds the policy's window of "
                   f"{window}", {"context_tokens": context_tokens, "max_context_tokens": window})


@dataclasses.dataclass
class PlayedTurn:
    """One turn played by :meth:`PolicyEpisode.play`.

    Attributes:
        turn: the turn's record (span relative to the turn: ``(0, len(generated ids))``).
        outcome: the env's step.
        observation_ids: the next observation's ids to append (empty when the episode ended).
    """

    turn: Turn
    outcome: StepOutcome
    observation_ids: list[int]


class PolicyEpisode:
    """A running episode seen from the policy: env, context length and the ids to feed next.

    Attributes:
        env: the crash-safe env episode.
        prompt_ids: the first observation's ids (the prompt).
        feed_ids: the ids appended since the policy last ran on this episode (the prompt, then each observation).
        context_length: ids in the context so far (fed or not).
    """

    def __init__(self, env: EnvEpisode, prompt_ids: list[int]) -> None:
        self.env, self.prompt_ids = env, prompt_ids
        self.feed_ids = list(prompt_ids)
        self.context_length = len(prompt_ids)

    @classmethod
    def start(cls, task: Task, chat: ChatFormat, env_factory: Callable[..., Env] = rlvr_gym.make,
              max_turns: int | None = None) -> tuple[PolicyEpisode | None, Failure | None]:
        """Builds and resets the env of ``task``; ``(None, ENV_CRASH failure)`` when that raised.

        Raises:
            rlvr_gym.UnknownEnvError: the task's env id is not registered.
        """
        env, failure = EnvEpisode.start(task, env_factory, max_turns)
        if env is None:
            return None, failure
        return cls(env, chat.prompt_ids(env.observation)), None

    @property
    def done(self) -> bool:
        return self.env.done

    def overflow(self, max_new_tokens: int, window: int) -> Failure | None:
        """Applies the context-window policy before a turn (:func:`context_overflow`); an overflow ends the
        episode (closing its env) and is returned."""
        failure = context_overflow(self.context_length, max_new_tokens, window)
        if failure is not None:
            self.env.done = True
        return failure

    def play(self, generation: Generation, chat: ChatFormat) -> PlayedTurn:
        """Decodes the turn's action, steps the env with it and encodes the next observation."""
        return play_turns([self], [generation], chat)[0]

    def fork(self) -> PolicyEpisode:
        """An independent episode at the same point (the env forked; raises what its fork raises)."""
        child = PolicyEpisode(self.env.fork(), self.prompt_ids)
        child.feed_ids, child.context_length = list(self.feed_ids), self.context_length
        return child

    def close(self) -> Failure | None:
        """Closes the env; a failing ``close()`` comes back as an ``ENV_CRASH`` failure."""
        return self.env.close()


def play_turns(episodes: Sequence[PolicyEpisode], generations: Sequence[Generation], chat: ChatFormat,
               executor: Executor | None = None) -> list[PlayedTurn]:
    """Plays one turn of every episode: decodes each action, steps every env (concurrently on ``executor`` when
    given: envs behind Ray workers, sandboxes, simulators or browsers wait in parallel), then encodes each next
    observation. Results come back in input order, and each env's randomness is its own, so concurrency never
    changes what is trained on.

    Args:
        episodes / generations: one generation per running episode, aligned.
        chat: decodes actions and encodes observations (always on the calling thread).
        executor: runs the env steps (e.g. a ``ThreadPoolExecutor``); None steps them one after another.
    """
    actions = [chat.decode_action(g.token_ids) for g in generations]
    turns = [Turn(e.env.observation, a, (0, len(g.token_ids)), finish_reason=g.finish_reason, state_key=e.env.state_key)
             for e, a, g in zip(episodes, actions, generations, strict=True)]
    if executor is None or len(episodes) < 2:
        outcomes = [e.env.step(a) for e, a in zip(episodes, actions, strict=True)]
    else:
        futures = [executor.submit(e.env.step, a) for e, a in zip(episodes, actions, strict=True)]
        outcomes = [f.result() for f in futures]  # EnvEpisode.step never raises: a crash is an outcome
    played = []
    for episode, turn, outcome, generation in zip(episodes, turns, outcomes, generations, strict=True):
        turn.reward, turn.failure = outcome.reward, outcome.failure
        observation_ids = ([] if outcome.done else
                           chat.observation_ids(outcome.observation, generation.finish_reason == "stop"))
        episode.feed_ids = observation_ids
        episode.context_length += len(generation.token_ids) + len(observation_ids)
        played.append(PlayedTurn(turn, outcome, observation_ids))
    return played
