"""Flat multi-turn rollouts: a batch of envs, one policy, token-in/token-out trajectories.

Each episode's context is ``prompt ids | turn 1 generated ids | observation 1 ids | turn 2 generated ids | ...``.
The loss mask is 1 exactly on generated ids (the end-of-turn id the policy emitted included) and 0 on prompt
and observation ids (algorithms.md §7.1). Per-turn spans of generated ids are kept for turn-level credit.

Nothing an env does kills the batch: an exception in ``reset``/``step`` ends that episode with
``Failure(ENV_CRASH)``; a context that would outgrow the policy's window ends it as truncated with
``Failure(CONTEXT_OVERFLOW)``.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import rlvr_gym
from rlvr_gym import Env, Failure, FailureKind, Task
from rlvr_gym_agents.chat import ChatFormat
from rlvr_gym_agents.policy import Generation, KVState, Policy, SamplingParams


@dataclasses.dataclass
class Turn:
    """One turn of an episode.

    Attributes:
        observation: the observation the action answered.
        action: the decoded action text sent to the env.
        span: ``(start, end)`` token indices of the generated ids of this turn in ``Trajectory.token_ids``.
        reward: the env's reward for this step.
        failure: the step's typed failure, or None.
        finish_reason: ``"stop"`` or ``"length"`` (see :class:`Generation`).
        state_key: the env's ``info["state_key"]`` of the state the turn started from (None when the env gives
            none); the anchor of GiGPO's step groups.
    """

    observation: str
    action: str
    span: tuple[int, int]
    reward: float = 0.0
    failure: Failure | None = None
    finish_reason: str = "stop"
    state_key: str | None = None


@dataclasses.dataclass
class Trajectory:
    """One episode, as ids the trainer can train on.

    Attributes:
        task_id / env_id: what was run.
        token_ids: the whole context (N ids).
        loss_mask: N ints, 1 on policy-generated ids, 0 on prompt and observation ids.
        logps: N floats, the sampling log-probs of generated ids (0.0 where the mask is 0).
        entropies: N floats, next-token entropies (nats) of generated ids (0.0 where the mask is 0).
        prompt_length: number of prompt ids.
        turns: the turns in order.
        reward: the episode return (sum of step rewards).
        success: ``info["success"]`` of the last step (False when absent).
        terminated / truncated: how the episode ended (both False only if it never started).
        failures: every typed failure, in order (step failures, context overflow, env crash).
        group: index of the group (same task) this trajectory belongs to; set by the caller.
    """

    task_id: str
    env_id: str
    token_ids: list[int] = dataclasses.field(default_factory=list)
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    logps: list[float] = dataclasses.field(default_factory=list)
    entropies: list[float] = dataclasses.field(default_factory=list)
    prompt_length: int = 0
    turns: list[Turn] = dataclasses.field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    failures: list[Failure] = dataclasses.field(default_factory=list)
    group: int = 0

    @property
    def turn_spans(self) -> list[tuple[int, int]]:
        """``(start, end)`` of each turn's generated ids."""
        return [t.span for t in self.turns]

    @property
    def num_generated_tokens(self) -> int:
        return sum(self.loss_mask)

    def truncate(self, length: int) -> None:
        """Keeps the first ``length`` context ids (and their mask, log-probs and entropies)."""
        for name in ("token_ids", "loss_mask", "logps", "entropies"):
            del getattr(self, name)[length:]

    def append(self, ids: Sequence[int], trained: bool, generation: Generation | None = None) -> None:
        """Appends context ids; generated ones carry their log-probs and entropies."""
        self.token_ids.extend(int(i) for i in ids)
        self.loss_mask.extend([int(trained)] * len(ids))
        self.logps.extend(generation.logps if generation else [0.0] * len(ids))
        self.entropies.extend(generation.entropies if generation else [0.0] * len(ids))


@dataclasses.dataclass
class _Episode:
    """Book-keeping of one running episode."""

    env: Env | None
    trajectory: Trajectory
    observation: str
    pending_ids: list[int]
    done: bool = False
    state_key: str | None = None


def run_episodes(policy: Policy, chat: ChatFormat, tasks: Sequence[Task], sampling: SamplingParams, *,
                 reuse_kv_cache: bool = True, env_factory: Callable[..., Env] = rlvr_gym.make,
                 max_turns: int | None = None, on_turn: Callable[[int], None] | None = None) -> list[Trajectory]:
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

    Returns:
        One :class:`Trajectory` per task, in order.
    """
    episodes = [_start_episode(task, chat, env_factory, max_turns) for task in tasks]
    state: Any = None
    state_rows: list[int] = []  # the episode index of each row of ``state``
    rows = [i for i, e in enumerate(episodes) if not e.done]
    while rows:
        rows = [r for r in rows if not _overflows(episodes[r], policy, sampling)]
        if not rows:
            break
        if reuse_kv_cache:
            if state is not None and rows != state_rows:
                state = state.select([state_rows.index(r) for r in rows])
            if isinstance(state, KVState):
                state.compact()
            generations, state = policy.generate([episodes[r].pending_ids for r in rows], sampling, state)
            state_rows = list(rows)
        else:
            generations, _ = policy.generate([episodes[r].trajectory.token_ids for r in rows], sampling)
        for row, generation in zip(rows, generations):
            _advance(episodes[row], generation, chat)
        rows = [r for r in rows if not episodes[r].done]
        if on_turn is not None:
            on_turn(len(rows))
    for episode in episodes:
        _close(episode)
    return [e.trajectory for e in episodes]


def _start_episode(task: Task, chat: ChatFormat, env_factory: Callable[..., Env],
                   max_turns: int | None) -> _Episode:
    trajectory = Trajectory(task_id=task.id, env_id=task.env_id)
    try:
        env = env_factory(task.env_id) if max_turns is None else env_factory(task.env_id, max_turns=max_turns)
        observation, info = env.reset(options={"task": task})
    except Exception as error:  # noqa: BLE001 - an env must never kill the batch
        trajectory.truncated = True
        trajectory.failures.append(_crash_failure("reset", error))
        return _Episode(None, trajectory, "", [], done=True)
    prompt = chat.prompt_ids(observation)
    trajectory.append(prompt, trained=False)
    trajectory.prompt_length = len(prompt)
    return _Episode(env, trajectory, observation, list(prompt), state_key=info.get("state_key"))


def _overflows(episode: _Episode, policy: Policy, sampling: SamplingParams) -> bool:
    """Ends the episode as truncated when the next turn might not fit in the context window."""
    length = len(episode.trajectory.token_ids)
    if length + sampling.max_new_tokens <= policy.max_context_tokens:
        return False
    episode.done = True
    trajectory = episode.trajectory
    if trajectory.turns:  # the last observation never reached the policy: drop its ids
        trajectory.truncate(trajectory.turns[-1].span[1])
    trajectory.truncated = True
    trajectory.failures.append(Failure(
        FailureKind.CONTEXT_OVERFLOW,
        f"context of {length} tokens + {sampling.max_new_tokens} new tokens exceeds the policy's window of "
        f"{policy.max_context_tokens}", {"context_tokens": length, "max_context_tokens": policy.max_context_tokens},
    ))
    return True


def _advance(episode: _Episode, generation: Generation, chat: ChatFormat) -> None:
    """Appends a generated turn, steps the env with its action and appends the next observation."""
    trajectory = episode.trajectory
    start = len(trajectory.token_ids)
    trajectory.append(generation.token_ids, trained=True, generation=generation)
    action = chat.decode_action(generation.token_ids)
    turn = Turn(episode.observation, action, (start, len(trajectory.token_ids)),
                finish_reason=generation.finish_reason, state_key=episode.state_key)
    trajectory.turns.append(turn)
    try:
        observation, reward, terminated, truncated, info = episode.env.step(action)  # type: ignore[union-attr]
    except Exception as error:  # noqa: BLE001 - an env must never kill the batch
        turn.failure = _crash_failure("step", error)
        trajectory.failures.append(turn.failure)
        trajectory.truncated, episode.done = True, True
        return
    turn.reward, turn.failure = float(reward), info.get("failure")
    trajectory.reward += turn.reward
    if isinstance(turn.failure, Failure):
        trajectory.failures.append(turn.failure)
    if terminated or truncated:
        trajectory.terminated, trajectory.truncated = bool(terminated), bool(truncated)
        trajectory.success = bool(info.get("success", False))
        episode.done = True
        return
    episode.observation, episode.state_key = observation, info.get("state_key")
    episode.pending_ids = chat.observation_ids(observation, generation.finish_reason == "stop")
    trajectory.append(episode.pending_ids, trained=False)


def _crash_failure(where: str, error: BaseException) -> Failure:
    return Failure(FailureKind.ENV_CRASH, f"env raised in {where}(): {type(error).__name__}: {error}",
                   {"traceback": traceback.format_exc(limit=5)})


def _close(episode: _Episode) -> None:
    if episode.env is not None:
        try:
            episode.env.close()
        except Exception as error:  # noqa: BLE001 - a failing close is recorded, not raised
            episode.trajectory.failures.append(_crash_failure("close", error))
