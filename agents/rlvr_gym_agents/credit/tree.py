"""Per-token advantages of a rollout tree's leaves: the tree credit modes over :class:`RolloutTree` data.

Each function returns one float32 row per leaf (in :meth:`RolloutTree.leaves` order) as long as the leaf's path of
segments (the root's prompt ids get 0; observation ids carry their segment's value but the loss mask drops
them). Step rewards come from :func:`rlvr_gym_agents.credit.rewards.turn_reward` (less the per-turn penalty).
The node-value math is :mod:`rlvr_gym_agents.credit.tree_values` (pure functions of ``parents`` and leaf rewards).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from rlvr_gym_agents.credit import tree_values
from rlvr_gym_agents.credit.estimators import gigpo_advantages
from rlvr_gym_agents.credit.rewards import NO_PENALTY, Penalty, turn_reward
from rlvr_gym_agents.rollout.tree import RolloutTree


def leaf_returns(tree: RolloutTree, penalty: Penalty = NO_PENALTY) -> dict[int, float]:
    """{leaf: episode return}: the sum of the path's step rewards, each penalised turn less the penalty."""
    return {leaf: sum(turn_reward(tree.nodes[n].turn, penalty) for n in tree.path(leaf))
            for leaf in tree.leaves()}


def node_value_rows(tree: RolloutTree, mode: str, penalty: Penalty = NO_PENALTY, baseline: str = "mean",
                    dedup: bool = False) -> list[Tensor]:
    """Per-segment credit ("treerl", "local", "global", "arpo_hard"; :func:`tree_values.node_advantages`), every
    token of a segment getting its node's advantage; ``dedup`` scales a segment shared by d leaf rows by 1/d.

    Raises:
        ValueError: an unknown mode or baseline.
    """
    node_adv = tree_values.node_advantages(tree.parents, leaf_returns(tree, penalty), mode,
                                           baseline=baseline)
    rows = tree_values.leaf_token_advantages(tree.parents, node_adv, _lengths(tree), dedup)
    return [rows[leaf] for leaf in tree.leaves()]


def treepo_rows(tree: RolloutTree, penalty: Penalty = NO_PENALTY, dedup: bool = False) -> list[Tensor]:
    """TreePO's per-leaf advantages (:func:`tree_values.treepo_leaf_advantages`) on every token of the leaf's row."""
    per_leaf = tree_values.treepo_leaf_advantages(tree.parents, leaf_returns(tree, penalty))
    weights = tree_values.per_row_node_weights(tree.parents, dedup)
    lengths = _lengths(tree)
    rows = []
    for leaf in tree.leaves():
        pieces = [torch.zeros(lengths[0])]
        pieces += [torch.full((lengths[n],), per_leaf[leaf] * weights[leaf][n]) for n in tree.path(leaf)[1:]]
        rows.append(torch.cat(pieces).to(torch.float32))
    return rows


def gigpo_rows(tree: RolloutTree, gamma: float, omega: float, std_norm: bool,
               penalty: Penalty = NO_PENALTY) -> list[Tensor]:
    """GiGPO over the leaves' turns (:func:`gigpo_advantages`) with the node a turn starts from as its anchor:
    siblings start from one forked env state, so no observation hashing is needed."""
    rewards, traj, keys, owners = [], [], [], []
    for row, leaf in enumerate(tree.leaves()):
        for n in tree.path(leaf)[1:]:
            rewards.append(turn_reward(tree.nodes[n].turn, penalty))
            traj.append(row)
            keys.append(tree.nodes[n].parent)
            owners.append((leaf, n))
    adv = gigpo_advantages(torch.tensor(rewards, dtype=torch.float64), torch.tensor(traj),
                           torch.zeros(len(traj), dtype=torch.long), keys, gamma, omega, std_norm)
    per_turn = {owner: float(a) for owner, a in zip(owners, adv, strict=True)}
    lengths = _lengths(tree)
    return [torch.cat([torch.zeros(lengths[0])]
                      + [torch.full((lengths[n],), per_turn[(leaf, n)]) for n in tree.path(leaf)[1:]]).float()
            for leaf in tree.leaves()]


def sibling_advantages(tree: RolloutTree, rows: Sequence[Tensor]) -> list[list[float]]:
    """The advantages siblings get where the tree branched: per branch point (a node with >= 2 children that
    generated tokens), one value per child, the mean over the child's leaves of the advantage on the child's first
    generated token (``rows`` are the leaves' per-token advantages in :meth:`RolloutTree.leaves` order, as the
    credit methods return them). Siblings with equal values (e.g. all their leaves failed) give that branch
    point no learning signal; their spread is what branching buys.

    Raises:
        ValueError: ``rows`` is not one row per leaf.
    """
    leaves = tree.leaves()
    if len(rows) != len(leaves):
        raise ValueError(f"expected one advantage row per leaf ({len(leaves)}), got {len(rows)}")
    starts, per_child = _segment_starts(tree), dict[int, list[float]]()
    for leaf, row in zip(leaves, rows, strict=True):
        for node in tree.path(leaf)[1:]:
            if tree.nodes[node].generated_ids and starts[node] < len(row):
                per_child.setdefault(node, []).append(float(row[starts[node]]))
    children: dict[int, list[int]] = {}
    for node in per_child:
        children.setdefault(tree.nodes[node].parent, []).append(node)
    return [[sum(per_child[c]) / len(per_child[c]) for c in kids] for kids in children.values() if len(kids) >= 2]


def _segment_starts(tree: RolloutTree) -> list[int]:
    """Each node's first id's position in the rows of its leaves (the root's prompt ids come first)."""
    starts = [0] * len(tree.nodes)
    for node in tree.nodes[1:]:  # parents come before children
        starts[node.index] = starts[node.parent] + tree.nodes[node.parent].num_tokens
    return starts


def _lengths(tree: RolloutTree) -> list[int]:
    return [node.num_tokens for node in tree.nodes]
