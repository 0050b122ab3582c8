"""Group advantage estimators and DAPO reward pieces, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from rlvr_gym_agents.credit.estimators import (
    ADVANTAGE_ESTIMATORS,
    broadcast_to_tokens,
    discounted_returns,
    gigpo_advantages,
    group_advantages,
    nonzero_variance_groups,
)
from rlvr_gym_agents.experimental import masked_whiten, overlong_penalty, turn_rloo_advantages

REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 5.0])
GROUPS = torch.tensor([7, 7, 7, 7, 3, 3, 9])  # arbitrary labels; group 3 all-equal, group 9 singleton


def test_grpo_hand_computed() -> None:
    # group 7: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = 0.57735 -> +-0.5 / 0.57735 = +-0.866025
    adv = group_advantages(REWARDS, GROUPS, "grpo")
    s = 0.5 / math.sqrt(1.0 / 3.0)
    expected = torch.tensor([s, -s, -s, s, 0.0, 0.0, 0.0])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=0)


def test_grpo_unit_std_within_group() -> None:
    adv = group_advantages(torch.tensor([0.3, 1.7, -2.0, 0.4, 9.0]), torch.zeros(5, dtype=torch.long))
    assert abs(float(adv.std()) - 1.0) < 1e-4


def test_drgrpo_hand_computed() -> None:
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([0, 0, 0]), "drgrpo")
    torch.testing.assert_close(adv, torch.tensor([2 / 3, -1 / 3, -1 / 3]))


def test_rloo_hand_computed_and_scaling() -> None:
    rewards = torch.tensor([1.0, 0.0, 0.0])
    adv = group_advantages(rewards, torch.tensor([0, 0, 0]), "rloo")
    torch.testing.assert_close(adv, torch.tensor([1.0, -0.5, -0.5]))
    torch.testing.assert_close(adv, 3 / 2 * (rewards - rewards.mean()))


@pytest.mark.parametrize("estimator", sorted(ADVANTAGE_ESTIMATORS))
def test_sum_zero_per_group_and_equal_groups_zero(estimator: str) -> None:
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(40, generator=gen)
    groups = torch.randint(0, 5, (40,), generator=gen)
    adv = group_advantages(rewards, groups, estimator)
    for g in groups.unique():
        assert abs(float(adv[groups == g].sum())) < 1e-4
    adv_eq = group_advantages(REWARDS, GROUPS, estimator)
    assert torch.all(adv_eq[4:] == 0)  # all-equal group and singleton -> exactly 0
    assert torch.isfinite(adv_eq).all()


def test_bad_input_raises() -> None:
    with pytest.raises(KeyError, match="grpo"):
        group_advantages(REWARDS, GROUPS, "nope")
    with pytest.raises(ValueError, match=r"\(B,\)"):
        group_advantages(REWARDS, GROUPS[:3])


def test_masked_whiten_mean_zero_var_one() -> None:
    values = torch.tensor([[1.0, 2.0, 99.0], [3.0, 4.0, -50.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    out = masked_whiten(values, mask)
    valid = out[mask.bool()]
    assert abs(float(valid.mean())) < 1e-6
    assert abs(float(valid.var()) - 1.0) < 1e-6
    assert torch.all(out[~mask.bool()] == 0)
    with pytest.raises(ValueError, match="at least 2"):
        masked_whiten(values, torch.zeros_like(mask))


def test_broadcast_to_tokens_masks() -> None:
    out = broadcast_to_tokens(torch.tensor([2.0, -1.0]), torch.tensor([[1, 0, 1], [0, 1, 1]]))
    torch.testing.assert_close(out, torch.tensor([[2.0, 0.0, 2.0], [0.0, -1.0, -1.0]]))
    per_token = broadcast_to_tokens(
        torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), torch.tensor([[1, 0, 1], [0, 1, 1]])
    )
    torch.testing.assert_close(per_token, torch.tensor([[1.0, 0.0, 3.0], [0.0, 5.0, 6.0]]))
    with pytest.raises(ValueError, match="match the mask"):
        broadcast_to_tokens(torch.zeros(2, 4), torch.ones(2, 3))


def test_overlong_penalty_piecewise_linear() -> None:
    # L_max 10, L_buf 4: zero up to 6, -0.5 at 8, -1 at 10 and beyond
    out = overlong_penalty(torch.tensor([5, 6, 8, 10, 12]), max_length=10, buffer_length=4)
    torch.testing.assert_close(out, torch.tensor([0.0, 0.0, -0.5, -1.0, -1.0]))
    assert torch.all(overlong_penalty(torch.arange(30), 20, 5, 2.0) <= 0)
    with pytest.raises(ValueError):
        overlong_penalty(torch.tensor([1]), max_length=4, buffer_length=0)


def test_dynamic_sampling_filter() -> None:
    keep = nonzero_variance_groups(REWARDS, GROUPS)
    assert keep.tolist() == [True, True, True, True, False, False, False]


# ---------------------------------------------------------------------------------------------------------
# Turn-level credit


def test_discounted_returns_recursion() -> None:
    rewards = torch.tensor([1.0, 0.0, 2.0, 5.0, 3.0])
    traj = torch.tensor([0, 0, 0, 1, 1])
    out = discounted_returns(rewards, traj, gamma=0.5)
    # traj 0: G2 = 2, G1 = 0 + 0.5 * 2 = 1, G0 = 1 + 0.5 * 1 = 1.5; traj 1: G1 = 3, G0 = 5 + 1.5
    torch.testing.assert_close(out, torch.tensor([1.5, 1.0, 2.0, 6.5, 3.0], dtype=torch.float64))


def test_gigpo_hand_computed() -> None:
    rewards = torch.tensor([0.0, 1.0, 0.0, 0.0])
    traj = torch.tensor([0, 0, 1, 1])
    group = torch.tensor([0, 0, 0, 0])
    anchors = ["s0", "s1", "s0", "s2"]
    # A^E = +-0.5; returns (gamma 0.5): [0.5, 1, 0, 0]; anchor s0 -> A^S = +-0.25; s1, s2 singletons -> 0
    adv = gigpo_advantages(rewards, traj, group, anchors, gamma=0.5, omega=1.0)
    torch.testing.assert_close(adv, torch.tensor([0.75, 0.5, -0.75, -0.5], dtype=torch.float64))
    episode_only = gigpo_advantages(rewards, traj, group, anchors, gamma=0.5, omega=0.0)
    torch.testing.assert_close(episode_only, torch.tensor([0.5, 0.5, -0.5, -0.5], dtype=torch.float64))
    distinct = gigpo_advantages(rewards, traj, group, ["a", "b", "c", "d"], gamma=0.5, omega=1.0)
    torch.testing.assert_close(distinct, episode_only)


def test_gigpo_anchor_groups_never_mix_tasks_and_sum_to_zero() -> None:
    rewards = torch.tensor([0.0, 1.0, 0.0, 0.0, 0.0, 3.0])
    traj = torch.tensor([0, 0, 1, 1, 2, 2])
    group = torch.tensor([0, 0, 0, 0, 1, 1])
    anchors = ["s0", "s1", "s0", "s2", "s0", "s1"]  # task 1's "s0" is a different state
    omega_1 = gigpo_advantages(rewards, traj, group, anchors, gamma=1.0, omega=1.0)
    omega_0 = gigpo_advantages(rewards, traj, group, anchors, gamma=1.0, omega=0.0)
    step = omega_1 - omega_0
    assert step[4] == 0 and step[5] == 0  # task 1 has one trajectory: singleton anchor groups
    assert float(step[0] + step[2]) == pytest.approx(0.0)
    with pytest.raises(ValueError, match="anchor key"):
        gigpo_advantages(rewards, traj, group, anchors[:2])


def _stopping_problem_trajectories() -> list[tuple[list[int], list[float]]]:
    """(actions, rewards) of every trajectory: action 1 = continue (+0.3), 0 = stop (final reward F[t])."""
    final = [0.0, 1.0, 0.5]
    return [([0], [final[0]]), ([1, 0], [0.3, final[1]]), ([1, 1, 0], [0.3, 0.3, final[2]])]


def _naive_per_turn_index(rewards: list[list[float]]) -> list[list[float]]:
    """MT-GRPO-style: per-turn reward minus the turn-index group mean, summed up to the own last turn."""
    out = []
    for own in rewards:
        per_turn = []
        for k, r in enumerate(own):
            alive = [traj[k] for traj in rewards if len(traj) > k]
            per_turn.append(r - sum(alive) / len(alive))
        out.append([sum(per_turn[t:]) for t in range(len(own))])
    return out


def _expected_estimator(theta: torch.Tensor, estimator: str) -> torch.Tensor:
    """Exact E[sum_i sum_t A_it grad log pi(a_it)] over all pairs of trajectories (group of 2), by autograd."""
    trajs = _stopping_problem_trajectories()

    def log_pi(actions: list[int]) -> list[torch.Tensor]:
        # turns 0 and 1 are decisions with P(continue) = sigmoid(theta_t); turn 2 always stops
        return [
            torch.nn.functional.logsigmoid(theta[t] if a else -theta[t]) if t < 2 else theta.sum() * 0
            for t, a in enumerate(actions)
        ]

    surrogate = torch.zeros((), dtype=torch.float64)
    for a_i, r_i in trajs:
        for a_j, r_j in trajs:
            prob = torch.exp(sum(log_pi(a_i)) + sum(log_pi(a_j))).detach()
            rewards = [r_i, r_j]
            if estimator == "naive":
                adv = _naive_per_turn_index(rewards)
            else:
                flat = torch.tensor(r_i + r_j, dtype=torch.float64)
                traj = torch.tensor([0] * len(r_i) + [1] * len(r_j))
                a = turn_rloo_advantages(flat, traj, torch.zeros(len(flat), dtype=torch.long)).tolist()
                adv = [a[: len(r_i)], a[len(r_i) :]]
            for actions, advs in zip([a_i, a_j], adv, strict=True):
                surrogate = surrogate + prob * sum(float(x) * lp for x, lp in zip(advs, log_pi(actions), strict=True))
    (grad,) = torch.autograd.grad(surrogate, theta)
    return grad


def test_turn_rloo_is_unbiased_under_policy_controlled_stopping() -> None:
    theta = torch.tensor([0.4, -0.7], dtype=torch.float64, requires_grad=True)
    trajs = _stopping_problem_trajectories()
    p_cont = torch.sigmoid(theta)
    probs = [1 - p_cont[0], p_cont[0] * (1 - p_cont[1]), p_cont[0] * p_cont[1]]
    objective = sum(p * sum(r) for p, (_, r) in zip(probs, trajs, strict=True))
    (true_grad,) = torch.autograd.grad(objective, theta)
    # each of the 2 group members is an unbiased estimate: the expectation is 2 x the true gradient
    torch.testing.assert_close(_expected_estimator(theta, "turn_rloo"), 2 * true_grad)
    naive = _expected_estimator(theta, "naive")
    assert float((naive - 2 * true_grad).abs().max()) > 1e-2  # the per-turn-index construction is biased


def test_turn_rloo_hand_computed() -> None:
    # traj 0 takes 2 turns (rewards 0.3, 1.0), traj 1 one turn (0.0); gamma 1
    adv = turn_rloo_advantages(torch.tensor([0.3, 1.0, 0.0]), torch.tensor([0, 0, 1]), torch.zeros(3, dtype=torch.long))
    # G = [1.3, 1.0 | 0.0]; baselines: row0 vs traj1 turn0 = 0; row1 vs traj1 turn1 (ended) = 0; row2 vs 1.3
    torch.testing.assert_close(adv, torch.tensor([1.3, 1.0, -1.3], dtype=torch.float64))
