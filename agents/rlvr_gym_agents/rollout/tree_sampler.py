"""Entropy-balanced tree rollouts over turns (ARPO + AEPO), with forked env states and a shared KV cache.

Per task the sampler grows a :class:`~rlvr_gym_agents.rollout.tree.RolloutTree` with exactly ``num_leaves`` leaves:

1. Start ``m`` global samples from the prompt (``m = n // 2`` as ARPO's 1:1 split, or AEPO pre-monitoring:
   the first global sample runs alone, its entropies give ``m``, and it is kept as a leaf instead of being
   thrown away as AEPO's pilot is).
2. All paths of all tasks advance in lock-step, one turn per round, in one batched ``generate`` call.
3. At a turn boundary after an observation, the path's next turn is generated first; its first ``k`` token
   entropies give H_t, and the path branches *at that boundary* with probability
   clip((alpha + w (H_t - H_init)) (1 - lambda l), 0, 1) (:mod:`rlvr_gym_agents.rollout.branching`). The
   child gets ``env.fork()`` of the state before the parent's step and the parent's KV cache rewound to the
   boundary, so the shared prefix is never generated or prefilled again. The child generates its first turn in
   the next round. With ``branch.at_boundary`` the decision comes before the turn, from the entropy of its first
   token's distribution (the transformers engine's ``fork`` hook), and the child decodes in the same round from a
   copy of the parent's row. With ``branch.pace`` the base probability is at least the rate that spends the task's
   budget over the turns its running paths have left.
4. When a task has no running path and fewer than ``n`` paths, the rest of the budget (or its
   ``fallback_share``, in rounds) branches at the task's highest-entropy boundaries (TreeRL EPTree-style), or
   with ``fallback="surprisal"`` before its least likely actions; the env is rebuilt by replaying the actions
   and checked against the recorded observation; its KV row is the finished path's row that generated from that
   boundary, rewound to it (rows of finished paths are kept until the call ends), so it feeds only the boundary's
   observation instead of its whole context. With ``fallback="prompt"`` or when that is impossible, half of it
   (at least one) restarts from the prompt (ARPO's refill).

Envs with ``supports_fork = False`` branch only at the root: all ``n`` leaves are global samples.

The KV cache of :class:`~rlvr_gym_agents.policy.TransformersPolicy` is reused across turns and branches
(a child's copy of its parent's row is rewound by masking the slots added in the round as holes, and the holes
are compacted away each round; rows joining later are cut to their boundary and merged with hole padding); with
``reuse_kv_cache=False`` (or a policy without :class:`KVState`) every call passes the full context.
"""

from __future__ import annotations

import collections
import dataclasses
import math
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np

import rlvr_gym
from rlvr_gym import Env, Failure, Task
from rlvr_gym_agents.policy import Generation, Policy, SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.policy.kv import RewindInfo
from rlvr_gym_agents.rollout.branching import (
    FALLBACK_SCORES,
    BranchConfig,
    BranchState,
    fallback_branch_points,
    global_sample_count,
    paced_rate,
    segment_entropy,
)
from rlvr_gym_agents.rollout.episode import PlayedTurn, PolicyEpisode, play_turns
from rlvr_gym_agents.rollout.tree import RolloutTree, TreeRollout, tree_metrics
from rlvr_gym_agents.rollout.tree_kv import KVRows
from rlvr_gym_agents.rollout.types import RolloutBatch


@dataclasses.dataclass
class TreeSamplerConfig:
    """Tree rollout settings (a recipe's ``rollout.tree`` section)."""

    num_leaves: int = 8
    """n: leaves (episodes) per task."""
    global_samples: int | None = None
    """m: samples started from the prompt; None = n // 2 (ARPO's 1:1 split). Ignored with pre_monitoring."""
    pre_monitoring: bool = False
    """AEPO entropy pre-monitoring: choose m from the first global sample's entropies."""
    pre_monitoring_beta: float = 0.5
    """beta of the AEPO budget split (per nat)."""
    branch: BranchConfig = dataclasses.field(default_factory=BranchConfig)
    """Branch probability parameters."""
    reuse_kv_cache: bool = True
    """Keep each path's KV cache across turns and copy it into children (TransformersPolicy only)."""
    max_turns: int | None = None
    """Overrides the env's turn limit when given."""
    seed: int = 0
    """Seeds the branching draws (the policy has its own sampling generator)."""
    fallback: str = "entropy"
    """When a task's paths all ended under budget: "entropy" branches at its highest-dH boundaries (env
    rebuilt by replay, EPTree-style); "surprisal" at the boundaries before its least likely actions;
    "prompt" restarts from the prompt (ARPO's refill)."""
    fallback_share: float = 1.0
    """Share of a finished task's remaining budget started per fallback round, at least one leaf: 1.0 starts
    it all at the current tree's best boundaries; 0.5 starts half, then ranks again with the new paths."""

    def __post_init__(self) -> None:
        if self.num_leaves < 1:
            raise ValueError(f"num_leaves must be >= 1, got {self.num_leaves}")
        if self.fallback not in (*FALLBACK_SCORES, "prompt"):
            raise ValueError(f"fallback must be 'entropy', 'surprisal' or 'prompt', got {self.fallback!r}")
        if not 0.0 < self.fallback_share <= 1.0:
            raise ValueError(f"fallback_share must be in (0, 1], got {self.fallback_share}")
        if self.global_samples is not None and not 1 <= self.global_samples <= self.num_leaves:
            raise ValueError(f"global_samples must be in [1, num_leaves={self.num_leaves}], got {self.global_samples}")


@dataclasses.dataclass
class _Path:
    """A running episode: where it sits in its tree and what to feed the policy next."""

    task_index: int
    path_id: int
    node: int
    episode: PolicyEpisode
    fresh: bool = True
    branched: bool = False
    done: bool = False


@dataclasses.dataclass
class _TaskBudget:
    target_globals: int | None
    started: int = 0
    globals_started: int = 0
    pilot: int | None = None
    forkable: bool = True


class TreeSampler:
    """Samples rollout trees; see the module docstring.

    Args:
        policy: the policy (``TransformersPolicy`` for KV reuse; any :class:`Policy` otherwise).
        chat: the chat format (token-in/token-out).
        config: tree settings.
        env_factory: builds an env from an env id (default :func:`rlvr_gym.make`).
        sampling: the sampling of :meth:`sample_batch` (``sample`` takes its own).
        step_executor: steps each round's envs concurrently (None: one after another); the trees are the same.
    """

    def __init__(
        self,
        policy: Policy,
        chat: ChatFormat,
        config: TreeSamplerConfig | None = None,
        env_factory: Callable[..., Env] = rlvr_gym.make,
        sampling: SamplingParams | None = None,
        step_executor: Executor | None = None,
    ) -> None:
        self.policy, self.chat, self.sampling = policy, chat, sampling or SamplingParams()
        self.step_executor = step_executor
        self.config = config or TreeSamplerConfig()
        self.env_factory = env_factory
        # other engines (vLLM) get full contexts and reuse shared prefixes with their own prefix cache
        self.reuse_kv_cache = self.config.reuse_kv_cache and isinstance(policy, TransformersPolicy)
        self.num_calls = 0  # seeds each call's branching draws differently, deterministically

    def sample(self, tasks: Sequence[Task], sampling: SamplingParams) -> TreeRollout:
        """Grows one tree per task (each with exactly ``num_leaves`` leaves) and returns them with metrics."""
        run = _Run(self, tasks, sampling, call_index=self.num_calls)
        self.num_calls += 1
        run.loop()
        return TreeRollout(run.trees, tree_metrics(run.trees, run.num_globals, run.num_branches))

    def sample_batch(self, tasks: Sequence[Task], step: int) -> RolloutBatch:
        """One tree per task as a :class:`RolloutBatch` of its leaves (tree order, then leaf order); the branching
        draws are seeded by ``(config.seed, step)``, so a resumed run grows the same trees."""
        self.num_calls = step
        rollout = self.sample(tasks, self.sampling)
        metrics = tree_log_keys(rollout.metrics)
        trajectories = [t for tree in rollout.trees for t in tree.trajectories()]
        return RolloutBatch(trajectories, rollout.trees, metrics, int(rollout.metrics["tokens_generated"]))


class _Run:
    """The state of one sampling call (created per call: no branching state leaks across calls)."""

    def __init__(self, sampler: TreeSampler, tasks: Sequence[Task], sampling: SamplingParams, call_index: int) -> None:
        self.sampler, self.config, self.sampling = sampler, sampler.config, sampling
        self.rng = np.random.default_rng([self.config.seed, call_index])
        self.branch_state = BranchState()
        self.trees = [RolloutTree(task, group=i) for i, task in enumerate(tasks)]
        self.budgets = [self._budget() for _ in tasks]
        self.paths: list[_Path] = []
        self.kv = KVRows(sampler.policy, sampling, sampler.reuse_kv_cache, self._context_ids, self._keeps_row,
                         self._fork_capacity)
        self.next_path_id = 0
        self.num_globals = [0] * len(tasks)
        self.num_branches = [0] * len(tasks)
        self.probe_envs: dict[int, PolicyEpisode] = {}  # env reset to build each root, reused by a sample
        self.pilot_entropies: dict[int, list[float]] = {}  # pre-monitoring: turn entropies of each pilot
        # (task, node) -> [(path id, its rewind info)]: the KV state of each warm path that generated from that node,
        # so a fallback branch there starts warm from such a path's kept row instead of re-feeding its context
        self.boundaries: dict[tuple[int, int], list[tuple[int, RewindInfo]]] = {}
        self.boundary_paths: set[int] = set()  # the paths some boundary names: the only rows worth keeping

    def _budget(self) -> _TaskBudget:
        cfg = self.config
        if cfg.pre_monitoring:
            return _TaskBudget(target_globals=None)
        return _TaskBudget(target_globals=cfg.global_samples or max(1, cfg.num_leaves // 2))

    # -- the loop -------------------------------------------------------------------------------------------

    def loop(self) -> None:
        for i, tree in enumerate(self.trees):
            prompt = self._reset_env_probe(i)
            if prompt is not None:
                tree.add_node(-1, observation_ids=prompt)
        while True:
            self._start_globals()
            running = [p for p in self.paths if not p.done]
            if not running:
                break
            self._round(running)
        for path in self.paths:
            self._close(path)
        self.kv.finished.clear()  # the kept rows go with the call (the run is garbage once sample() returns)
        self.boundaries.clear()

    def _fork_capacity(self) -> int:
        """The most children the next round can fork in its generate call: per task that can branch, the leaves not
        started, at most ``max_children_per_boundary`` per running path (0 when children are not forked there)."""
        cfg = self.config
        if not (cfg.branch.at_boundary and self.kv.reuse):
            return 0
        running = collections.Counter(p.task_index for p in self.paths if not p.done)
        return sum(min(cfg.num_leaves - budget.started, running[i] * cfg.branch.max_children_per_boundary)
                   for i, budget in enumerate(self.budgets) if budget.forkable and budget.started < cfg.num_leaves)

    def _keeps_row(self, path: _Path) -> bool:
        """Whether a finished path's KV row may still serve a fallback branch: a boundary names the path and its
        task has budget left."""
        return path.path_id in self.boundary_paths and self.budgets[path.task_index].started < self.config.num_leaves

    def _reset_env_probe(self, task_index: int) -> list[int] | None:
        """Builds the root: resets one env to get the prompt (kept as the first global sample's env)."""
        episode, failure = self._new_episode(self.trees[task_index].task)
        if episode is None:
            # no env: every leaf is an empty truncated episode carrying the crash
            self.trees[task_index].fail_all(self.config.num_leaves, failure)
            self.budgets[task_index].started = self.config.num_leaves
            return None
        self.budgets[task_index].forkable = episode.env.supports_fork
        self.probe_envs[task_index] = episode
        return episode.prompt_ids

    def _new_episode(self, task: Task) -> tuple[PolicyEpisode | None, Failure | None]:
        return PolicyEpisode.start(task, self.sampler.chat, self.sampler.env_factory, self.config.max_turns)

    def _start_globals(self) -> None:
        n = self.config.num_leaves
        for i, budget in enumerate(self.budgets):
            if budget.started >= n:
                continue
            running = any(not p.done for p in self.paths if p.task_index == i)
            if not budget.forkable:
                count = n - budget.started  # no branching possible: every leaf starts from the prompt
            elif budget.target_globals is None:  # pre-monitoring: the pilot runs alone first
                count = 0 if budget.pilot is not None else 1
            elif budget.globals_started < budget.target_globals:
                count = budget.target_globals - budget.globals_started
            elif not running:
                remaining = n - budget.started
                share = max(1, math.ceil(self.config.fallback_share * remaining))
                if self.config.fallback != "prompt" and self._start_fallbacks(i, share):
                    continue
                count = max(1, remaining // 2)
            else:
                count = 0
            for _ in range(min(count, n - budget.started)):
                self._start_global(i)
            if budget.started >= n:  # no more branches for this task: its kept rows are no use
                self.kv.finished.pop(i, None)

    def _start_fallbacks(self, task_index: int, count: int) -> bool:
        """Spends the rest of a finished task's budget on branches at its highest-entropy boundaries
        (:func:`~rlvr_gym_agents.rollout.branching.fallback_branch_points`). The env is rebuilt by replaying the
        path's actions from ``reset`` and checked against the recorded observation; returns False (refill from
        the prompt instead) when there is no candidate or the replay does not reproduce the state.
        """
        points = fallback_branch_points(self.trees[task_index], self.config.branch, self.config.fallback)
        if not points:
            return False
        for k in range(count):
            point = points[k % len(points)]
            if not self._start_replayed_branch(task_index, point.node, point.first_child, point.initial_entropy):
                return k > 0
        return True

    def _start_replayed_branch(self, task_index: int, node_index: int, next_node: int, h_init: float) -> bool:
        tree = self.trees[task_index]
        episode, _ = self._new_episode(tree.task)
        if episode is None:
            return False
        for n in tree.path(node_index)[1:]:
            turn = tree.nodes[n].turn
            assert turn is not None  # every non-root node on a path holds a turn
            if episode.env.step(turn.action).done:
                break
        recorded = tree.nodes[next_node].turn
        if episode.done or recorded is None or episode.env.observation != recorded.observation:
            episode.close()  # a crashed replay or a nondeterministic env: not the recorded state
            return False
        context = self._context_ids_of(task_index, node_index)
        episode.feed_ids, episode.context_length = context, len(context)
        path = _Path(task_index, self.next_path_id, node_index, episode, branched=True)
        self.next_path_id += 1
        candidates = self.boundaries.get((task_index, node_index), [])
        row = next((r for r in (self.kv.kept_row(task_index, *c) for c in candidates) if r is not None), None)
        if row is not None:  # the row of the path that generated from this node, rewound to it: feed the observation
            episode.feed_ids, path.fresh = list(tree.nodes[node_index].observation_ids), False
            self.kv.add_row(path.path_id, row)
        self.branch_state.initial_entropy[path.path_id] = h_init
        self.branch_state.consecutive[path.path_id] = 0
        self.budgets[task_index].started += 1
        self.num_branches[task_index] += 1
        self.paths.append(path)
        return True

    def _start_global(self, task_index: int) -> None:
        tree, budget = self.trees[task_index], self.budgets[task_index]
        failure = None
        episode = self.probe_envs.pop(task_index, None)
        if episode is None:
            episode, failure = self._new_episode(tree.task)
        budget.started += 1
        budget.globals_started += 1
        self.num_globals[task_index] += 1
        if episode is None:
            tree.add_node(0, done=True, truncated=True, failures=[failure])
            return
        path = _Path(task_index, self.next_path_id, 0, episode)
        if budget.target_globals is None and budget.pilot is None:
            budget.pilot = path.path_id
        self.next_path_id += 1
        self.paths.append(path)

    # -- one round: generate a turn for every running path ---------------------------------------------

    def _round(self, running: list[_Path]) -> None:
        running = [p for p in running if not self._overflows(p)]
        if not running:
            return
        children: list[tuple[_Path, int]] = []  # (child path, row in the round's KV state of its parent)
        if self.config.branch.at_boundary and self.kv.reuse:  # children join this round's generate call
            generated, generations = self.kv.generate(running, fork=self._maybe_branch)
        else:
            generated, generations = self.kv.generate(running)
            probe = self.config.branch.probe_tokens
            for row, (path, generation) in enumerate(zip(generated, generations, strict=True)):  # forks before it steps
                children += [(c, row) for c in self._maybe_branch(path, segment_entropy(generation.entropies, probe))]
        if self.kv.rewind is not None:
            for path in running:
                if not path.fresh:
                    self.boundaries.setdefault((path.task_index, path.node), []).append((path.path_id, self.kv.rewind))
                    self.boundary_paths.add(path.path_id)
        running = generated
        played = play_turns([p.episode for p in running], generations, self.sampler.chat, self.sampler.step_executor)
        for path, generation, turn in zip(running, generations, played, strict=True):
            self._advance(path, generation, turn)
        self.kv.rebuild(running, children)

    def _overflows(self, path: _Path) -> bool:
        """The context-window policy (:meth:`PolicyEpisode.overflow`): an overflow ends the path in a leaf."""
        failure = path.episode.overflow(self.sampling.max_new_tokens, self.sampler.policy.max_context_tokens)
        if failure is None:
            return False
        node = self.trees[path.task_index].add_node(
            path.node, done=True, truncated=True, failures=[failure], branched=path.branched
        )
        self._finish(path, node.index)
        return True

    def _context_ids(self, path: _Path) -> list[int]:
        return self._context_ids_of(path.task_index, path.node)

    def _context_ids_of(self, task_index: int, node: int) -> list[int]:
        tree = self.trees[task_index]
        ids: list[int] = []
        for n in tree.path(node):
            ids += tree.nodes[n].generated_ids + tree.nodes[n].observation_ids
        return ids

    def _maybe_branch(self, path: _Path, entropy: float) -> list[_Path]:
        """Records the turn's entropy (its probe's, or its first token's with ``branch.at_boundary``) and creates
        children at the path's current boundary if drawn."""
        budget, cfg = self.budgets[path.task_index], self.config
        if path.node == 0:
            if budget.pilot == path.path_id:
                self.pilot_entropies[path.path_id] = [entropy]
            self.branch_state.start_path(path.path_id, entropy)
            return []
        if budget.pilot == path.path_id and budget.target_globals is None:
            self.pilot_entropies[path.path_id].append(entropy)
            return []
        if not budget.forkable or budget.started >= cfg.num_leaves:
            return []
        base = max(cfg.branch.alpha, self._paced_rate(path)) if cfg.branch.pace else None
        if not self.branch_state.decide(path.path_id, entropy, float(self.rng.random()), cfg.branch, base):
            return []
        children = []
        for _ in range(min(cfg.branch.max_children_per_boundary, cfg.num_leaves - budget.started)):
            child = self._fork(path)
            if child is not None:
                children.append(child)
        return children

    def _paced_rate(self, path: _Path) -> float:
        """:func:`~rlvr_gym_agents.rollout.branching.paced_rate` of the path's task at its boundary (0 when its env does
        not tell its turn limit and turn)."""
        episode = path.episode.env
        limit, turn = getattr(episode.env, "max_turns", None), episode.turns
        if not isinstance(limit, int) or turn >= limit:
            return 0.0
        running = sum(1 for p in self.paths if p.task_index == path.task_index and not p.done)
        return paced_rate(self.config.num_leaves - self.budgets[path.task_index].started, limit - turn, max(1, running))

    def _fork(self, path: _Path) -> _Path | None:
        """A child of ``path`` at its current boundary. Decided after the turn, a warm parent's child gets the parent's
        KV row rewound to the boundary (:meth:`KVRows.rebuild`) and a fresh parent's (a replayed fallback branch in its
        first round) is fresh too and feeds the same full context; decided at the boundary, the child is a copy of the
        parent's row in the round's generate call (:meth:`KVRows.generate`)."""
        try:
            episode = path.episode.fork()
        except Exception:  # noqa: BLE001  # a failed fork only costs the branch; refilled from the prompt
            return None
        child = dataclasses.replace(path, path_id=self.next_path_id, episode=episode, branched=True)
        self.next_path_id += 1
        self.branch_state.fork_path(path.path_id, child.path_id)
        self.budgets[path.task_index].started += 1
        self.num_branches[path.task_index] += 1
        self.paths.append(child)
        return child

    def _advance(self, path: _Path, generation: Generation, played: PlayedTurn) -> None:
        """Adds the node of a played turn (:func:`play_turns`) to the tree."""
        tree = self.trees[path.task_index]
        outcome = played.outcome
        fields: dict[str, Any] = {
            "generated_ids": list(generation.token_ids),
            "logps": list(generation.logps),
            "entropies": list(generation.entropies),
            "turn": played.turn,
            "branched": path.branched,
            "failures": [played.turn.failure] if played.turn.failure is not None else [],
        }
        if outcome.done:
            node = tree.add_node(path.node, done=True, terminated=outcome.terminated, truncated=outcome.truncated,
                                 success=outcome.success, **fields)
            self._finish(path, node.index)
            return
        node = tree.add_node(path.node, observation_ids=played.observation_ids, **fields)
        path.node = node.index
        path.fresh, path.branched = False, False

    def _finish(self, path: _Path, leaf: int) -> None:
        path.done, path.node = True, leaf
        self._close(path)
        budget = self.budgets[path.task_index]
        if budget.pilot == path.path_id and budget.target_globals is None:
            ent = self.pilot_entropies.get(path.path_id)
            if not ent:  # the pilot ended before generating anything: ARPO's 1:1 split
                budget.target_globals = max(1, self.config.num_leaves // 2)
                return
            budget.target_globals = global_sample_count(
                self.config.num_leaves, ent[0], sum(ent) / len(ent), self.config.pre_monitoring_beta
            )

    def _close(self, path: _Path) -> None:
        """Closes the path's env; a failing ``close()`` is recorded on the path's leaf."""
        failure = path.episode.close()
        if failure is not None and path.done:
            self.trees[path.task_index].nodes[path.node].failures.append(failure)


def tree_log_keys(metrics: dict[str, Any]) -> dict[str, Any]:
    """Tree metrics as flat log keys: ``tree/<name>``, dicts as ``tree/<name>/<key>`` (lists kept as lists)."""
    flat: dict[str, Any] = {}
    for name, value in metrics.items():
        if isinstance(value, dict):
            flat.update({f"tree/{name}/{key}": v for key, v in value.items()})
        else:
            flat[f"tree/{name}"] = value
    return flat
