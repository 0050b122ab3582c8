"""Entropy-balanced tree rollouts over turns (ARPO + AEPO), with forked env states and a shared KV cache.

Per task the sampler grows a :class:`~rlvr_gym_agents.tree.RolloutTree` with exactly ``num_leaves`` leaves:

1. Start ``m`` global samples from the prompt (``m = n // 2`` as ARPO's 1:1 split, or AEPO pre-monitoring:
   the first global sample runs alone, its entropies give ``m``, and it is kept as a leaf instead of being
   thrown away as AEPO's pilot is).
2. All paths of all tasks advance in lock-step, one turn per round, in one batched ``generate`` call.
3. At a turn boundary after an observation, the path's next turn is generated first; its first ``k`` token
   entropies give H_t, and the path branches *at that boundary* with probability
   clip((alpha + w (H_t - H_init)) (1 - lambda l), 0, 1) (:mod:`rlvr_gym_agents.tree_branching`). The
   child gets ``env.fork()`` of the state before the parent's step and the parent's KV cache rewound to the
   boundary, so the shared prefix is never generated or prefilled again.
4. When a task has no running path and fewer than ``n`` paths, the rest of the budget (or its
   ``fallback_share``, in rounds) branches at the task's highest-entropy boundaries (TreeRL EPTree-style), or
   with ``fallback="surprisal"`` before its least likely actions; the env is rebuilt by replaying the actions
   and checked against the recorded observation. With ``fallback="prompt"`` or when that is impossible, half
   of it (at least one) restarts from the prompt (ARPO's refill).

Envs with ``supports_fork = False`` branch only at the root: all ``n`` leaves are global samples.

The KV cache of :class:`~rlvr_gym_agents.policy.TransformersPolicy` is reused across turns and branches
(rows are rewound by cropping the slots added in the round and merged with hole padding); with
``reuse_kv_cache=False`` (or a policy without :class:`KVState`) every call passes the full context.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import rlvr_gym
from rlvr_gym import Env, Failure, FailureKind, Task
from rlvr_gym_agents.chat import ChatFormat
from rlvr_gym_agents.policy import Generation, Policy, SamplingParams, TransformersPolicy
from rlvr_gym_agents.rollout import Turn
from rlvr_gym_agents.tree import RolloutTree, TreeRollout, tree_metrics
from rlvr_gym_agents.tree_branching import (
    FALLBACK_SCORES,
    BranchConfig,
    BranchState,
    fallback_branch_points,
    global_sample_count,
    segment_entropy,
)
from rlvr_gym_agents.tree_kv import RewindInfo, merge_kv_states

logger = logging.getLogger(__name__)


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
    env: Env
    observation: str
    feed_ids: list[int]
    context_length: int
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
    """

    def __init__(
        self,
        policy: Policy,
        chat: ChatFormat,
        config: TreeSamplerConfig | None = None,
        env_factory: Callable[..., Env] = rlvr_gym.make,
    ) -> None:
        self.policy, self.chat = policy, chat
        self.config = config or TreeSamplerConfig()
        self.env_factory = env_factory
        if self.config.reuse_kv_cache and not isinstance(policy, TransformersPolicy):
            # other engines (vLLM) get full contexts and reuse shared prefixes with their own prefix cache
            self.config = dataclasses.replace(self.config, reuse_kv_cache=False)
        self.num_calls = 0  # seeds each call's branching draws differently, deterministically

    def sample(self, tasks: Sequence[Task], sampling: SamplingParams) -> TreeRollout:
        """Grows one tree per task (each with exactly ``num_leaves`` leaves) and returns them with metrics."""
        run = _Run(self, tasks, sampling, call_index=self.num_calls)
        self.num_calls += 1
        run.loop()
        return TreeRollout(run.trees, tree_metrics(run.trees, run.num_globals, run.num_branches))


class _Run:
    """The state of one sampling call (created per call: no branching state leaks across calls)."""

    def __init__(self, sampler: TreeSampler, tasks: Sequence[Task], sampling: SamplingParams, call_index: int) -> None:
        self.sampler, self.config, self.sampling = sampler, sampler.config, sampling
        self.rng = np.random.default_rng([self.config.seed, call_index])
        self.branch_state = BranchState()
        self.trees = [RolloutTree(task, group=i) for i, task in enumerate(tasks)]
        self.budgets = [self._budget() for _ in tasks]
        self.paths: list[_Path] = []
        self.state: Any = None  # KV state whose rows are the non-fresh running paths, in self.paths order
        self.next_path_id = 0
        self.num_globals = [0] * len(tasks)
        self.num_branches = [0] * len(tasks)
        self.state_rows: list[int] = []  # the path id of each row of self.state
        self.probe_envs: dict[int, tuple[Env, str]] = {}  # env reset to build each root, reused by a sample
        self.pilot_entropies: dict[int, list[float]] = {}  # pre-monitoring: turn entropies of each pilot

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
            _close(path.env)

    def _reset_env_probe(self, task_index: int) -> list[int] | None:
        """Builds the root: resets one env to get the prompt (kept as the first global sample's env)."""
        task = self.trees[task_index].task
        env, observation, failure = self._new_env(task)
        if env is None:
            # no env: every leaf is an empty truncated episode carrying the crash
            self.trees[task_index].add_node(-1, observation_ids=[])
            for _ in range(self.config.num_leaves):
                self.trees[task_index].add_node(0, done=True, truncated=True, failures=[failure])
            self.budgets[task_index].started = self.config.num_leaves
            return None
        self.budgets[task_index].forkable = bool(getattr(env, "supports_fork", False))
        self.probe_envs[task_index] = (env, observation)
        return self.sampler.chat.prompt_ids(observation)

    def _new_env(self, task: Task) -> tuple[Env | None, str, Failure | None]:
        try:
            env = (
                self.sampler.env_factory(task.env_id)
                if self.config.max_turns is None
                else self.sampler.env_factory(task.env_id, max_turns=self.config.max_turns)
            )
            observation, _ = env.reset(options={"task": task})
            return env, observation, None
        except Exception as error:  # noqa: BLE001  # an env must never kill the batch
            return None, "", _crash("reset", error)

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

    def _start_fallbacks(self, task_index: int, count: int) -> bool:
        """Spends the rest of a finished task's budget on branches at its highest-entropy boundaries
        (:func:`~rlvr_gym_agents.tree_branching.fallback_branch_points`). The env is rebuilt by replaying the
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
        env, observation, _ = self._new_env(tree.task)
        if env is None:
            return False
        try:
            for n in tree.path(node_index)[1:]:
                turn = tree.nodes[n].turn
                assert turn is not None  # every non-root node on a path holds a turn
                observation = env.step(turn.action)[0]
        except Exception:  # noqa: BLE001  # a replay that fails only costs the fallback
            _close(env)
            return False
        recorded = tree.nodes[next_node].turn
        if recorded is None or observation != recorded.observation:
            _close(env)  # nondeterministic env: the replayed state is not the recorded one
            return False
        context = self._context_ids_of(task_index, node_index)
        path = _Path(task_index, self.next_path_id, node_index, env, observation, context, len(context), branched=True)
        self.next_path_id += 1
        self.branch_state.initial_entropy[path.path_id] = h_init
        self.branch_state.consecutive[path.path_id] = 0
        self.budgets[task_index].started += 1
        self.num_branches[task_index] += 1
        self.paths.append(path)
        return True

    def _start_global(self, task_index: int) -> None:
        tree, budget = self.trees[task_index], self.budgets[task_index]
        env: Env | None
        failure = None
        if task_index in self.probe_envs:
            env, observation = self.probe_envs.pop(task_index)
        else:
            env, observation, failure = self._new_env(tree.task)
        budget.started += 1
        budget.globals_started += 1
        self.num_globals[task_index] += 1
        if env is None:
            tree.add_node(0, done=True, truncated=True, failures=[failure])
            return
        prompt = tree.nodes[0].observation_ids
        path = _Path(task_index, self.next_path_id, 0, env, observation, list(prompt), len(prompt))
        if budget.target_globals is None and budget.pilot is None:
            budget.pilot = path.path_id
        self.next_path_id += 1
        self.paths.append(path)

    # -- one round: generate a turn for every running path ---------------------------------------------

    def _round(self, running: list[_Path]) -> None:
        running = [p for p in running if not self._overflows(p)]
        if not running:
            return
        generations, post_state, rewind = self._generate(running)
        children: list[tuple[_Path, int]] = []  # (child path, row in post_state of its parent)
        for row, (path, generation) in enumerate(zip(running, generations, strict=True)):
            children += [(c, row) for c in self._maybe_branch(path, generation)]
            self._advance(path, generation)
        self._rebuild_state(running, post_state, rewind, children)

    def _overflows(self, path: _Path) -> bool:
        limit = self.sampler.policy.max_context_tokens
        if path.context_length + self.sampling.max_new_tokens <= limit:
            return False
        failure = Failure(
            FailureKind.CONTEXT_OVERFLOW,
            f"context of {path.context_length} tokens + {self.sampling.max_new_tokens} new tokens "
            f"exceeds the policy's window of {limit}",
            {"context_tokens": path.context_length, "max_context_tokens": limit},
        )
        node = self.trees[path.task_index].add_node(
            path.node, done=True, truncated=True, failures=[failure], branched=path.branched
        )
        self._finish(path, node.index)
        return True

    def _generate(self, running: list[_Path]) -> tuple[list[Generation], Any, Any]:
        """One generate call for rows with a KV state and one for fresh rows; returns generations in
        ``running`` order, the merged post state (rows in ``running`` order) and the pre-call rewind info."""
        policy, reuse = self.sampler.policy, self.config.reuse_kv_cache
        if not reuse:
            contexts = [self._context_ids(p) for p in running]
            return policy.generate(contexts, self.sampling)[0], None, None
        warm = [p for p in running if not p.fresh]
        fresh = [p for p in running if p.fresh]
        out: dict[int, Generation] = {}
        states, order = [], []
        rewind = None
        if warm:
            rows = [self.state_rows.index(p.path_id) for p in warm]
            state = self.state if rows == list(range(len(self.state))) else self.state.select(rows)
            rewind = RewindInfo.of(state, [p.path_id for p in warm])
            gens, state = policy.generate([p.feed_ids for p in warm], self.sampling, state)
            out.update({p.path_id: g for p, g in zip(warm, gens, strict=True)})
            states.append(state)
            order += [p.path_id for p in warm]
        if fresh:
            gens, state = policy.generate([p.feed_ids for p in fresh], self.sampling)
            out.update({p.path_id: g for p, g in zip(fresh, gens, strict=True)})
            states.append(state)
            order += [p.path_id for p in fresh]
        merged = merge_kv_states(states)
        if order != [p.path_id for p in running]:
            merged = merged.select([order.index(p.path_id) for p in running])
        return [out[p.path_id] for p in running], merged, rewind

    def _context_ids(self, path: _Path) -> list[int]:
        return self._context_ids_of(path.task_index, path.node)

    def _context_ids_of(self, task_index: int, node: int) -> list[int]:
        tree = self.trees[task_index]
        ids: list[int] = []
        for n in tree.path(node):
            ids += tree.nodes[n].generated_ids + tree.nodes[n].observation_ids
        return ids

    def _maybe_branch(self, path: _Path, generation: Generation) -> list[_Path]:
        """Records the turn's entropy and creates children at the path's current boundary if drawn."""
        budget, cfg = self.budgets[path.task_index], self.config
        entropy = segment_entropy(generation.entropies, cfg.branch.probe_tokens)
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
        if not self.branch_state.decide(path.path_id, entropy, float(self.rng.random()), cfg.branch):
            return []
        children = []
        for _ in range(min(cfg.branch.max_children_per_boundary, cfg.num_leaves - budget.started)):
            child = self._fork(path)
            if child is not None:
                children.append(child)
        return children

    def _fork(self, path: _Path) -> _Path | None:
        try:
            env = path.env.fork()
        except Exception:  # noqa: BLE001  # a failed fork only costs the branch; refilled from the prompt
            return None
        child = dataclasses.replace(
            path, path_id=self.next_path_id, env=env, feed_ids=list(path.feed_ids), branched=True, fresh=False
        )
        self.next_path_id += 1
        self.branch_state.fork_path(path.path_id, child.path_id)
        self.budgets[path.task_index].started += 1
        self.num_branches[path.task_index] += 1
        self.paths.append(child)
        return child

    def _advance(self, path: _Path, generation: Generation) -> None:
        """Steps the env with the turn's action and adds the turn's node to the tree."""
        tree, chat = self.trees[path.task_index], self.sampler.chat
        action = chat.decode_action(generation.token_ids)
        turn = Turn(path.observation, action, (0, len(generation.token_ids)), finish_reason=generation.finish_reason)
        fields: dict[str, Any] = {
            "generated_ids": list(generation.token_ids),
            "logps": list(generation.logps),
            "entropies": list(generation.entropies),
            "turn": turn,
            "branched": path.branched,
        }
        try:
            observation, reward, terminated, truncated, info = path.env.step(action)
        except Exception as error:  # noqa: BLE001  # an env must never kill the batch
            turn.failure = _crash("step", error)
            node = tree.add_node(path.node, done=True, truncated=True, failures=[turn.failure], **fields)
            self._finish(path, node.index)
            return
        turn.reward, failure = float(reward), info.get("failure")
        turn.failure = failure if isinstance(failure, Failure) else None
        failures = [turn.failure] if turn.failure is not None else []
        if terminated or truncated:
            node = tree.add_node(
                path.node,
                done=True,
                terminated=bool(terminated),
                truncated=bool(truncated),
                success=bool(info.get("success", False)),
                failures=failures,
                **fields,
            )
            self._finish(path, node.index)
            return
        obs_ids = chat.observation_ids(observation, generation.finish_reason == "stop")
        node = tree.add_node(path.node, observation_ids=obs_ids, failures=failures, **fields)
        path.node, path.observation, path.feed_ids = node.index, observation, obs_ids
        path.context_length += len(generation.token_ids) + len(obs_ids)
        path.fresh, path.branched = False, False

    def _finish(self, path: _Path, leaf: int) -> None:
        path.done, path.node = True, leaf
        _close(path.env)
        budget = self.budgets[path.task_index]
        if budget.pilot == path.path_id and budget.target_globals is None:
            ent = self.pilot_entropies.get(path.path_id)
            if not ent:  # the pilot ended before generating anything: ARPO's 1:1 split
                budget.target_globals = max(1, self.config.num_leaves // 2)
                return
            budget.target_globals = global_sample_count(
                self.config.num_leaves, ent[0], sum(ent) / len(ent), self.config.pre_monitoring_beta
            )

    def _rebuild_state(
        self, running: list[_Path], post_state: Any, rewind: RewindInfo | None, children: list[tuple[_Path, int]]
    ) -> None:
        """The next round's KV state: surviving running rows, then each child's rewound copy of its parent."""
        if post_state is None:
            return
        keep = [row for row, p in enumerate(running) if not p.done]
        survivors = post_state if keep == list(range(len(running))) and not children else post_state.select(keep)
        parts = [survivors] if keep else []
        rows = [running[row].path_id for row in keep]
        for child, row in children:
            assert rewind is not None  # children only come from warm rows (depth >= 1)
            parts.append(rewind.apply(post_state.select([row]), running[row].path_id))
            rows.append(child.path_id)
        self.state = merge_kv_states(parts) if parts else None
        self.state_rows = rows


def _crash(where: str, error: BaseException) -> Failure:
    return Failure(
        FailureKind.ENV_CRASH,
        f"env raised in {where}(): {type(error).__name__}: {error}",
        {"traceback": traceback.format_exc(limit=5)},
    )


def _close(env: Env | None) -> None:
    if env is None:
        return
    try:
        env.close()
    except Exception as error:  # noqa: BLE001  # closing is best effort; the episode is already recorded
        logger.warning("env.close() raised %s: %s", type(error).__name__, error)
