"""Group advantage estimators and DAPO reward pieces, checked against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch
from rlvr_gym_agents.advantages import (
    ADVANTAGE_ESTIMATORS,
    broadcast_to_tokens,
    group_advantages,
    masked_whiten,
    nonzero_variance_groups,
    overlong_penalty,
)

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
