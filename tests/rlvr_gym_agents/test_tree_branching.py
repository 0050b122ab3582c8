"""Branching decisions on hand-made entropies (algorithms.md §9 properties 23-25)."""

from __future__ import annotations

import pytest
from rlvr_gym_agents.rollout.branching import (
    BranchConfig,
    BranchState,
    branch_probability,
    fallback_branch_points,
    global_sample_count,
    paced_rate,
    segment_entropy,
)


def test_segment_entropy_is_mean_of_first_k() -> None:
    assert segment_entropy([1.0, 3.0, 100.0], num_tokens=2) == pytest.approx(2.0)
    assert segment_entropy([0.5], num_tokens=20) == pytest.approx(0.5)
    assert segment_entropy([], num_tokens=20) == 0.0
    with pytest.raises(ValueError):
        segment_entropy([1.0], num_tokens=0)


def test_branch_probability_hand_computed() -> None:
    assert branch_probability(0.0, 0) == pytest.approx(0.5)
    assert branch_probability(1.0, 0) == pytest.approx(0.7)
    assert branch_probability(1.0, 2) == pytest.approx(0.7 * 0.9)
    assert branch_probability(-10.0, 0) == 0.0
    assert branch_probability(10.0, 0) == 1.0
    assert branch_probability(0.3, 0, entropy_weight=0.0) == pytest.approx(0.5)  # w = 0, l = 0 -> alpha
    assert branch_probability(5.0, 20) == 0.0  # l >= 1 / lambda -> never
    with pytest.raises(ValueError):
        branch_probability(0.0, -1)


def test_branch_probability_monotone() -> None:
    deltas = [x / 4 for x in range(-12, 13)]
    for l in range(25):
        probs = [branch_probability(d, l) for d in deltas]
        assert probs == sorted(probs)
    for d in deltas:
        probs = [branch_probability(d, l) for l in range(25)]
        assert probs == sorted(probs, reverse=True)


def test_global_sample_count() -> None:
    assert global_sample_count(8, 1.0, 1.0) == 5  # floor(8 * 0.5) + 1
    assert global_sample_count(8, 100.0, 0.0) == 8
    assert global_sample_count(8, -100.0, 0.0) == 1
    values = [global_sample_count(16, d / 2, 0.0) for d in range(-20, 21)]
    assert values == sorted(values) and all(1 <= v <= 16 for v in values)


def test_branch_state_uses_initial_entropy_and_counts_consecutive() -> None:
    config = BranchConfig()
    state = BranchState()
    state.start_path(0, first_turn_entropy=1.0)
    # dH = 0.5 -> p = 0.6: u = 0.59 branches, then l = 1 -> p = 0.6 * 0.95 = 0.57: u = 0.58 does not
    assert state.decide(0, 1.5, uniform=0.59, config=config)
    state.fork_path(0, 1)
    assert state.initial_entropy[1] == 1.0 and state.consecutive[1] == 1
    assert not state.decide(0, 1.5, uniform=0.58, config=config)
    assert state.consecutive[0] == 0
    assert state.decide(1, 1.5, uniform=0.56, config=config)  # child keeps l = 1 -> p = 0.57
    assert state.consecutive[1] == 2


def test_branch_state_is_fresh_per_call() -> None:
    first, second = BranchState(), BranchState()
    first.start_path(0, 3.0)
    assert 0 not in second.initial_entropy  # no class-level sharing (ARPO's stale H_init)
    with pytest.raises(KeyError):
        second.decide(0, 1.0, 0.1, BranchConfig())


def test_fallback_branch_points_rank_boundaries_by_entropy_rise_minus_penalty() -> None:
    from rlvr_gym_agents.rollout.tree import RolloutTree

    from rlvr_gym import Task

    # root 0 -> 1 (H 1.0) -> 2 (H 1.6) -> 4 (H 0.5, done); 1 -> 3 (H 1.2, done); 2 -> 5 (H 2.0, done)
    tree = RolloutTree(Task(id="t", env_id="testing/Echo-v0"))
    tree.add_node(-1)
    for parent, entropy, done in [(0, 1.0, False), (1, 1.6, False), (1, 1.2, True), (2, 0.5, True), (2, 2.0, True)]:
        tree.add_node(parent, entropies=[entropy, entropy], done=done)
    config = BranchConfig(consecutive_penalty=0.05, probe_tokens=2)
    points = fallback_branch_points(tree, config)
    # node 1: H_init = H(node 1) = 1.0, best child 1.6 -> 0.6 - 2 x 0.05 = 0.5
    # node 2: H_init = 1.0, best child 2.0 -> 1.0 - 2 x 0.05 = 0.9; nodes 3-5 are done or have no child
    assert [(p.node, p.first_child) for p in points] == [(2, 4), (1, 2)]
    assert [p.score for p in points] == pytest.approx([0.9, 0.5])
    assert all(p.initial_entropy == pytest.approx(1.0) for p in points)
    assert fallback_branch_points(RolloutTree(Task(id="t", env_id="testing/Echo-v0")), config) == []


def test_surprisal_fallback_ranks_boundaries_by_the_least_likely_next_action() -> None:
    from rlvr_gym_agents.rollout.tree import RolloutTree

    from rlvr_gym import Task

    # root 0 -> 1 -> 2 -> 4 (done); 1 -> 3 (done); 2 -> 5 (done); the logps of each node's turn:
    tree = RolloutTree(Task(id="t", env_id="testing/Echo-v0"))
    tree.add_node(-1)
    turns = [(0, [-0.1, -0.2], False), (1, [-1.5, -0.5], False), (1, [-0.3, -0.1], True), (2, [-0.2, -0.2], True),
             (2, [-3.0, -0.1], True)]
    for parent, logps, done in turns:
        tree.add_node(parent, logps=logps, entropies=[1.0, 1.0], done=done)
    points = fallback_branch_points(tree, BranchConfig(consecutive_penalty=0.05), score="surprisal")
    # node 1: children 2 (-log p = 2.0) and 3 (0.4) -> 2.0 - 2 x 0.05 = 1.9
    # node 2: children 4 (0.4) and 5 (3.1) -> 3.1 - 2 x 0.05 = 3.0
    assert [(p.node, p.first_child) for p in points] == [(2, 4), (1, 2)]
    assert [p.score for p in points] == pytest.approx([3.0, 1.9])
    with pytest.raises(ValueError, match="score must be one of"):
        fallback_branch_points(tree, BranchConfig(), score="random")


def test_paced_rate_spreads_the_leaves_left_over_the_turns_and_paths_left() -> None:
    assert paced_rate(7, 9, 1) == pytest.approx(7 / 9)  # one global path, 7 leaves left, 9 turns left
    assert paced_rate(6, 8, 2) == pytest.approx(0.375)  # two paths share the 6 leaves over 8 turns
    assert paced_rate(5, 2, 2) == 1.0 and paced_rate(0, 3, 1) == 0.0  # clipped; nothing left to spend
    assert paced_rate(1, 1, 3) == 1.0 and paced_rate(0, 1, 3) == 0.0  # the last boundary spends what is left
    for bad in ((-1, 3, 1), (2, 0, 1), (2, 3, 0)):
        with pytest.raises(ValueError, match="turns_left >= 1"):
            paced_rate(*bad)


def test_a_paced_base_replaces_alpha_in_the_decision() -> None:
    config = BranchConfig(alpha=0.1, entropy_weight=0.2, consecutive_penalty=0.05)
    state = BranchState()
    state.start_path(0, first_turn_entropy=1.0)
    # dH = 0.5 with base 0.6: p = (0.6 + 0.1) = 0.7: u = 0.69 branches; alpha 0.1 alone would give 0.2
    assert state.decide(0, 1.5, uniform=0.69, config=config, base=0.6)
    assert not state.decide(0, 1.5, uniform=0.21, config=config)
