"""Tree credit assignment against hand-computed values and algorithms.md §9 properties 5-7."""

from __future__ import annotations

import math

import pytest
import torch
from rlvr_gym_agents.credit import sibling_advantage_metrics
from rlvr_gym_agents.credit.tree import sibling_advantages
from rlvr_gym_agents.credit.tree_values import (
    leaf_paths,
    leaf_token_advantages,
    node_advantages,
    per_row_node_weights,
    soft_leaf_advantages,
    tree_values,
    treepo_leaf_advantages,
)
from rlvr_gym_agents.rollout.tree import RolloutTree
from rlvr_gym_agents.rollout.types import RolloutBatch, Turn
from torch.nn.utils.rnn import pad_sequence

from rlvr_gym import Task

# root 0 -> {1, 2}; 1 -> {3, 4, 5}. Leaves 2, 3, 4, 5 with rewards 0, 1, 1, 0.
PARENTS = [-1, 0, 0, 1, 1, 1]
REWARDS = {2: 0.0, 3: 1.0, 4: 1.0, 5: 0.0}


def test_values_and_counts() -> None:
    counts, values = tree_values(PARENTS, REWARDS)
    assert counts.tolist() == [4, 3, 1, 1, 1, 1]
    torch.testing.assert_close(values, torch.tensor([0.5, 2 / 3, 0, 1, 1, 0], dtype=torch.float64))


def test_value_consistency_and_local_advantages_cancel() -> None:
    gen = torch.Generator().manual_seed(3)
    parents = [-1, 0, 0, 0, 1, 1, 2, 2, 2, 4, 4]
    leaves = [3, 5, 6, 7, 8, 9, 10]
    rewards = {leaf: float(torch.rand(1, generator=gen)) for leaf in leaves}
    counts, values = tree_values(parents, rewards)
    assert float(values[0]) == pytest.approx(sum(rewards.values()) / len(rewards))
    local = node_advantages(parents, rewards, "local")
    for node in range(len(parents)):
        kids = [c for c, p in enumerate(parents) if p == node]
        if kids:
            assert float(values[node] * counts[node]) == pytest.approx(sum(float(values[c] * counts[c]) for c in kids))
            assert sum(float(counts[c] * local[c]) for c in kids) == pytest.approx(0.0, abs=1e-12)


def test_treerl_local_global_hand_computed() -> None:
    treerl = node_advantages(PARENTS, REWARDS, "treerl")
    # node 1: (1/6 + 1/6) / sqrt(3); node 2: (-1/2 - 1/2) / 1; node 3: (1/2 + 1/3) / 1; node 5: (-1/2 - 2/3)
    expected = [0.0, (1 / 3) / math.sqrt(3), -1.0, 5 / 6, 5 / 6, -7 / 6]
    torch.testing.assert_close(treerl, torch.tensor(expected, dtype=torch.float64))
    glob = node_advantages(PARENTS, REWARDS, "global")
    torch.testing.assert_close(glob, torch.tensor([0, 1 / 6, -0.5, 0.5, 0.5, -0.5], dtype=torch.float64))


def test_leave_one_out_local_baseline() -> None:
    loo = node_advantages(PARENTS, REWARDS, "local", baseline="loo")
    # node 1 vs leaf 2 (0) -> 2/3; node 2 vs leaves 3,4,5 (2/3) -> -2/3; node 3 vs 4,5 (0.5) -> 0.5; node 5 vs 3,4 -> -1
    torch.testing.assert_close(loo, torch.tensor([0, 2 / 3, -2 / 3, 0.5, 0.5, -1.0], dtype=torch.float64))


def test_arpo_hard_is_mean_of_leaf_advantages_and_soft_sums_to_d_times_it() -> None:
    hard = node_advantages(PARENTS, REWARDS, "arpo_hard")
    a = 0.5 / math.sqrt(1 / 3)  # GRPO advantage magnitude of the leaves
    torch.testing.assert_close(hard, torch.tensor([0, a / 3, -a, a, a, -a], dtype=torch.float64), atol=1e-5, rtol=0)
    soft = soft_leaf_advantages(REWARDS)
    shared = [leaf for leaf, path in leaf_paths(PARENTS).items() if 1 in path]
    assert sum(soft[leaf] for leaf in shared) == pytest.approx(len(shared) * float(hard[1]), abs=1e-5)


def test_treepo_hand_computed_and_root_only_is_centred_grpo() -> None:
    adv = treepo_leaf_advantages(PARENTS, REWARDS)
    # leaf 3: mean((1 - 2/3), (1 - 1/2)) = 5/12; leaf 5: mean((0 - 2/3), (0 - 1/2)) = -7/12; leaf 2: 0 - 1/2
    assert adv == pytest.approx({2: -0.5, 3: 5 / 12, 4: 5 / 12, 5: -7 / 12})
    flat = treepo_leaf_advantages([-1, 0, 0, 0], {1: 1.0, 2: 0.0, 3: 0.0})
    assert flat == pytest.approx({1: 2 / 3, 2: -1 / 3, 3: -1 / 3})
    equal_subtree = treepo_leaf_advantages(PARENTS, {2: 0.0, 3: 1.0, 4: 1.0, 5: 1.0})
    assert equal_subtree[3] == pytest.approx(0.25 / 2)  # subtree 1 all-equal: only the root term is non-zero


def test_token_advantages_follow_segments() -> None:
    adv = node_advantages(PARENTS, REWARDS, "treerl")
    lengths = [2, 1, 3, 2, 1, 1]
    rows = leaf_token_advantages(PARENTS, adv, lengths)
    a1, a3 = float(adv[1]), float(adv[3])
    torch.testing.assert_close(rows[3], torch.tensor([0, 0, a1, a3, a3]))
    assert rows[2].tolist() == pytest.approx([0, 0, -1, -1, -1])
    dedup = leaf_token_advantages(PARENTS, adv, lengths, dedup=True)
    torch.testing.assert_close(dedup[3], torch.tensor([0, 0, a1 / 3, a3, a3]))
    # deduplicated copies of a shared segment add up to its advantage once
    weights = per_row_node_weights(PARENTS, dedup=True)
    assert sum(w.get(1, 0.0) for w in weights.values()) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("parents", "rewards", "match"),
    [
        ([0, 0], {1: 1.0}, "root"),
        ([-1, 2, 0], {1: 1.0}, "topological"),
        ([-1, 0, 0], {1: 1.0}, "leaves"),
        ([-1, 0], {0: 1.0, 1: 1.0}, "leaves"),
    ],
)
def test_malformed_trees_raise(parents: list[int], rewards: dict[int, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tree_values(parents, rewards)


def test_unknown_mode_raises() -> None:
    with pytest.raises(ValueError, match="treerl"):
        node_advantages(PARENTS, REWARDS, "bogus")


def _two_level_tree() -> RolloutTree:
    """root (prompt 2 ids) -> {node 1 (1 generated + 1 observation id), node 2 (1 generated, leaf)};
    node 1 -> {node 3 (1 generated, leaf), node 4 (2 generated, leaf)}. Leaves in order: 2, 3, 4."""
    tree = RolloutTree(Task(id="t", env_id="testing/Echo-v0"))
    tree.add_node(-1, observation_ids=[1, 2])
    tree.add_node(0, generated_ids=[3], observation_ids=[4], turn=Turn("o", "a", (0, 1)))
    tree.add_node(0, generated_ids=[8], turn=Turn("o", "b", (0, 1)), done=True)
    tree.add_node(1, generated_ids=[5], turn=Turn("o", "c", (0, 1)), done=True, success=True)
    tree.add_node(1, generated_ids=[6, 7], turn=Turn("o", "d", (0, 2)), done=True)
    return tree


def test_sibling_advantages_read_each_childs_first_generated_token_hand_computed() -> None:
    tree = _two_level_tree()
    assert tree.leaves() == [2, 3, 4]
    rows = [torch.tensor([0.0, 0.0, -1.0]),  # leaf 2: node 2's token at position 2
            torch.tensor([0.0, 0.0, 0.5, 0.5, 0.5]),  # leaf 3: node 1 at 2 (its observation at 3), node 3 at 4
            torch.tensor([0.0, 0.0, 1.5, 1.5, 0.5, 0.5])]  # leaf 4: node 1 at 2, node 4 at 4-5
    # root's children: node 2 -> -1.0; node 1 -> mean(0.5, 1.5) = 1.0. Node 1's children: 0.5 and 0.5.
    assert sorted(sorted(s) for s in sibling_advantages(tree, rows)) == [[-1.0, 1.0], [0.5, 0.5]]
    batch = RolloutBatch(tree.trajectories(), [tree])
    metrics = sibling_advantage_metrics(batch, pad_sequence(rows, batch_first=True))
    # variances 1.0 and 0.0: mean 0.5; one of the two branch points separates its siblings
    assert metrics == {"tree/sibling_adv_var": pytest.approx(0.5), "tree/branch_points": 2.0,
                       "tree/branch_points_informative": pytest.approx(0.5)}
    assert sibling_advantage_metrics(RolloutBatch(tree.trajectories()), pad_sequence(rows, batch_first=True)) == {}
    with pytest.raises(ValueError, match="one advantage row per leaf"):
        sibling_advantages(tree, rows[:2])
