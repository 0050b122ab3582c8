"""The rollout tree (data only): turn-boundary nodes with shared token prefixes, and its leaf trajectories.

Node 0 holds the task prompt. Every other node is one *segment*: the ids the policy generated in one turn
(with their log-probs and entropies) followed by the observation ids the env returned, ending at a turn
boundary. A root-to-leaf path is one episode; its ids are the concatenation of the segments on the path, so
siblings share their parent's ids, loss mask and log-probs exactly (algorithms.md §9 property 22).

:meth:`RolloutTree.trajectory` turns a leaf into the flat :class:`~rlvr_gym_agents.rollout.Trajectory` the
trainer consumes; :mod:`rlvr_gym_agents.credit.tree` gives the matching per-token advantages.

Training cost and credit of shared prefixes: each leaf is trained as its own row. With
``algorithm.share_tree_prefixes`` the update runs a prefix shared by d leaves once, every leaf's gradient flowing
through it (:class:`~rlvr_gym_agents.update.scoring.PrefixTreeScorer`); without it the prefix is recomputed d
times in the training forward/backward pass (training tokens equal those of flat sampling with the same leaves;
only generation is shared). Either way the loss is a sum over leaf rows, so the prefix's summed gradient
coefficient is d x mean(advantages of the d leaves) in "soft" mode (ARPO's default; the unbiased flat-GRPO estimator over
the leaves), or exactly the segment's own advantage once with ``algorithm.dedup_shared_prefix`` ("hard"/per-segment modes).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlvr_gym import Failure, Task
from rlvr_gym_agents.rollout.types import Trajectory, Turn


@dataclasses.dataclass
class TreeNode:
    """One segment of the tree (node 0: the prompt).

    Attributes:
        index / parent: position in ``RolloutTree.nodes``; the parent's index (-1 for the root).
        depth: number of turns from the root (the root is 0, a global sample's first turn 1).
        generated_ids / logps / entropies: the turn's generated ids with their sampling log-probs and
            entropies (nats); empty for the root.
        observation_ids: ids appended after the turn (the root: the prompt ids). Never trained on.
        turn: the turn's record (action text, reward, failure, finish reason); None for the root. Its span is
            relative to the segment and is rebased by :meth:`RolloutTree.trajectory`.
        done: the episode ended after this turn (a leaf). terminated / truncated / success: how.
        failures: typed failures raised while producing this node.
        branched: True when this node was started by a branching decision (not the path's continuation).
    """

    index: int
    parent: int
    depth: int
    generated_ids: list[int] = dataclasses.field(default_factory=list)
    logps: list[float] = dataclasses.field(default_factory=list)
    entropies: list[float] = dataclasses.field(default_factory=list)
    observation_ids: list[int] = dataclasses.field(default_factory=list)
    turn: Turn | None = None
    done: bool = False
    terminated: bool = False
    truncated: bool = False
    success: bool = False
    failures: list[Failure] = dataclasses.field(default_factory=list)
    branched: bool = False

    @property
    def num_tokens(self) -> int:
        return len(self.generated_ids) + len(self.observation_ids)

    @property
    def reward(self) -> float:
        return self.turn.reward if self.turn is not None else 0.0


@dataclasses.dataclass
class RolloutTree:
    """All rollouts of one task, as a prefix tree over turns.

    Attributes:
        task: the task. group: the group index given to every leaf trajectory.
        nodes: the nodes in creation order (parents before children).
    """

    task: Task
    group: int = 0
    nodes: list[TreeNode] = dataclasses.field(default_factory=list)

    def add_node(self, parent: int, **fields: Any) -> TreeNode:
        """Appends a node under ``parent`` (-1 only for the first node, the root) and returns it."""
        if (parent == -1) != (not self.nodes) or parent >= len(self.nodes):
            raise ValueError(f"parent {parent} invalid for a tree of {len(self.nodes)} nodes (root must come first)")
        depth = 0 if parent < 0 else self.nodes[parent].depth + 1
        node = TreeNode(index=len(self.nodes), parent=parent, depth=depth, **fields)
        self.nodes.append(node)
        return node

    @property
    def parents(self) -> list[int]:
        return [n.parent for n in self.nodes]

    def leaves(self) -> list[int]:
        """Indices of the leaves (finished episodes), in creation order."""
        has_child = {n.parent for n in self.nodes}
        return [n.index for n in self.nodes if n.index not in has_child and n.index > 0]

    def path(self, leaf: int) -> list[int]:
        """Node indices from the root (included) to ``leaf``."""
        out = []
        node = leaf
        while node >= 0:
            out.append(node)
            node = self.nodes[node].parent
        return out[::-1]

    def trajectory(self, leaf: int) -> Trajectory:
        """The episode ending at ``leaf`` as a flat :class:`Trajectory` (ids shared with its siblings)."""
        root, last = self.nodes[0], self.nodes[leaf]
        traj = Trajectory(task_id=self.task.id, env_id=self.task.env_id, group=self.group)
        traj.append(root.observation_ids, trained=False)
        traj.prompt_length = len(root.observation_ids)
        for index in self.path(leaf)[1:]:
            node = self.nodes[index]
            if node.turn is None and node.parent > 0:
                # a leaf without a turn (context overflow): its parent's observation never reached the policy
                traj.truncate(traj.turns[-1].span[1])
            start = len(traj.token_ids)
            traj.append(node.generated_ids, trained=True, logps=node.logps, entropies=node.entropies)
            if node.turn is not None:
                traj.turns.append(dataclasses.replace(node.turn, span=(start, len(traj.token_ids))))
                traj.reward += node.turn.reward
            traj.append(node.observation_ids, trained=False)
            traj.failures.extend(node.failures)
        traj.terminated, traj.truncated, traj.success = last.terminated, last.truncated, last.success
        return traj

    def trajectories(self) -> list[Trajectory]:
        """One trajectory per leaf, in :meth:`leaves` order."""
        return [self.trajectory(leaf) for leaf in self.leaves()]


@dataclasses.dataclass
class TreeRollout:
    """The result of one :meth:`~rlvr_gym_agents.rollout.tree_sampler.TreeSampler.sample` call: one tree per task and the step metrics."""

    trees: list[RolloutTree]
    metrics: dict[str, Any]


def tree_metrics(
    trees: Sequence[RolloutTree], num_globals: Sequence[int], num_branches: Sequence[int]
) -> dict[str, Any]:
    """Per-step tree metrics.

    Returns a dict with: ``leaves_per_task`` (list), ``global_samples`` / ``branches`` (totals),
    ``branch_points_per_depth`` ({depth: nodes with >= 2 children}), ``distinct_successful`` (mean per task
    of distinct successful action sequences), ``entropy_per_turn`` ({depth: mean token entropy of the turns
    at that depth}), ``tokens_generated`` (each shared token counted once), ``flat_equivalent_tokens``
    (generated tokens summed over leaf paths: what independent sampling of the same leaves costs),
    ``tokens_per_leaf``, ``prefix_sharing_ratio`` (tokens_generated / flat_equivalent_tokens), and
    ``leaf_success`` ({"global": success rate of the leaves that continue a global sample, "branched": of the
    leaves that split off at a turn boundary; a kind without leaves is left out}) with ``branch_depth_mean``
    (the mean depth, in turns, of the boundary where each branched leaf split off; 0.0 without branches).
    Branches start from states the parent path reached, so a sampler that branches long (often failing)
    paths gives branched leaves a lower success rate than independent episodes.
    """
    depth_branch: dict[int, int] = {}
    depth_entropy: dict[int, list[float]] = {}
    generated = flat = 0
    distinct = []
    leaves_per_task = []
    for tree in trees:
        children: dict[int, int] = {}
        for node in tree.nodes[1:]:
            children[node.parent] = children.get(node.parent, 0) + 1
            generated += len(node.generated_ids)
            depth_entropy.setdefault(node.depth, []).extend(node.entropies)
        for parent, count in children.items():
            if count >= 2:
                depth = tree.nodes[parent].depth
                depth_branch[depth] = depth_branch.get(depth, 0) + 1
        leaves = tree.leaves()
        leaves_per_task.append(len(leaves))
        flat += sum(len(tree.nodes[n].generated_ids) for leaf in leaves for n in tree.path(leaf))
        wins = {
            tuple(turn.action for n in tree.path(leaf)[1:] if (turn := tree.nodes[n].turn) is not None)
            for leaf in leaves
            if tree.nodes[leaf].success
        }
        distinct.append(len(wins))
    total_leaves = max(1, sum(leaves_per_task))
    origins = [_leaf_origin(tree, leaf) for tree in trees for leaf in tree.leaves()]
    return {
        "leaves_per_task": leaves_per_task,
        "global_samples": int(sum(num_globals)),
        "branches": int(sum(num_branches)),
        "branch_points_per_depth": dict(sorted(depth_branch.items())),
        "distinct_successful": float(np.mean(distinct)) if distinct else 0.0,
        "entropy_per_turn": {d: float(np.mean(v)) for d, v in sorted(depth_entropy.items()) if v},
        "tokens_generated": generated,
        "flat_equivalent_tokens": flat,
        "tokens_per_leaf": generated / total_leaves,
        "prefix_sharing_ratio": generated / flat if flat else 1.0,
        **_success_by_origin(origins),
    }


def _leaf_origin(tree: RolloutTree, leaf: int) -> tuple[int | None, bool]:
    """(depth of the boundary where the leaf split off, None for a global sample's leaf; its success)."""
    split = [n for n in tree.path(leaf) if tree.nodes[n].branched]
    return (tree.nodes[split[-1]].depth - 1 if split else None), tree.nodes[leaf].success


def _success_by_origin(origins: list[tuple[int | None, bool]]) -> dict[str, Any]:
    kinds = {"global": [ok for depth, ok in origins if depth is None],
             "branched": [ok for depth, ok in origins if depth is not None]}
    depths = [depth for depth, _ in origins if depth is not None]
    return {"leaf_success": {kind: float(np.mean(oks)) for kind, oks in kinds.items() if oks},
            "branch_depth_mean": float(np.mean(depths)) if depths else 0.0}
