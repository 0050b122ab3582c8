"""Evaluate any agent on a task suite: pass@1, pass@k, reward, turns, tool calls, failures by type.

Two kinds of agent are accepted:

- an :class:`Agent`: ``act(observation, info) -> action`` (optionally ``reset(task)`` before each episode),
  or a plain callable ``(observation, info) -> action``. Episodes run one at a time, because such an agent
  may keep per-episode state.
- a :class:`BatchAgent`: ``act_batch(keys, observations, infos) -> actions`` (optionally
  ``end_episodes(keys)``). Up to ``max_parallel`` episodes run in lockstep; each turn the agent gets one
  observation per live episode. Keys are ``f"{task.id}#{sample}"``. With ``env_threads=True`` the live envs
  are reset and stepped concurrently in threads, so envs behind processes or Ray actors (an
  :class:`rlvr_gym.workers.EnvPool`) overlap their waits; leave it False for in-process envs bound to one
  thread (Playwright's sync API: the ``web`` family outside a pool).

Nothing an env does can crash a run: an env that raises in construction, ``reset`` or ``step`` ends that
episode with an ``env_crash`` failure in its :class:`EpisodeRecord` (an unknown env id is a configuration
error and raises :class:`rlvr_gym.UnknownEnvError` before any episode). An agent that raises ends its episodes
with an ``agent_error`` failure (a harness-level kind, not a :class:`rlvr_gym.FailureKind`), and the first
traceback is logged. ``env.close()`` is always called.

Example::

    from rlvr_gym import load_suite
    from rlvr_gym.evaluation import evaluate
    report = evaluate(my_agent, load_suite("textworld/easy-test"), k=8)
    print(report.metrics["pass@1"], report.metrics["pass@8"])
    report.save("runs/eval")        # report.json (metrics + records), report.md, report.png
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import logging
import math
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, runtime_checkable

from rlvr_gym.core import Env
from rlvr_gym.episode import EnvEpisode, info_failure
from rlvr_gym.failures import Failure
from rlvr_gym.registry import make, spec
from rlvr_gym.reporting import EvalReport
from rlvr_gym.tasks import Task

logger = logging.getLogger(__name__)

AGENT_ERROR = "agent_error"
"""Failure kind recorded when the agent (not the env) raised."""
OBSERVATION_CHARS = 4000
"""The longest observation kept in an :class:`EpisodeRecord`, in characters (longer ones keep both ends)."""
NO_VALUE = "(none)"
"""The group of records whose task has no value for a ``by`` key."""

__all__ = [
    "AGENT_ERROR",
    "Agent",
    "BatchAgent",
    "EpisodeAgent",
    "EpisodeRecord",
    "EvalReport",
    "episode_key",
    "evaluate",
    "pass_at_k",
    "summarize",
]


@runtime_checkable
class Agent(Protocol):
    """A policy that acts on one episode at a time.

    ``reset(task)`` (optional) is called before each episode with the :class:`rlvr_gym.Task`.
    """

    def act(self, observation: str, info: dict[str, Any]) -> str:
        """Returns the next action for ``observation`` (``info`` is the env's info of the last step)."""
        ...


@runtime_checkable
class BatchAgent(Protocol):
    """A policy that acts on many episodes at once (a model generating for a batch of contexts).

    ``end_episodes(keys)`` (optional) is called when episodes end so per-episode contexts can be freed.
    """

    def act_batch(self, keys: list[str], observations: list[str], infos: list[dict[str, Any]]) -> list[str]:
        """Returns one action per key. ``keys[i]`` (``"task_id#sample"``) names the episode of
        ``observations[i]``; the same key is passed on every turn of that episode."""
        ...


@runtime_checkable
class EpisodeAgent(Protocol):
    """An agent that runs whole episodes itself, through its own episode runner (a model policy, token-in/token-out:
    ``rlvr_gym_agents.evaluate.PolicyAgent``, which applies the model's context-window policy).

    ``run_episodes(jobs, env_factory)`` gets ``(task, sample)`` pairs and returns one :class:`EpisodeRecord` per pair,
    in order; envs come from ``env_factory``.
    """

    def run_episodes(self, jobs: list[tuple[Task, int]], env_factory: Callable[..., Env]) -> list[EpisodeRecord]:
        """Runs one episode per job and returns their records."""
        ...


@dataclasses.dataclass
class EpisodeRecord:
    """The outcome of one episode; JSON-serialisable with :func:`dataclasses.asdict`.

    Attributes:
        task_id: the task's id.
        sample: which of the k samples of the task this is, 0-based.
        env_id: the env that ran it.
        reward: the episode return (sum of step rewards; for most envs the final verified reward).
        success: ``info["success"]`` of the last step (falls back to ``reward_details.value >= 1``).
        turns: number of steps taken.
        terminated: the task ended (solved, failed, submitted).
        truncated: a budget ran out (turn limit, wall clock, context).
        tool_calls: total of the envs' ``info["tool_calls"]`` over the episode.
        invalid_tool_calls: total of ``info["invalid_tool_calls"]``.
        tools_declared: whether the env declared tools (``info["tools"]`` at reset).
        failure: the kind of the failure on the last step (what ended the episode), or None.
        failures: every failure of the episode, as ``Failure.to_dict()``, in order.
        actions: the actions taken.
        elapsed_s: wall-clock seconds from reset to the end of the episode.
        task_type: ``task.metadata["task_type"]`` when present.
        observations: the reset observation, then one per completed step (so ``observations[i]`` is what the
            agent saw before ``actions[i]``); each clipped to :data:`OBSERVATION_CHARS` characters (head and
            tail kept).
        step_rewards: the reward of each completed step.
        step_failures: the failure kind of each completed step, or None.
        metadata: the task's ``metadata`` (what ``summarize(..., by=[KEY])`` splits on).
    """

    task_id: str
    sample: int
    env_id: str
    reward: float = 0.0
    success: bool = False
    turns: int = 0
    terminated: bool = False
    truncated: bool = False
    tool_calls: int = 0
    invalid_tool_calls: int = 0
    tools_declared: bool = False
    failure: str | None = None
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    actions: list[str] = dataclasses.field(default_factory=list)
    elapsed_s: float = 0.0
    task_type: str | None = None
    observations: list[str] = dataclasses.field(default_factory=list)
    step_rewards: list[float] = dataclasses.field(default_factory=list)
    step_failures: list[str | None] = dataclasses.field(default_factory=list)
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Returns the record as a JSON-serialisable dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EpisodeRecord:
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def episode_key(task: Task, sample: int) -> str:
    """The key naming one episode for a :class:`BatchAgent`: ``"<task.id>#<sample>"``."""
    return f"{task.id}#{sample}"


# -- metrics ------------------------------------------------------------------------------------------------
def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimator: the probability that at least one of k samples drawn without
    replacement from n (of which c are correct) is correct.

    ``1 - C(n-c, k) / C(n, k)``, computed as ``1 - prod_{i=n-c+1}^{n} (1 - k/i)`` for numerical stability.
    Source: Chen et al. 2021, "Evaluating Large Language Models Trained on Code", eq. 1 and Fig. 3.

    Args:
        n: samples drawn for the task, n >= 1.
        c: correct samples, 0 <= c <= n.
        k: the k of pass@k, 1 <= k <= n.

    Returns:
        A float in [0, 1]; exactly 1.0 when n - c < k, exactly 0.0 when c == 0.

    Raises:
        ValueError: when the arguments are out of range.
    """
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def summarize(records: Sequence[EpisodeRecord], k: int = 1, by: Sequence[str] = ()) -> dict[str, Any]:
    """Aggregates episode records into the metrics of a report.

    pass@1 and pass@k are averaged over tasks (each task weighs the same whatever its sample count); the
    other means are over episodes. Tool metrics only count envs that declared tools.

    Args:
        records: the episodes; each task should have at least ``k`` samples.
        k: the k of pass@k.
        by: keys to split every metric by: a task metadata key (``task.metadata[KEY]``), or a record field
            (``env_id``, ``task_type``); records without a value fall in the group :data:`NO_VALUE`.

    Returns:
        A dict with ``num_tasks``, ``num_episodes``, ``k``, ``pass@1``, ``pass@{k}``, their standard errors over
        tasks ``pass@1_stderr`` and ``pass@{k}_stderr`` (None with fewer than two tasks), the curve
        ``pass@k_curve`` (``{"1": pass@1, ..., "K": pass@K}`` for every j <= k) and ``pass@k_curve_stderr``,
        ``mean_reward``, ``mean_turns``, ``truncation_rate``, ``tool_calls_per_episode`` and
        ``invalid_tool_call_rate`` (None when no env declared tools / no call was made), ``failures_by_type``
        (every failure of every turn, by kind), ``episodes_ended_by`` (the failure kind of the last step,
        one per episode at most), ``mean_elapsed_s``, the breakdowns ``per_env`` and ``per_task_type``, and
        ``by`` (``{KEY: {value: metrics}}``, one entry per key of ``by``); the breakdowns hold the same
        metrics without breakdowns.

    Raises:
        ValueError: when ``records`` is empty, ``k < 1``, or a task has fewer than ``k`` samples.
    """
    metrics = _core_metrics(records, k)
    metrics["per_env"] = {env: _core_metrics(group, k) for env, group in _group_by(records, "env_id").items()}
    typed = [r for r in records if r.task_type is not None]
    metrics["per_task_type"] = {t: _core_metrics(group, k) for t, group in _group_by(typed, "task_type").items()}
    metrics["by"] = {key: {value: _core_metrics(group, k) for value, group in _group_by_key(records, key).items()}
                     for key in by}
    return metrics


def _group_by_key(records: Iterable[EpisodeRecord], key: str) -> dict[str, list[EpisodeRecord]]:
    """Groups by ``record.metadata[key]``, else the record field ``key``; sorted by group name."""
    groups: dict[str, list[EpisodeRecord]] = collections.defaultdict(list)
    for record in records:
        value = record.metadata.get(key, getattr(record, key, None) if key in _RECORD_KEYS else None)
        groups[NO_VALUE if value is None else str(value)].append(record)
    return dict(sorted(groups.items()))


_RECORD_KEYS = frozenset({"env_id", "task_type", "task_id"})


def _core_metrics(records: Sequence[EpisodeRecord], k: int) -> dict[str, Any]:
    if not records:
        raise ValueError("summarize() needs at least one episode record")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    by_task = _group_by(records, "task_id")
    short = sorted(t for t, group in by_task.items() if len(group) < k)
    if short:
        raise ValueError(f"pass@{k} needs >= {k} samples per task; too few for {short[:5]} (evaluate with k={k})")
    counts = [(len(group), sum(r.success for r in group)) for group in by_task.values()]
    curve = {j: [pass_at_k(n, c, j) for n, c in counts] for j in range(1, k + 1)}
    with_tools = [r for r in records if r.tools_declared]
    num_calls = sum(r.tool_calls for r in with_tools)
    return {
        "num_tasks": len(by_task),
        "num_episodes": len(records),
        "k": k,
        "pass@1": _mean(curve[1]),
        f"pass@{k}": _mean(curve[k]),
        "pass@1_stderr": _standard_error(curve[1]),
        f"pass@{k}_stderr": _standard_error(curve[k]),
        "pass@k_curve": {str(j): _mean(values) for j, values in curve.items()},
        "pass@k_curve_stderr": {str(j): _standard_error(values) for j, values in curve.items()},
        "mean_reward": _mean(r.reward for r in records),
        "mean_turns": _mean(r.turns for r in records),
        "truncation_rate": _mean(float(r.truncated) for r in records),
        "tool_calls_per_episode": _mean(r.tool_calls for r in with_tools) if with_tools else None,
        "invalid_tool_call_rate": sum(r.invalid_tool_calls for r in with_tools) / num_calls if num_calls else None,
        "failures_by_type": dict(collections.Counter(f["kind"] for r in records for f in r.failures).most_common()),
        "episodes_ended_by": dict(collections.Counter(r.failure for r in records if r.failure).most_common()),
        "mean_elapsed_s": _mean(r.elapsed_s for r in records),
    }


def _group_by(records: Iterable[EpisodeRecord], attribute: str) -> dict[Any, list[EpisodeRecord]]:
    groups: dict[Any, list[EpisodeRecord]] = collections.defaultdict(list)
    for record in records:
        groups[getattr(record, attribute)].append(record)
    return dict(groups)


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _standard_error(values: Sequence[float]) -> float | None:
    """Standard error of the mean over tasks: sample standard deviation (n - 1) / sqrt(n); None for n < 2."""
    if len(values) < 2:
        return None
    mean = _mean(values)
    variance = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(variance / len(values))


# -- running episodes ---------------------------------------------------------------------------------------
class _Episode:
    """One live episode: its env (:class:`rlvr_gym.episode.EnvEpisode`, the one stepping owner) and the record."""

    def __init__(self, task: Task, sample: int) -> None:
        self.task, self.key = task, episode_key(task, sample)
        self.record = EpisodeRecord(task.id, sample, task.env_id, task_type=_task_type(task),
                                    metadata=dict(task.metadata))
        self.env: EnvEpisode | None = None
        self.observation: str = ""
        self.info: dict[str, Any] = {}
        self.done = False
        self.started_at = 0.0

    def start(self, env_factory: Callable[[str], Env]) -> None:
        """Builds and resets the env; an exception ends the episode as an env crash."""
        self.started_at = time.perf_counter()
        self.env, failure = EnvEpisode.start(self.task, env_factory)
        if self.env is None:
            self._end_with(failure)
            return
        self.observation, self.info = self.env.observation, self.env.info
        self.record.tools_declared = bool(self.info.get("tools"))
        self.record.observations.append(clip_text(self.observation))
        self._note_failure(info_failure(self.info))

    def step(self, action: str) -> None:
        """Steps the env with ``action`` and updates the record; an exception is an env crash."""
        assert self.env is not None and not self.done
        self.record.actions.append(action)
        outcome = self.env.step(action)
        record = self.record
        record.turns += 1
        record.reward += outcome.reward
        record.observations.append(clip_text(outcome.observation))
        record.step_rewards.append(outcome.reward)
        record.tool_calls += int(outcome.info.get("tool_calls") or 0)
        record.invalid_tool_calls += int(outcome.info.get("invalid_tool_calls") or 0)
        kind = self._note_failure(outcome.failure)
        record.step_failures.append(kind)
        self.observation, self.info = outcome.observation, outcome.info
        if outcome.done:
            record.terminated, record.truncated = outcome.terminated, outcome.truncated
            record.success = outcome.success
            record.failure = kind
            self.finish()

    def crash(self, kind: str, error: BaseException, where: str) -> None:
        """Ends the episode with a failure of ``kind`` (the agent's, not the env's) describing ``error``."""
        tail = "".join(traceback.format_exception(error))[-2000:]
        message = f"{where} raised {type(error).__name__}: {error}"
        self.record.failures.append({"kind": kind, "message": message, "details": {"traceback": tail}})
        self.record.failure = kind
        self.finish()

    def finish(self) -> None:
        """Marks the episode done, records its time and closes the env (a failing close is recorded)."""
        self.done = True
        self.record.elapsed_s = time.perf_counter() - self.started_at
        if self.env is not None and (failure := self.env.close()) is not None:
            self.record.failures.append(failure.to_dict())

    def _end_with(self, failure: Failure | None) -> None:
        self.record.truncated = True
        self.record.failure = self._note_failure(failure)
        self.finish()

    def _note_failure(self, failure: Failure | None) -> str | None:
        if failure is None:
            return None
        self.record.failures.append(failure.to_dict())
        return failure.kind.value


def clip_text(text: Any, limit: int = OBSERVATION_CHARS) -> str:
    """``text`` as str, at most ``limit`` characters: the head and the tail around a note of what was cut."""
    text = str(text)
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def _task_type(task: Task) -> str | None:
    task_type = task.metadata.get("task_type")
    return None if task_type is None else str(task_type)


def evaluate(
    agent: Agent | BatchAgent | EpisodeAgent | Callable[[str, dict[str, Any]], str],
    tasks: Iterable[Task],
    k: int = 1,
    *,
    env_factory: Callable[[str], Env] = make,
    max_parallel: int = 16,
    env_threads: bool | None = None,
    progress: bool = True,
    by: Sequence[str] = (),
) -> EvalReport:
    """Runs ``k`` episodes per task with ``agent`` and summarizes them.

    Args:
        agent: an :class:`Agent`, a :class:`BatchAgent`, an :class:`EpisodeAgent` (runs its episodes itself), or a
            callable ``(observation, info) -> action``.
        tasks: the tasks (a :class:`rlvr_gym.TaskSuite` or any iterable of :class:`rlvr_gym.Task`).
        k: samples per task (the k of pass@k), >= 1.
        env_factory: builds an env from an env id (``rlvr_gym.make``, or an env pool's ``make``).
        max_parallel: for a :class:`BatchAgent`, the most episodes in flight at once (>= 1). Plain agents run
            one episode at a time.
        env_threads: for a :class:`BatchAgent`, reset and step the live envs concurrently in up to
            ``max_parallel`` threads (envs must tolerate being called from any thread); False calls every env
            from the calling thread; None (the default) uses threads when ``env_factory`` is ``make`` and every
            task's env declares :attr:`rlvr_gym.Env.concurrent_steps` (the code and RTL families: their steps
            wait on sandboxes).
        progress: show a progress bar over episodes (:func:`rlvr_gym.tracking.progress_bar`: redraws in a
            terminal, a line every 30 s in a log).
        by: task metadata keys to split every metric by (see :func:`summarize`).

    Returns:
        An :class:`EvalReport` with ``metrics`` (see :func:`summarize`) and one record per episode, in
        task order then sample order.

    Raises:
        ValueError: on ``k < 1``, ``max_parallel < 1`` or no tasks.
        TypeError: on an agent that is neither kind nor callable.
        rlvr_gym.UnknownEnvError: when a task names an env id that is not registered.
    """
    task_list = list(tasks)
    if k < 1 or max_parallel < 1:
        raise ValueError(f"k and max_parallel must be >= 1, got k={k}, max_parallel={max_parallel}")
    if not task_list:
        raise ValueError("evaluate() got no tasks")
    with _shared_resources(task_list, env_factory):
        records = _run_episodes(agent, task_list, k, env_factory, max_parallel, env_threads, progress)
    return EvalReport(summarize(records, k, by), records)


def _run_episodes(agent: Any, tasks: list[Task], k: int, env_factory: Callable[[str], Env], max_parallel: int,
                  env_threads: bool | None, progress: bool) -> list[EpisodeRecord]:
    """``k`` episodes per task with ``agent`` (any kind :func:`evaluate` takes), in task then sample order."""
    if isinstance(agent, EpisodeAgent):
        return agent.run_episodes([(task, sample) for task in tasks for sample in range(k)], env_factory)
    if env_threads is None:  # the ids were checked; another factory's ids may be unknown to the registry
        env_threads = env_factory is make and all(spec(env_id).concurrent_steps for env_id in {t.env_id for t in tasks})
    episodes = [_Episode(task, sample) for task in tasks for sample in range(k)]
    with _progress_bar(len(episodes), progress) as bar:
        if isinstance(agent, BatchAgent):
            _run_batched(agent, episodes, env_factory, max_parallel if env_threads else 0, max_parallel, bar)
        elif isinstance(agent, Agent) or callable(agent):
            for episode in episodes:
                _run_single(agent, episode, env_factory, episodes)
                bar.update(1)
        else:
            raise TypeError(f"agent must have act(), act_batch() or be callable; got {type(agent).__name__}")
    return [episode.record for episode in episodes]


def _shared_resources(tasks: list[Task], env_factory: Callable[[str], Env]) -> contextlib.ExitStack:
    """With ``make``: checks every task's env id (an unknown id fails before any episode runs) and holds what each
    env class shares in a process (:meth:`rlvr_gym.Env.hold_shared_resources`: the web family's Chromium) until
    the returned stack closes. Another factory (an env pool) owns its envs' resources: nothing is held.

    Raises:
        rlvr_gym.UnknownEnvError: when a task names an env id that is not registered.
    """
    with contextlib.ExitStack() as held:  # closes what it already holds when an id fails
        if env_factory is make:
            for env_id in sorted({t.env_id for t in tasks}):
                held.enter_context(spec(env_id).hold_shared_resources())
        return held.pop_all()


def _run_single(agent: Any, episode: _Episode, env_factory: Callable[[str], Env], episodes: list[_Episode]) -> None:
    act = agent.act if isinstance(agent, Agent) else agent
    episode.start(env_factory)
    if episode.done:
        return
    try:
        if hasattr(agent, "reset"):
            agent.reset(episode.task)
        while not episode.done:
            action = act(episode.observation, episode.info)
            episode.step(action)
    except Exception as error:  # noqa: BLE001 - agent errors are recorded per episode
        _log_agent_error(error, episodes)
        episode.crash(AGENT_ERROR, error, "agent")


def _run_batched(
    agent: BatchAgent, episodes: list[_Episode], env_factory: Callable[[str], Env], num_threads: int,
    max_parallel: int, bar: Any,
) -> None:
    pending = collections.deque(episodes)
    live: list[_Episode] = []
    with ThreadPoolExecutor(max_workers=num_threads) if num_threads else contextlib.nullcontext() as pool:
        run_all = pool.map if pool is not None else map
        while pending or live:
            starting = [pending.popleft() for _ in range(min(max_parallel - len(live), len(pending)))]
            list(run_all(lambda e: e.start(env_factory), starting))
            live.extend(starting)
            live = _finish_done(agent, live, bar)
            if not live:
                continue
            try:
                actions = agent.act_batch([e.key for e in live], [e.observation for e in live], [e.info for e in live])
                if len(actions) != len(live):
                    raise ValueError(f"act_batch returned {len(actions)} actions for {len(live)} episodes")
            except Exception as error:  # noqa: BLE001
                _log_agent_error(error, episodes)
                crash = functools.partial(_Episode.crash, kind=AGENT_ERROR, error=error, where="agent")
                list(run_all(crash, live))
            else:
                list(run_all(lambda pair: pair[0].step(pair[1]), zip(live, actions)))
            live = _finish_done(agent, live, bar)


def _finish_done(agent: BatchAgent, live: list[_Episode], bar: Any) -> list[_Episode]:
    """Tells the agent which episodes ended and returns those still running."""
    ended = [e.key for e in live if e.done]
    if ended:
        if hasattr(agent, "end_episodes"):
            agent.end_episodes(ended)
        bar.update(len(ended))
    return [e for e in live if not e.done]


def _log_agent_error(error: BaseException, episodes: Sequence[_Episode]) -> None:
    """Logs the traceback of the first agent error of a run; later ones are only recorded."""
    if not any(e.record.failure == AGENT_ERROR for e in episodes):
        logger.error("the agent raised; its episodes are recorded as %r failures", AGENT_ERROR, exc_info=error)


def _progress_bar(total: int, enabled: bool) -> Any:
    from rlvr_gym.tracking import progress_bar

    return progress_bar(total, desc="episodes", unit="ep", enabled=enabled, leave=False)
