"""The flat sampler: a batch of independent episodes, one policy, token-in/token-out trajectories.

All episodes advance in lock-step, one batched ``generate`` call per turn, each row's KV cache kept across turns.
Every turn goes through the one episode runner (:class:`~rlvr_gym_agents.rollout.episode.PolicyEpisode`): nothing
an env does kills the batch (a raise in ``reset``/``step``/``close`` is an ``ENV_CRASH`` failure in the
trajectory), and a context that would outgrow the policy's window ends the episode as truncated with a
``CONTEXT_OVERFLOW`` failure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

import rlvr_gym
from rlvr_gym import Env, Failure, Task
from rlvr_gym_agents.policy import KVState, Policy, SamplingParams
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout.episode import PlayedTurn, PolicyEpisode, play_turns
from rlvr_gym_agents.rollout.types import RolloutBatch, Trajectory


def run_episodes(policy: Policy, chat: ChatFormat, tasks: Sequence[Task], sampling: SamplingParams, *,
                 reuse_kv_cache: bool = True, env_factory: Callable[..., Env] = rlvr_gym.make,
                 max_turns: int | None = None, on_turn: Callable[[int], None] | None = None,
                 step_executor: Executor | None = None) -> list[Trajectory]:
    """Runs one episode per task, all envs stepping in lock-step, and returns their trajectories.

    Args:
        policy: the policy (its ``max_context_tokens`` bounds each context).
        chat: the chat format turning observations into ids.
        tasks: one task per episode (repeat a task n times for a group of n).
        sampling: temperature / top-p / ``max_new_tokens`` per turn.
        reuse_kv_cache: keep each row's KV cache across turns (same ids, ~3x faster on CPU); False
            re-runs the whole context every turn.
        env_factory: builds an env from an env id (default :func:`rlvr_gym.make`).
        max_turns: overrides the env's turn limit when given.
        on_turn: called with the number of episodes still running after every turn (progress bars).
        step_executor: steps a turn's envs concurrently (:func:`~rlvr_gym_agents.rollout.episode.play_turns`);
            None steps them one after another. Either way the trajectories are the same.

    Returns:
        One :class:`Trajectory` per task, in order.

    Raises:
        rlvr_gym.UnknownEnvError: a task's env id is not registered.
    """
    trajectories = [Trajectory(task_id=task.id, env_id=task.env_id) for task in tasks]
    episodes: list[PolicyEpisode | None] = []
    for task, trajectory in zip(tasks, trajectories):
        episode, failure = PolicyEpisode.start(task, chat, env_factory, max_turns)
        episodes.append(episode)
        if episode is None:
            _end(trajectory, failure, truncated=True)
        else:
            trajectory.append(episode.prompt_ids, trained=False)
            trajectory.prompt_length = len(episode.prompt_ids)
    state: Any = None
    state_rows: list[int] = []  # the episode index of each row of ``state``
    rows = [i for i, e in enumerate(episodes) if e is not None]
    while rows:
        rows = [r for r in rows if not _overflows(episodes[r], trajectories[r], policy, sampling)]
        if not rows:
            break
        if reuse_kv_cache:
            if state is not None and rows != state_rows:
                state = state.select([state_rows.index(r) for r in rows])
            if isinstance(state, KVState):
                state.compact()
            generations, state = policy.generate([episodes[r].feed_ids for r in rows], sampling, state)  # type: ignore[union-attr]
            state_rows = list(rows)
        else:
            generations, _ = policy.generate([trajectories[r].token_ids for r in rows], sampling)
        starts = [len(trajectories[row].token_ids) for row in rows]
        for row, generation in zip(rows, generations):
            trajectories[row].append(generation.token_ids, trained=True, generation=generation)
        played = play_turns([episodes[r] for r in rows], generations, chat, step_executor)  # type: ignore[misc]
        for row, start, turn in zip(rows, starts, played, strict=True):
            record_turn(trajectories[row], turn, start)
        rows = [r for r in rows if not episodes[r].done]  # type: ignore[union-attr]
        if on_turn is not None:
            on_turn(len(rows))
    for episode, trajectory in zip(episodes, trajectories):
        if episode is not None and (failure := episode.close()) is not None:
            trajectory.failures.append(failure)
    return trajectories


def record_turn(trajectory: Trajectory, played: PlayedTurn, start: int) -> None:
    """Adds a played turn whose generated ids sit at ``trajectory.token_ids[start:]``: the turn (its span
    rebased), its reward and failure, how the episode ended, and the next observation's ids."""
    turn, outcome = played.turn, played.outcome
    turn.span = (start, start + turn.span[1])
    trajectory.turns.append(turn)
    trajectory.reward += turn.reward
    if turn.failure is not None:
        trajectory.failures.append(turn.failure)
    if outcome.done:
        trajectory.terminated, trajectory.truncated = outcome.terminated, outcome.truncated
        trajectory.success = outcome.success
        trajectory.last_observation = outcome.observation
    trajectory.append(played.observation_ids, trained=False)


def _overflows(episode: PolicyEpisode | None, trajectory: Trajectory, policy: Policy,
               sampling: SamplingParams) -> bool:
    """The context-window policy (:meth:`PolicyEpisode.overflow`); the unfed observation's ids are dropped."""
    assert episode is not None
    failure = episode.overflow(sampling.max_new_tokens, policy.max_context_tokens)
    if failure is None:
        return False
    if trajectory.turns:  # the last observation never reached the policy: drop its ids
        trajectory.truncate(trajectory.turns[-1].span[1])
    _end(trajectory, failure, truncated=True)
    return True


def _end(trajectory: Trajectory, failure: Failure | None, truncated: bool) -> None:
    trajectory.truncated = truncated
    if failure is not None:
        trajectory.failures.append(failure)


class FlatSampler:
    """GRPO's sampler: ``group_size`` independent episodes of every task.

    Args:
        policy / chat: what acts, token-in/token-out.
        group_size: episodes per task (the group).
        sampling: temperature / top-p / ``max_new_tokens`` of every turn.
        env_factory: builds envs (default :func:`rlvr_gym.make`; the trainer passes its env pool's ``make``).
        max_turns: overrides the envs' turn limit. reuse_kv_cache: keep each row's KV cache across turns.
        step_executor: steps each turn's envs concurrently (None: one after another).
    """

    def __init__(self, policy: Policy, chat: ChatFormat, group_size: int, sampling: SamplingParams,
                 env_factory: Callable[..., Env] = rlvr_gym.make, max_turns: int | None = None,
                 reuse_kv_cache: bool = True, step_executor: Executor | None = None) -> None:
        self.policy, self.chat, self.group_size, self.sampling = policy, chat, group_size, sampling
        self.env_factory, self.max_turns, self.reuse_kv_cache = env_factory, max_turns, reuse_kv_cache
        self.step_executor = step_executor

    def sample_batch(self, tasks: Sequence[Task], step: int) -> RolloutBatch:
        """``group_size`` episodes per task, each group's in a row (``Trajectory.group`` = the task's index).
        ``step`` is unused (flat sampling draws from the policy's own generator)."""
        batch = [task for task in tasks for _ in range(self.group_size)]
        trajectories = run_episodes(self.policy, self.chat, batch, self.sampling, reuse_kv_cache=self.reuse_kv_cache,
                                    env_factory=self.env_factory, max_turns=self.max_turns,
                                    step_executor=self.step_executor)
        for index, trajectory in enumerate(trajectories):
            trajectory.group = index // self.group_size
        return RolloutBatch(trajectories, tokens_generated=sum(t.num_generated_tokens for t in trajectories))
