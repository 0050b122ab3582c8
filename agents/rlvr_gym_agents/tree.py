"""The rollout tree: turn-boundary nodes with shared token prefixes, and its leaf trajectories.

Node 0 holds the task prompt. Every other node is one *segment*: the ids the policy generated in one turn
(with their log-probs and entropies) followed by the observation ids the env returned, ending at a turn
boundary. A root-to-leaf path is one episode; its ids are the concatenation of the segments on the path, so
siblings share their parent's ids, loss mask and log-probs exactly (algorithms.md §9 property 22).

:meth:`RolloutTree.trajectory` turns a leaf into the flat :class:`~rlvr_gym_agents.rollout.Trajectory` the
trainer consumes, and :meth:`RolloutTree.token_advantages` gives the matching per-token advantages from
:mod:`rlvr_gym_agents.tree_credit`.

Training cost and credit of shared prefixes: each leaf is trained as its own row, so a prefix shared by d
leaves is generated once but recomputed d times in the training forward/backward pass (training tokens equal
those of flat sampling with the same leaves; only generation is shared). Its summed gradient coefficient is
d x mean(advantages of the d leaves) in "soft" mode (ARPO's default; the unbiased flat-GRPO estimator over
the leaves), or exactly the segment's own advantage once with ``dedup=True`` ("hard"/per-segment modes).
Packing a tree into one row with a tree attention mask would compute each shared token once; not done here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rlvr_gym import Failure, Task
from rlvr_gym_agents import tree_credit
from rlvr_gym_agents.advantages import GiGPOConfig, gigpo_advantages
from rlvr_gym_agents.flat_credit import rejected
from rlvr_gym_agents.rollout import Trajectory, Turn

TREE_CREDIT_MODES = ("soft", *tree_credit.TREE_ADVANTAGE_MODES, "treepo", "gigpo")


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

    def credit_reward(self, invalid_action_penalty: float = 0.0) -> float:
        """The step reward credit assignment sees: :attr:`reward`, minus ``invalid_action_penalty`` when the env
        rejected the turn's action (:func:`flat_credit.rejected`)."""
        if self.turn is None:
            return 0.0
        return self.turn.reward - invalid_action_penalty * rejected(self.turn)


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

    def leaf_rewards(self, invalid_action_penalty: float = 0.0) -> dict[int, float]:
        """Episode return of every leaf: the sum of step rewards on its path, each rejected action's turn
        less ``invalid_action_penalty`` (>= 0; :meth:`TreeNode.credit_reward`)."""
        return {leaf: sum(self.nodes[n].credit_reward(invalid_action_penalty) for n in self.path(leaf))
                for leaf in self.leaves()}

    def trajectory(self, leaf: int) -> Trajectory:
        """The episode ending at ``leaf`` as a flat :class:`Trajectory` (ids shared with its siblings)."""
        root, last = self.nodes[0], self.nodes[leaf]
        traj = Trajectory(task_id=self.task.id, env_id=self.task.env_id, group=self.group)
        traj.append(root.observation_ids, trained=False)
        traj.prompt_length = len(root.observation_ids)
        for index in self.path(leaf)[1:]:
            node = self.nodes[index]
            start = len(traj.token_ids)
            traj.token_ids.extend(node.generated_ids)
            traj.loss_mask.extend([1] * len(node.generated_ids))
            traj.logps.extend(node.logps)
            traj.entropies.extend(node.entropies)
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

    def token_advantages(
        self, mode: str = "soft", estimator: str = "grpo", dedup: bool = False, gamma: float = 0.95, omega: float = 1.0,
        std_norm: bool = False, invalid_action_penalty: float = 0.0,
    ) -> list[Tensor]:
        """Per-token advantages aligned with :meth:`trajectories` (0 on prompt ids; observation ids carry
        their segment's value but are masked out of the loss by the trajectory's ``loss_mask``).

        Args:
            mode: "soft" (ARPO: a group estimator over the leaves, every token of a leaf row gets the leaf's
                advantage), "treerl", "local", "global", "arpo_hard" (per-segment values from
                :func:`tree_credit.node_advantages`), "treepo" (per-leaf TreePO advantages) or "gigpo"
                (:func:`advantages.gigpo_advantages` over the leaves' turns, anchor = the node a turn starts
                from: identical forked states, no observation hashing; per leaf row, ``dedup`` ignored).
            estimator: the group estimator of "soft".
            gamma / omega / std_norm: GiGPO's step discount, step-advantage weight and std normalisation
                ("gigpo" only; see :func:`advantages.gigpo_advantages`).
            dedup: scale a segment shared by d leaf rows by 1/d (see :func:`tree_credit.per_row_node_weights`);
                default False: the shared prefix is credited once per leaf below it.
            invalid_action_penalty: >= 0, subtracted from the step reward of every turn whose action the env
                rejected, before any mode computes its values (verl-agent's invalid-action penalty; the same
                returns as the flat trainer's).

        Raises:
            ValueError: unknown mode.
        """
        if mode not in TREE_CREDIT_MODES:
            raise ValueError(f"unknown tree credit mode {mode!r}; expected one of {TREE_CREDIT_MODES}")
        parents, rewards = self.parents, self.leaf_rewards(invalid_action_penalty)
        lengths = [n.num_tokens for n in self.nodes]
        if mode == "soft":
            return self._leaf_rows(tree_credit.soft_leaf_advantages(rewards, estimator), lengths, dedup)
        if mode == "treepo":
            return self._leaf_rows(tree_credit.treepo_leaf_advantages(parents, rewards), lengths, dedup)
        if mode == "gigpo":
            return self._gigpo_rows(lengths, gamma, omega, std_norm, invalid_action_penalty)
        node_adv = tree_credit.node_advantages(parents, rewards, mode)
        rows = tree_credit.leaf_token_advantages(parents, node_adv, lengths, dedup)
        return [rows[leaf] for leaf in self.leaves()]

    def _gigpo_rows(self, lengths: list[int], gamma: float, omega: float, std_norm: bool,
                    invalid_action_penalty: float) -> list[Tensor]:
        """GiGPO step rows: every turn of every leaf's path, keyed by the node the turn started from."""
        rewards, traj, keys, owners = [], [], [], []
        for row, leaf in enumerate(self.leaves()):
            for n in self.path(leaf)[1:]:
                rewards.append(self.nodes[n].credit_reward(invalid_action_penalty))
                traj.append(row)
                keys.append(self.nodes[n].parent)
                owners.append((leaf, n))
        adv = gigpo_advantages(
            torch.tensor(rewards, dtype=torch.float64),
            torch.tensor(traj),
            torch.zeros(len(traj), dtype=torch.long),
            keys,
            gamma,
            omega,
            std_norm,
        )
        per_turn = {owner: float(a) for owner, a in zip(owners, adv, strict=True)}
        return [
            torch.cat(
                [torch.zeros(lengths[0])]
                + [torch.full((lengths[n],), per_turn[(leaf, n)]) for n in self.path(leaf)[1:]]
            ).float()
            for leaf in self.leaves()
        ]

    def _leaf_rows(self, per_leaf: dict[int, float], lengths: list[int], dedup: bool) -> list[Tensor]:
        """Rows where every segment of a leaf's path carries that leaf's advantage (times its dedup weight)."""
        weights = tree_credit.per_row_node_weights(self.parents, dedup)
        rows = []
        for leaf in self.leaves():
            pieces = [torch.zeros(lengths[0])]
            pieces += [torch.full((lengths[n],), per_leaf[leaf] * weights[leaf][n]) for n in self.path(leaf)[1:]]
            rows.append(torch.cat(pieces).to(torch.float32))
        return rows


@dataclasses.dataclass
class TreeRollout:
    """The result of one :meth:`~rlvr_gym_agents.tree_sampler.TreeSampler.sample` call: one tree per task and the step metrics."""

    trees: list[RolloutTree]
    metrics: dict[str, Any]

    def training_batch(
        self, credit: str = "soft", estimator: str = "grpo", dedup: bool = False, gigpo: GiGPOConfig | None = None,
        invalid_action_penalty: float = 0.0,
    ) -> tuple[list[Trajectory], list[Tensor]]:
        """Leaf trajectories of every tree (tree order, then leaf order) and their per-token advantages.

        With ``credit="soft"`` every token of a leaf gets the leaf's group advantage, which equals what the
        flat trainer computes for the same episodes (ARPO's default). See :meth:`RolloutTree.token_advantages`
        for the other modes; ``gigpo`` gives the step discount, weight and normalisation of ``credit="gigpo"``;
        ``invalid_action_penalty`` (>= 0) is subtracted from the step reward of each rejected action's turn.
        """
        gigpo = gigpo or GiGPOConfig()
        trajectories = [t for tree in self.trees for t in tree.trajectories()]
        advantages = [a for tree in self.trees
                      for a in tree.token_advantages(credit, estimator, dedup, gigpo.gamma, gigpo.omega, gigpo.std_norm,
                                                     invalid_action_penalty)]
        return trajectories, advantages


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
