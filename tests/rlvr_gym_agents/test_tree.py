"""RolloutTree: leaf trajectories and tree credit on a hand-built tree (GiGPO anchors from branch nodes)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from agent_helpers import collect_rollouts, tree_token_advantages
from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.credit.rewards import Penalty
from rlvr_gym_agents.credit.tree import leaf_returns
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout import Turn
from rlvr_gym_agents.rollout.tree import RolloutTree, TreeRollout, tree_metrics

from rlvr_gym import Failure, FailureKind, Task


def _tree() -> RolloutTree:
    """root -> 1 (reward 0) -> {2 (reward 1, done), 3 (reward 0, done)}; root -> 4 (reward 0, done)."""
    tree = RolloutTree(Task(id="t", env_id="testing/Echo-v0"))
    tree.add_node(-1, observation_ids=[7, 7])

    def turn(parent: int, ids: list[int], reward: float, obs: list[int], done: bool) -> None:
        node_turn = Turn("obs", f"act{len(tree.nodes)}", (0, len(ids)), reward=reward)
        tree.add_node(
            parent,
            generated_ids=ids,
            logps=[-0.5] * len(ids),
            entropies=[1.0] * len(ids),
            observation_ids=obs,
            turn=node_turn,
            done=done,
            terminated=done,
            success=reward > 0,
        )

    turn(0, [1, 2], 0.0, [9], False)
    turn(1, [3], 1.0, [], True)
    turn(1, [4, 5], 0.0, [], True)
    turn(0, [6], 0.0, [], True)
    return tree


def test_leaf_trajectories_concatenate_segments() -> None:
    tree = _tree()
    assert tree.leaves() == [2, 3, 4]
    assert leaf_returns(tree) == {2: 1.0, 3: 0.0, 4: 0.0}
    traj = tree.trajectory(3)
    assert traj.token_ids == [7, 7, 1, 2, 9, 4, 5]
    assert traj.loss_mask == [0, 0, 1, 1, 0, 1, 1]
    assert traj.turn_spans == [(2, 4), (5, 7)]
    assert traj.prompt_length == 2 and traj.reward == 0.0 and traj.terminated
    with pytest.raises(ValueError, match="root"):
        tree.add_node(-1)


def test_gigpo_from_branch_nodes_hand_computed() -> None:
    # episode (mean-centred): [2/3, -1/3, -1/3]; anchor 0 returns [1, 0, 0] -> [2/3, -1/3, -1/3];
    # anchor 1 returns [1, 0] -> [+1/2, -1/2]
    rows = tree_token_advantages(_tree(), "gigpo", gamma=1.0, omega=1.0)
    a, b, c = 4 / 3, 7 / 6, -2 / 3
    torch.testing.assert_close(rows[0], torch.tensor([0, 0, a, a, a, b]))
    torch.testing.assert_close(rows[1], torch.tensor([0, 0, c, c, c, -5 / 6, -5 / 6]))
    torch.testing.assert_close(rows[2], torch.tensor([0, 0, c]))


def test_gigpo_with_omega_zero_is_mean_centred_soft_credit() -> None:
    tree = _tree()
    gigpo = tree_token_advantages(tree, "gigpo", gamma=1.0, omega=0.0)
    soft = tree_token_advantages(tree, "soft", estimator="drgrpo")
    for g, s in zip(gigpo, soft, strict=True):
        torch.testing.assert_close(g, s)
    with pytest.raises(ValueError, match="algorithm.credit must be one of"):
        tree_token_advantages(tree, "nope")


def test_gigpo_std_norm_with_omega_zero_is_grpo_soft_credit() -> None:
    tree = _tree()
    scaled = tree_token_advantages(tree, "gigpo", gamma=1.0, omega=0.0, std_norm=True)
    for g, s in zip(scaled, tree_token_advantages(tree, "soft", estimator="grpo"), strict=True):
        torch.testing.assert_close(g, s)
    assert not torch.allclose(scaled[0], tree_token_advantages(tree, "gigpo", gamma=1.0, omega=0.0)[0])


def _tree_with_rejected_leaf() -> RolloutTree:
    """:func:`_tree` where leaf 3's action was rejected by the env (an invalid action, reward 0)."""
    tree = _tree()
    turn = tree.nodes[3].turn
    assert turn is not None
    tree.nodes[3].turn = dataclasses.replace(turn, failure=Failure(FailureKind.INVALID_ACTION, "no such object"))
    return tree


def test_invalid_action_penalty_lowers_the_rejected_turns_return() -> None:
    tree = _tree_with_rejected_leaf()
    assert leaf_returns(tree) == {2: 1.0, 3: 0.0, 4: 0.0}
    assert leaf_returns(tree, Penalty(0.5)) == {2: 1.0, 3: -0.5, 4: 0.0}
    assert leaf_returns(tree, Penalty(0.5, frozenset({FailureKind.TOOL_ERROR}))) == {2: 1.0, 3: 0.0, 4: 0.0}
    refused = _tree_with_rejected_leaf()
    turn = refused.nodes[3].turn
    assert turn is not None
    refused.nodes[3].turn = dataclasses.replace(turn, failure=Failure(FailureKind.TOOL_ERROR, "no entity named 'x'"))
    assert leaf_returns(refused, Penalty(0.5)) == {2: 1.0, 3: 0.0, 4: 0.0}  # not a rejection: no penalty by default
    assert leaf_returns(refused, Penalty(0.5, frozenset({FailureKind.TOOL_ERROR}))) == {2: 1.0, 3: -0.5, 4: 0.0}
    with pytest.raises(ValueError, match="unknown failure kind"):
        Penalty(0.5, frozenset({"tool_eror"}))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite and >= 0"):
        Penalty(float("nan"))
    assert Penalty(0.5, ["tool_error"]).kinds == frozenset({FailureKind.TOOL_ERROR})  # type: ignore[arg-type]
    assert tree.trajectory(3).reward == 0.0  # the trajectory keeps the env's reward; only credit sees the penalty
    # soft, mean-centred: returns [1, -0.5, 0], mean 1/6
    a, b, c = 5 / 6, -2 / 3, -1 / 6
    rows = tree_token_advantages(tree, "soft", estimator="drgrpo", penalty=Penalty(0.5))
    torch.testing.assert_close(rows[0], torch.tensor([0, 0, a, a, a, a]))
    torch.testing.assert_close(rows[1], torch.tensor([0, 0, b, b, b, b, b]))
    torch.testing.assert_close(rows[2], torch.tensor([0, 0, c]))


def test_invalid_action_penalty_enters_gigpo_step_returns() -> None:
    # episode advantages [5/6, -2/3, -1/6] (as above); anchor 0 returns-to-go [1, -0.5, 0] -> the same;
    # anchor 1 (node 1) returns [1, -0.5] -> [+0.75, -0.75]
    rows = tree_token_advantages(_tree_with_rejected_leaf(), "gigpo", gamma=1.0, omega=1.0, penalty=Penalty(0.5))
    torch.testing.assert_close(rows[0], torch.tensor([0, 0, 5 / 3, 5 / 3, 5 / 3, 19 / 12]))
    torch.testing.assert_close(rows[1], torch.tensor([0, 0, -4 / 3, -4 / 3, -4 / 3, -17 / 12, -17 / 12]))
    torch.testing.assert_close(rows[2], torch.tensor([0, 0, -1 / 3]))
    unpenalised = tree_token_advantages(_tree_with_rejected_leaf(), "gigpo", gamma=1.0, omega=1.0)
    for row, expected in zip(unpenalised, tree_token_advantages(_tree(), "gigpo", gamma=1.0, omega=1.0), strict=True):
        torch.testing.assert_close(row, expected)


class _FixedTreeSampler:
    """Stands in for :class:`TreeSampler`: every call returns the same hand-built tree."""

    def __init__(self, tree: RolloutTree) -> None:
        self.tree, self.num_calls = tree, 0

    def sample(self, tasks: list[Task], sampling: SamplingParams) -> TreeRollout:
        return TreeRollout([self.tree], tree_metrics([self.tree], [1], [0]))


def test_trainer_passes_the_invalid_action_penalty_to_tree_credit(tiny_policy: TransformersPolicy) -> None:
    overrides = ["rollout.sampler=tree", "algorithm.credit=soft", "algorithm.estimator=drgrpo", "train.group_size=3"]
    chat, tasks = ChatFormat(tiny_policy.tokenizer), [_tree().task]
    shaped = collect_rollouts(load_config(None, [*overrides, "algorithm.invalid_action_penalty=0.5"]), tiny_policy,
                              chat, tasks, SamplingParams(), 1, tree_sampler=_FixedTreeSampler(_tree_with_rejected_leaf()))
    # the rows of test_invalid_action_penalty_lowers_the_rejected_turns_return, right-padded to 7 ids
    a, b, c = 5 / 6, -2 / 3, -1 / 6
    expected = torch.tensor([[0, 0, a, a, a, a, 0], [0, 0, b, b, b, b, b], [0, 0, c, 0, 0, 0, 0]])
    torch.testing.assert_close(shaped.advantages, expected)
    assert shaped.keep.tolist() == [True, True, True]


def test_tree_metrics_split_leaf_success_by_origin_hand_computed() -> None:
    branched = _tree()
    branched.nodes[3].branched = True  # node 3 split off node 1: the boundary after turn 1
    metrics = tree_metrics([branched, _tree()], num_globals=[2, 3], num_branches=[1, 0])
    # global leaves: 2 (success), 4; 2, 3, 4 of the unbranched tree (one success) -> 2 / 5
    assert metrics["leaf_success"] == {"global": pytest.approx(0.4), "branched": 0.0}
    assert metrics["branch_depth_mean"] == 1.0 and metrics["branches"] == 1
    unbranched = tree_metrics([_tree()], num_globals=[3], num_branches=[0])
    assert unbranched["leaf_success"] == {"global": pytest.approx(1 / 3)} and unbranched["branch_depth_mean"] == 0.0
