"""Rollout workers on Ray: N actors sample a step's episodes, each with a policy replica and its own envs.

:class:`RolloutWorkers` has the sampler interface (``sample_batch(tasks, step) -> RolloutBatch``). It shards the
step's tasks over the workers in contiguous blocks of whole tasks, so whole groups (:func:`shard_bounds`: sizes
differ by at most one, the first workers take the extra tasks), each worker runs the recipe's own sampler on its
block (flat or tree, built by :func:`rlvr_gym_agents.train.build_sampler`) and the shards are put back together in
task order, so the batch does not depend on which worker finished first. Each worker seeds its sampling generator from
``(seed, step, worker index)`` before every step: the same recipe and worker count give the same batch.

Weights: :meth:`RolloutWorkers.sync_weights` puts the trainer's weights (Hugging Face names, LoRA merged) into
Ray's object store once (``ray.put``) and every worker copies them into its replica, with the version they belong
to (the RL step whose update produced them; 0 before RL). Every trajectory records that version
(``Trajectory.policy_version``). The replica is a :class:`~rlvr_gym_agents.policy.TransformersPolicy` on the CPU;
a replica with a ``sync_weights(named_tensors)`` method (the interface of
:class:`~rlvr_gym_agents.policy.vllm.VLLMPolicy`) is loaded through it instead, which is where a vLLM engine on a
GPU would plug in (not built here).

Async mode (:class:`AsyncRollouts`, ``cluster.async``): ``sample_batch(tasks, step)`` returns the batch submitted
earlier for ``step`` and submits the next ``max_staleness`` steps' tasks at once (``draw_tasks`` is a pure function
of (seed, step)), so the workers sample step t+1 while the trainer updates on step t; weight broadcasts do not wait
for the workers. Ray runs one actor's calls in the order they were sent, so the batch of step t+k is sampled with
the weights of version t-1 or newer: its staleness is at most k. Trajectories older than ``max_staleness`` versions
are dropped anyway (counted in the step log as ``async/stale_dropped``); the PPO ratio and the TIS/MIS correction
use the behaviour policy's log-probs, which every trajectory carries. A resumed run starts with nothing in flight:
its first step is sampled with the checkpoint's weights (staleness 0), no step is lost or repeated.

Faults: a worker whose process dies (SIGKILL, out of memory) during a step is replaced by a fresh actor that loads
the latest weights; the episodes of its shard become typed ``ENV_CRASH`` failures (``details["rollout_worker"]``)
in the trajectories (trees: each task a failed root with ``num_leaves`` failed leaves) and the step completes.
A hung worker (an env step that never returns, a deadlock) is found by ``cluster.rollout_timeout_s``: a shard that
has not come back that many seconds after the trainer began waiting for its step is given up, its worker killed
(``ray.kill``) and replaced the same way, and its episodes become ``TIMEOUT`` failures (the kind the env pool gives a
hung env worker, :mod:`rlvr_gym.workers`; ``details`` has ``rollout_worker`` and ``timeout_s``). In async mode the
clock starts when the trainer asks for the step, not when it was submitted (a shard queued behind the previous
step's is not counted as late).

Ray is started or joined through :func:`rlvr_gym.workers.ensure_ray` (``cluster.ray_address``); the workers end,
and a Ray instance this object started shuts down, on :meth:`RolloutWorkers.close`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Self

import torch

from rlvr_gym import Env, Failure, FailureKind, Task
from rlvr_gym_agents.config import TrainConfig
from rlvr_gym_agents.rollout.tree import RolloutTree, tree_metrics
from rlvr_gym_agents.rollout.tree_sampler import TreeSampler, tree_log_keys
from rlvr_gym_agents.rollout.types import RolloutBatch, Trajectory


def shard_bounds(num_tasks: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` task ranges, one per worker, sizes differing by at most one (earlier workers get
    the extra tasks; a worker may get none when there are fewer tasks than workers).

    Raises:
        ValueError: ``num_workers < 1`` or ``num_tasks < 0``.
    """
    if num_workers < 1 or num_tasks < 0:
        raise ValueError(f"need num_workers >= 1 and num_tasks >= 0, got {num_workers} and {num_tasks}")
    base, extra = divmod(num_tasks, num_workers)
    bounds, start = [], 0
    for index in range(num_workers):
        end = start + base + (index < extra)
        bounds.append((start, end))
        start = end
    return bounds


def sampling_seed(seed: int, step: int, worker: int) -> int:
    """The seed of a worker's sampling generator for one step (a pure function, so reruns and resumes agree)."""
    return (seed * 1_000_003 + step) * 1_009 + worker


class RolloutWorker:
    """The body of one rollout actor: a policy replica, its envs and the recipe's sampler.

    Args:
        config: the recipe (its ``rollout``, ``env``, ``train.group_size``, ``model`` and ``seed`` are read).
        model_dir: the run's model directory (the architecture and tokenizer; weights come with
            :meth:`load_weights`).
        index: the worker's place in the group (seeds its sampling).
        num_threads: torch CPU threads of the replica (its share of the machine's cores).
    """

    def __init__(self, config: TrainConfig, model_dir: str, index: int, num_threads: int) -> None:
        from rlvr_gym_agents.policy import TransformersPolicy
        from rlvr_gym_agents.policy.chat import ChatFormat
        from rlvr_gym_agents.train import build_sampler, env_factory_of, step_executor_of
        from rlvr_gym_agents.update.precision import parameter_dtype

        torch.set_num_threads(max(1, num_threads))
        self.config, self.index, self.version = config, index, -1
        self.policy = TransformersPolicy.from_pretrained(
            model_dir, device="cpu", dtype=parameter_dtype(config.train.precision, config.model.dtype),
            max_context_tokens=config.model.max_context_tokens, seed=config.seed)
        chat = ChatFormat.for_policy(self.policy, config.env.system_prompt)
        self._stack = contextlib.ExitStack()  # the envs' pool and stepping threads, closed by close()
        env_factory: Callable[..., Env] = self._stack.enter_context(env_factory_of(config))
        self.sampler = build_sampler(config, self.policy, chat, env_factory,
                                     self._stack.enter_context(step_executor_of(config)))
        if isinstance(self.sampler, TreeSampler):  # branching draws: distinct per worker, same on every rerun
            self.sampler.config = dataclasses.replace(self.sampler.config, seed=sampling_seed(config.seed, 0, index))

    def pid(self) -> int:
        """The worker's process id."""
        return os.getpid()

    def load_weights(self, version: int, weights: dict[str, torch.Tensor] | None) -> int:
        """Loads ``weights`` (Hugging Face parameter names; None: unchanged) as policy ``version``; returns it.

        Raises:
            KeyError: a name the replica does not have (the trainer's model differs from ``model_dir``'s).
        """
        if weights is not None:
            if hasattr(self.policy, "sync_weights"):  # an engine with its own loading (vLLM)
                self.policy.sync_weights(weights.items())
            else:
                _copy_into(self.policy.model, weights)
        self.version = version
        return version

    def sample(self, tasks: list[Task], step: int, group_offset: int) -> RolloutBatch:
        """The recipe's sampler on ``tasks`` for RL ``step``; groups numbered from ``group_offset``, every
        trajectory stamped with the loaded policy version."""
        self.policy.generator.manual_seed(sampling_seed(self.config.seed, step, self.index))
        batch = self.sampler.sample_batch(tasks, step)
        for trajectory in batch.trajectories:
            trajectory.group += group_offset
        for tree in batch.trees or []:
            tree.group += group_offset
        batch.stamp_policy_version(self.version)
        return batch

    def close(self) -> None:
        """Closes the envs (and an env pool this worker started)."""
        self._stack.close()


def _copy_into(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    parameters = dict(model.named_parameters())
    unknown = sorted(set(weights) - set(parameters))
    if unknown:
        raise KeyError(f"weights {unknown[:3]} are not parameters of the rollout replica (it has e.g. "
                       f"{sorted(parameters)[:3]}); the trainer and the workers must load the same model")
    with torch.no_grad():
        for name, tensor in weights.items():
            parameters[name].copy_(tensor)


@dataclasses.dataclass
class Pending:
    """A step's shards in flight: ``(worker index, actor, tasks, group offset, Ray object ref)`` each."""

    step: int
    task_ids: list[str]
    shards: list[tuple[int, Any, list[Task], int, Any]]


class RolloutWorkers:
    """N rollout actors behind the sampler interface; see the module docstring.

    Args:
        config: the recipe; ``cluster.rollout_workers`` actors are started, Ray per ``cluster.ray_address``.
        model_dir: the run's model directory (every worker loads its architecture and tokenizer from it).
        num_threads: torch threads per worker (default: ``cluster.worker_threads``, else this machine's cores
            divided among the workers, at least 1).
        worker_num_cpus: CPUs each actor reserves in Ray's scheduler, fractions allowed (default: ``num_threads``
            on a cluster; on a local Ray, half of this machine's CPUs shared among the workers, so that any
            number of workers and the env pool's workers can be placed).

    Raises:
        ValueError: ``cluster.rollout_workers < 1``.
    """

    def __init__(self, config: TrainConfig, model_dir: str, num_threads: int | None = None,
                 worker_num_cpus: float | None = None) -> None:
        from rlvr_gym.workers import ensure_ray

        count = config.cluster.rollout_workers
        if count < 1:
            raise ValueError(f"RolloutWorkers needs cluster.rollout_workers >= 1, got {count}")
        self.config, self.model_dir = config, model_dir
        self.num_threads = (num_threads or config.cluster.worker_threads
                            or max(1, (os.cpu_count() or 1) // count))
        local_share = (os.cpu_count() or 1) / (2 * count)
        default_cpus = self.num_threads if config.cluster.ray_address else min(self.num_threads, local_share)
        self.worker_num_cpus = default_cpus if worker_num_cpus is None else worker_num_cpus
        self._started_ray = ensure_ray(config.cluster.ray_address, num_cpus=os.cpu_count())
        import ray

        self._ray = ray
        self._actors = [self._start(index) for index in range(count)]
        self._weights: Any = None  # the object ref of the latest weights (a restarted worker loads them)
        self.version = -1
        self._loads: list[Any] = []  # load_weights refs not waited for (async mode)
        self._pids: dict[int, int] = {}
        self.restarts = 0
        self.timeout_s = config.cluster.rollout_timeout_s

    # -- the sampler interface ------------------------------------------------------------------------------
    def sample_batch(self, tasks: Sequence[Task], step: int) -> RolloutBatch:
        """The step's episodes from all workers, in task order (see the module docstring)."""
        return self.collect(self.submit(tasks, step))

    def submit(self, tasks: Sequence[Task], step: int) -> Pending:
        """Sends each worker its shard of ``tasks`` for ``step``; :meth:`collect` gathers them."""
        shards = []
        for index, (start, end) in enumerate(shard_bounds(len(tasks), len(self._actors))):
            if end > start:
                block, actor = list(tasks[start:end]), self._actors[index]
                shards.append((index, actor, block, start, actor.sample.remote(block, step, start)))
        return Pending(step, [t.id for t in tasks], shards)

    def collect(self, pending: Pending) -> RolloutBatch:
        """Waits for a submitted step, at most :attr:`timeout_s` (``cluster.rollout_timeout_s``) from now. A shard
        whose worker died during it, or that did not come back in time, becomes failed episodes (the worker is killed
        and restarted); one sent to a worker that had already died and been replaced is sampled again by the new one
        (with a fresh timeout)."""
        deadline = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        batches = [self._shard(pending.step, index, actor, block, offset, ref, deadline)
                   for index, actor, block, offset, ref in pending.shards]
        return merge_batches(batches, self.config.rollout.sampler == "tree")

    def _shard(self, step: int, index: int, actor: Any, block: list[Task], offset: int, ref: Any,
               deadline: float | None) -> RolloutBatch:
        """One worker's shard of a step, or its episodes as failures when the worker died or hung."""
        lost = (self._ray.exceptions.RayActorError, self._ray.exceptions.WorkerCrashedError)
        try:
            return self._ray.get(ref, timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except self._ray.exceptions.GetTimeoutError:
            if actor is not self._actors[index]:  # hung on a worker already replaced: end it, keep its successor
                self._ray.kill(actor, no_restart=True)
            else:
                self._restart(index)  # kills the hung actor first
            return self._lost_shard(block, offset, index, FailureKind.TIMEOUT,
                                    f"did not return its shard within {self.timeout_s:g} s (hung)",
                                    {"timeout_s": self.timeout_s})
        except lost as error:
            if actor is self._actors[index]:
                self._restart(index)
                message = str(error).splitlines()[0][:300] if str(error) else type(error).__name__
                return self._lost_shard(block, offset, index, FailureKind.ENV_CRASH, "died during the step",
                                        {"error": message})
        retry = self._actors[index]  # the shard went to a worker replaced since: its successor samples it
        fresh = None if self.timeout_s is None else time.monotonic() + self.timeout_s
        return self._shard(step, index, retry, block, offset, retry.sample.remote(block, step, offset), fresh)

    def cancel(self, pending: Pending) -> None:
        """Cancels a submitted step: shards still queued never run (a running one finishes; Ray does not interrupt
        an actor's call)."""
        for *_, ref in pending.shards:
            with contextlib.suppress(Exception):  # already done, or its worker is gone
                self._ray.cancel(ref)

    # -- weights --------------------------------------------------------------------------------------------
    def sync_weights(self, named_parameters: Iterable[tuple[str, torch.Tensor]] | None, version: int,
                     wait: bool = True) -> None:
        """Broadcasts the trainer's weights as ``version`` (``ray.put`` once, every worker loads them; None: the
        weights did not change, only the version moves). ``wait=False`` returns at once (async mode); the loads
        then run after the samples already sent, in order."""
        if named_parameters is not None:
            self._weights = self._ray.put({name: t.detach().to("cpu", copy=True) for name, t in named_parameters})
        self.version = version
        refs = [actor.load_weights.remote(version, self._weights if named_parameters is not None else None)
                for actor in self._actors]
        self._loads = [ref for ref in self._loads if not _done(self._ray, ref)] + refs
        if wait:
            self._wait_loads()

    def _wait_loads(self) -> None:
        for ref in self._loads:
            with contextlib.suppress(self._ray.exceptions.RayActorError):  # a dead worker: restarted at collect
                self._ray.get(ref)
        self._loads = []

    # -- life cycle -----------------------------------------------------------------------------------------
    def worker_pids(self) -> list[int]:
        """The process id of every worker (asked once per actor: a busy worker answers only when its step is
        done, so ask before submitting one)."""
        missing = [i for i in range(len(self._actors)) if i not in self._pids]
        for index, pid in zip(missing, self._ray.get([self._actors[i].pid.remote() for i in missing])):
            self._pids[index] = int(pid)
        return [self._pids[i] for i in range(len(self._actors))]

    def kill_worker(self, index: int) -> None:
        """SIGKILLs worker ``index``'s process (fault tests and drills); the collect of its step restarts it."""
        os.kill(self.worker_pids()[index], signal.SIGKILL)

    def close(self) -> None:
        """Ends every worker (closing its envs), then Ray if this object started it. Safe to call twice."""
        for actor in self._actors:
            with contextlib.suppress(Exception):  # a dead worker: nothing to close
                self._ray.get(actor.close.remote(), timeout=30)
            with contextlib.suppress(Exception):
                self._ray.kill(actor, no_restart=True)
        self._actors = []
        if self._started_ray:
            self._ray.shutdown()
            self._started_ray = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, index: int) -> Any:
        actor_class = self._ray.remote(RolloutWorker)
        return actor_class.options(num_cpus=self.worker_num_cpus, max_restarts=0).remote(
            self.config, self.model_dir, index, self.num_threads)

    def _restart(self, index: int) -> None:
        with contextlib.suppress(Exception):  # already gone
            self._ray.kill(self._actors[index], no_restart=True)
        self._actors[index] = self._start(index)
        self._pids.pop(index, None)
        self.restarts += 1
        if self._weights is not None:
            self._ray.get(self._actors[index].load_weights.remote(self.version, self._weights))

    def _lost_shard(self, tasks: list[Task], offset: int, index: int, kind: FailureKind, what: str,
                    details: dict[str, Any]) -> RolloutBatch:
        """The record of a shard whose worker died (``ENV_CRASH``) or hung (``TIMEOUT``) and was restarted: every
        episode truncated with one failure of ``kind`` saying ``what`` happened (``details`` plus the worker)."""
        failure = Failure(kind, f"rollout worker {index} {what}; it was restarted",
                          {"rollout_worker": index, **details})
        return failed_batch(tasks, offset, self.config.train.group_size, self.config.rollout.sampler == "tree",
                            failure, self.version)


def failed_batch(tasks: Sequence[Task], group_offset: int, group_size: int, tree: bool, failure: Failure,
                 version: int) -> RolloutBatch:
    """``group_size`` empty, truncated episodes per task carrying ``failure`` (trees: a failed root and
    ``group_size`` failed leaves each), grouped from ``group_offset`` and stamped with policy ``version``."""
    if tree:
        trees = [RolloutTree(task, group=group_offset + i) for i, task in enumerate(tasks)]
        for failed in trees:
            failed.fail_all(group_size, failure)
        batch = RolloutBatch([t for failed in trees for t in failed.trajectories()], trees,
                             tree_log_keys(tree_metrics(trees, [0] * len(trees), [0] * len(trees))))
    else:
        batch = RolloutBatch([Trajectory(task.id, task.env_id, truncated=True, failures=[failure],
                                         group=group_offset + i) for i, task in enumerate(tasks)
                              for _ in range(group_size)])
    batch.stamp_policy_version(version)
    return batch


def merge_batches(batches: Sequence[RolloutBatch], tree: bool) -> RolloutBatch:
    """The shards' batches as one, in the given (task) order; tree metrics recomputed over all trees."""
    trajectories = [t for batch in batches for t in batch.trajectories]
    tokens = sum(batch.tokens_generated for batch in batches)
    if not tree:
        return RolloutBatch(trajectories, tokens_generated=tokens)
    trees = [t for batch in batches for t in batch.trees or []]
    globals_, branches = ([int(b.metrics.get(f"tree/{key}", 0)) for b in batches] for key in ("global_samples",
                                                                                                 "branches"))
    metrics = tree_log_keys(tree_metrics(trees, globals_, branches))
    return RolloutBatch(trajectories, trees, metrics, tokens)


def _done(ray: Any, ref: Any) -> bool:
    ready, _ = ray.wait([ref], timeout=0)
    return bool(ready)


class AsyncRollouts:
    """Async training's sampler: the workers sample the next steps while the trainer updates (module docstring).

    Args:
        workers: the rollout workers.
        draw_tasks: the tasks of an RL step, a pure function of the step (``rlvr_gym_agents.train.draw_tasks``).
        last_step: the run's last RL step (nothing is submitted beyond it).
        max_staleness: k, the most versions a trajectory may lag the learner by; also how many steps ahead are
            submitted (k = 0 samples each step when it is asked for: synchronous).
    """

    def __init__(self, workers: RolloutWorkers, draw_tasks: Callable[[int], list[Task]], last_step: int,
                 max_staleness: int) -> None:
        self.workers, self.draw_tasks = workers, draw_tasks
        self.last_step, self.max_staleness = last_step, max_staleness
        self._pending: dict[int, Pending] = {}

    def sample_batch(self, tasks: Sequence[Task], step: int) -> RolloutBatch:
        """The batch of ``step`` (submitted earlier, or now when nothing is in flight for these tasks), after
        submitting the steps up to ``step + max_staleness``; stale trajectories dropped."""
        pending = self._pending.pop(step, None)
        if pending is None or pending.task_ids != [t.id for t in tasks]:
            pending = self.workers.submit(tasks, step)
        for ahead in range(step + 1, min(step + self.max_staleness, self.last_step) + 1):
            if ahead not in self._pending:
                self._pending[ahead] = self.workers.submit(self.draw_tasks(ahead), ahead)
        self._pending = {s: p for s, p in self._pending.items() if s > step}
        batch = self.workers.collect(pending)
        return drop_stale(batch, learner_version=step - 1, max_staleness=self.max_staleness)

    def sync_weights(self, named_parameters: Iterable[tuple[str, torch.Tensor]] | None, version: int) -> None:
        """Broadcasts the weights without waiting for the workers when samples are in flight (the workers load them
        after those); with nothing in flight (the run's first broadcast) it waits, so starting the workers is not
        counted in the first step."""
        self.workers.sync_weights(named_parameters, version, wait=not self._pending)

    def close(self) -> None:
        """Cancels the steps in flight (a run stopped early by a time cap has some) and closes the workers."""
        for pending in self._pending.values():
            self.workers.cancel(pending)
        self._pending.clear()
        self.workers.close()


def drop_stale(batch: RolloutBatch, learner_version: int, max_staleness: int) -> RolloutBatch:
    """``batch`` without the groups holding a trajectory more than ``max_staleness`` versions older than
    ``learner_version``, the remaining groups renumbered 0..G'-1 in order; adds ``async/stale_dropped``
    (trajectories dropped) and ``async/staleness_mean`` (versions, over the batch before dropping) to its metrics.

    Whole groups go: group advantages need every member. A trajectory without a version counts as fresh.
    """
    staleness = [learner_version - (t.policy_version if t.policy_version is not None else learner_version)
                 for t in batch.trajectories]
    stale_groups = {t.group for t, lag in zip(batch.trajectories, staleness) if lag > max_staleness}
    kept = [t for t in batch.trajectories if t.group not in stale_groups]
    renumber = {group: new for new, group in enumerate(dict.fromkeys(t.group for t in kept))}
    for trajectory in kept:
        trajectory.group = renumber[trajectory.group]
    trees = None
    if batch.trees is not None:
        trees = [tree for tree in batch.trees if tree.group not in stale_groups]
        for tree in trees:
            tree.group = renumber.get(tree.group, tree.group)
    metrics = {**batch.metrics, "async/stale_dropped": len(batch.trajectories) - len(kept),
               "async/staleness_mean": sum(staleness) / max(len(staleness), 1)}
    tokens = sum(t.num_generated_tokens for t in kept) if stale_groups else batch.tokens_generated
    return RolloutBatch(kept, trees, metrics, tokens)


def remote_sampler(config: TrainConfig, model_dir: str,
                   draw_tasks: Callable[[int], list[Task]]) -> RolloutWorkers | AsyncRollouts:
    """The sampler of ``cluster.rollout_workers > 0``: the workers, wrapped in :class:`AsyncRollouts` with
    ``cluster.async`` (``draw_tasks(step)`` gives the tasks of steps submitted ahead). Close it when done."""
    workers = RolloutWorkers(config, model_dir)
    if not config.cluster.asynchronous:
        return workers
    return AsyncRollouts(workers, draw_tasks, config.train.num_steps, config.cluster.max_staleness)
