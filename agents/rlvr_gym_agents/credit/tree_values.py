"""Credit assignment on a rollout tree: node values, turn-level advantages, and token-level broadcast.

A rollout tree (see :mod:`rlvr_gym_agents.rollout.tree`) is described here only by its shape, so every function is a
pure function of plain data:

- ``parents``: ``parents[i]`` is the index of node i's parent, -1 for the root; nodes are in topological
  order (``parents[i] < i``). Node 0 is the root (the task prompt; it holds no policy tokens). Every other
  node is one *segment*: a model turn plus the observation that followed it, ending at a turn boundary.
- ``leaf_rewards``: reward R_l of every leaf (a finished trajectory), one value per leaf node.

L(s) is the set of leaves below node s (s included when s is a leaf); |L(s)| its size. Formulas, from
``shared/reference/algorithms.md`` §1.2, §4, §8.2:

- V(s) = (1/|L(s)|) sum_{l in L(s)} R_l;  V(root) = the group mean (TreeRL, Hou et al. ACL 2025).
- Local (sibling) advantage A_loc(s) = V(s) - V(parent(s)); global A_glob(s) = V(s) - V(root).
- TreeRL: A(s) = (A_glob(s) + A_loc(s)) / sqrt(|L(s)|).
- ARPO hard attribution (Dong et al. 2025, arXiv 2507.19849 §3.2): leaves get GRPO advantages A_l; a
  segment gets the mean of A_l over the leaves below it.
- TreePO (Li et al. 2025): A_l = mean over ancestors g with |L(g)| > 1 of (R_l - V(g)).

Turn-level baseline from the tree (our construction, ``baseline="loo"`` in :func:`node_advantages`): all
children of a node start from *the same env state* (the env was forked there), so the mean value of the
*other* children's leaves is a baseline independent of the child's own actions: unbiased, needs no
observation hashing (GiGPO's anchor groups, found by construction), and does not depend on how many turns
any trajectory takes (the bias verl RFC #7244 warns about for per-turn-index normalisation).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import Tensor

from rlvr_gym_agents.credit.estimators import group_advantages

TREE_ADVANTAGE_MODES = ("treerl", "local", "global", "arpo_hard")


def validate_tree(parents: Sequence[int], leaf_rewards: Mapping[int, float]) -> list[list[int]]:
    """Check the tree's shape and return the children lists.

    Raises:
        ValueError: node 0 is not the root, a parent index is not smaller than its child's, a leaf has no
            reward, or a reward is given for an inner node.
    """
    if not parents or parents[0] != -1:
        raise ValueError(f"parents[0] must be -1 (node 0 is the root); got {list(parents[:1])}")
    children: list[list[int]] = [[] for _ in parents]
    for node, parent in enumerate(parents[1:], start=1):
        if not 0 <= parent < node:
            raise ValueError(f"nodes must be in topological order: parents[{node}] = {parent}, expected 0..{node - 1}")
        children[parent].append(node)
    leaves = {i for i, c in enumerate(children) if not c}
    if set(leaf_rewards) != leaves:
        raise ValueError(f"leaf_rewards must have exactly the leaves {sorted(leaves)}; got keys {sorted(leaf_rewards)}")
    return children


def tree_values(parents: Sequence[int], leaf_rewards: Mapping[int, float]) -> tuple[Tensor, Tensor]:
    """Leaf counts |L(s)| and values V(s) = mean reward of the leaves below s.

    Returns:
        (counts, values), both shape (N,) float64, N = len(parents).
    """
    validate_tree(parents, leaf_rewards)
    counts = torch.zeros(len(parents), dtype=torch.float64)
    sums = torch.zeros(len(parents), dtype=torch.float64)
    for leaf, reward in leaf_rewards.items():
        counts[leaf] += 1
        sums[leaf] += reward
    for node in range(len(parents) - 1, 0, -1):  # children have larger indices: accumulate bottom-up
        counts[parents[node]] += counts[node]
        sums[parents[node]] += sums[node]
    return counts, sums / counts


def _loo_parent_values(parents: Sequence[int], counts: Tensor, values: Tensor) -> Tensor:
    """V(parent minus s): mean reward of the parent's leaves that are not below s (V(parent) when none)."""
    out = torch.zeros_like(values)
    for node in range(1, len(parents)):
        p = parents[node]
        rest = counts[p] - counts[node]
        out[node] = (values[p] * counts[p] - values[node] * counts[node]) / rest if rest > 0 else values[p]
    return out


def node_advantages(
    parents: Sequence[int],
    leaf_rewards: Mapping[int, float],
    mode: str = "treerl",
    baseline: str = "mean",
    eps: float = 1e-6,
) -> Tensor:
    """One advantage per node (segment); the root's is 0.

    Args:
        parents, leaf_rewards: the tree (see module docstring).
        mode: "treerl" ((A_glob + A_loc) / sqrt|L(s)|), "local" (A_loc), "global" (A_glob) or "arpo_hard"
            (mean of the leaves' GRPO advantages below s).
        baseline: "mean" (V(parent), as in TreeRL) or "loo" (the parent's leaves not below s: unbiased);
            applies to the local term.
        eps: added to the std of the leaves' rewards in "arpo_hard".

    Returns:
        Shape (N,) float64.

    Raises:
        ValueError: unknown mode or baseline, or a malformed tree.
    """
    if mode not in TREE_ADVANTAGE_MODES or baseline not in ("mean", "loo"):
        raise ValueError(
            f"mode must be one of {TREE_ADVANTAGE_MODES} and baseline 'mean'|'loo'; got {mode}, {baseline}"
        )
    counts, values = tree_values(parents, leaf_rewards)
    if mode == "arpo_hard":
        return _arpo_hard(parents, leaf_rewards, counts, eps)
    parent_idx = torch.tensor([max(p, 0) for p in parents])
    parent_base = _loo_parent_values(parents, counts, values) if baseline == "loo" else values[parent_idx]
    local = values - parent_base
    glob = values - values[0]
    adv = {"local": local, "global": glob, "treerl": (glob + local) / counts.sqrt()}[mode]
    adv[0] = 0.0
    return adv


def _arpo_hard(parents: Sequence[int], leaf_rewards: Mapping[int, float], counts: Tensor, eps: float) -> Tensor:
    rewards = torch.tensor(list(leaf_rewards.values()), dtype=torch.float64)
    std = rewards.std() if len(rewards) > 1 else torch.tensor(1.0, dtype=torch.float64)
    leaf_adv = {leaf: float((r - rewards.mean()) / (std + eps)) for leaf, r in leaf_rewards.items()}
    if len(rewards) == 1:
        leaf_adv = {leaf: 0.0 for leaf in leaf_adv}
    _, mean_adv = tree_values(parents, leaf_adv)
    mean_adv[0] = 0.0
    return mean_adv


def treepo_leaf_advantages(parents: Sequence[int], leaf_rewards: Mapping[int, float]) -> dict[int, float]:
    """TreePO: A_l = mean over the proper ancestors g of l with |L(g)| > 1 (the root always) of R_l - V(g).

    Li et al. 2025 (TreePO), ``compute_tree_reinforce_plus_plus_baseline_outcome_advantage`` with the
    "average" aggregation, before batch whitening (:func:`rlvr_gym_agents.experimental.masked_whiten`).

    Returns:
        {leaf: advantage}.
    """
    counts, values = tree_values(parents, leaf_rewards)
    out = {}
    for leaf, reward in leaf_rewards.items():
        terms, node = [], parents[leaf]
        while node >= 0:
            if counts[node] > 1 or node == 0:
                terms.append(reward - float(values[node]))
            node = parents[node]
        out[leaf] = sum(terms) / len(terms)
    return out


def leaf_paths(parents: Sequence[int]) -> dict[int, list[int]]:
    """{leaf: [node ids from the first segment below the root down to the leaf]} (root excluded)."""
    has_child = {p for p in parents if p >= 0}
    paths = {}
    for leaf in (i for i in range(len(parents)) if i not in has_child):
        path, node = [], leaf
        while node > 0:
            path.append(node)
            node = parents[node]
        paths[leaf] = path[::-1]
    return paths


def per_row_node_weights(parents: Sequence[int], dedup: bool) -> dict[int, dict[int, float]]:
    """Weight of each segment's tokens in each leaf row when leaves are trained as separate rows.

    Training a tree as one row per leaf repeats a shared segment s in |L(s)| rows. With ``dedup=False``
    (ARPO "soft" / TreePO) every copy gets weight 1, so the summed gradient coefficient on s is
    |L(s)| x (its advantage). With ``dedup=True`` each copy gets 1/|L(s)|, so s contributes exactly once,
    as if the tree were trained with shared prefixes (ARPO "hard", TreeRL per-segment credit).

    Returns:
        {leaf: {node: weight}} for the nodes on each leaf's path.
    """
    paths = leaf_paths(parents)
    counts: dict[int, int] = {}
    for path in paths.values():
        for node in path:
            counts[node] = counts.get(node, 0) + 1
    return {leaf: {n: (1.0 / counts[n] if dedup else 1.0) for n in path} for leaf, path in paths.items()}


def leaf_token_advantages(
    parents: Sequence[int],
    node_adv: Tensor | Mapping[int, float],
    segment_lengths: Sequence[int],
    dedup: bool = False,
) -> dict[int, Tensor]:
    """Per-token advantages of each leaf row: each token gets the advantage of the segment holding it.

    Args:
        parents: the tree.
        node_adv: advantage per node, shape (N,) (from :func:`node_advantages`) or {node: value}.
        segment_lengths: number of tokens of each node's segment (model turn + observation; the root's is
            the prompt length, whose tokens get 0). The loss mask still zeroes observation tokens.
        dedup: scale each shared segment by 1/|L(s)| (see :func:`per_row_node_weights`).

    Returns:
        {leaf: advantages of shape (sum of path segment lengths including the root's,)} float32.
    """
    weights = per_row_node_weights(parents, dedup)
    out = {}
    for leaf, path in leaf_paths(parents).items():
        pieces = [torch.zeros(segment_lengths[0])]
        for node in path:
            value = float(node_adv[node]) * weights[leaf][node]
            pieces.append(torch.full((segment_lengths[node],), value))
        out[leaf] = torch.cat(pieces).to(torch.float32)
    return out


def soft_leaf_advantages(leaf_rewards: Mapping[int, float], estimator: str = "grpo") -> dict[int, float]:
    """ARPO "soft" attribution: a group estimator over the leaves; shared prefixes are credited implicitly.

    Each leaf row gets its own advantage on every token (shared prefix included), so the summed gradient on
    a shared token is d x mean(A over the d leaves containing it) (algorithms.md §1.2).
    """
    leaves = list(leaf_rewards)
    rewards = torch.tensor([leaf_rewards[leaf] for leaf in leaves], dtype=torch.float64)
    adv = group_advantages(rewards, torch.zeros(len(leaves), dtype=torch.long), estimator)
    return {leaf: float(a) for leaf, a in zip(leaves, adv, strict=True)}
