"""Outcome and turn-level advantage estimators: pure functions over tensors.

Group estimators turn one scalar reward per trajectory into one advantage per trajectory, using the other
members of the trajectory's group (the rollouts of the same task) as the baseline:

- ``"grpo"``: A_i = (R_i - mean_g R) / (std_g R + eps), std unbiased (Shao et al. 2024, DeepSeekMath;
  verl ``compute_grpo_outcome_advantage``).
- ``"drgrpo"``: A_i = R_i - mean_g R (Liu et al. 2025, "Understanding R1-Zero-Like Training", Dr. GRPO).
- ``"rloo"``: A_i = R_i - mean_{j != i} R_j = n/(n-1) (R_i - mean_g R) (Ahmadian et al. 2024).

A group of one has no baseline; every estimator here returns 0 for it (verl returns the raw reward, which
is not centred and silently turns the update into REINFORCE without a baseline).

Turn-level credit (GiGPO anchor groups, returns-to-go with a baseline that stays unbiased when the policy
chooses when to stop) and DAPO's reward shaping / dynamic sampling live here too; tree credit lives in
:mod:`rlvr_gym_agents.credit.tree_values`. Formulas are specified in ``shared/reference/algorithms.md`` §3, §5, §8.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Sequence

import torch
from torch import Tensor

GroupEstimator = Callable[[Tensor, Tensor, float], Tensor]
"""A group estimator: (rewards (B,), dense group ids 0..G-1 (B,), eps) -> advantages (B,)."""


def _dense_groups(group_index: Tensor) -> tuple[Tensor, Tensor]:
    """Map arbitrary group labels to 0..G-1; return (dense ids (B,), counts (G,))."""
    _, dense = torch.unique(group_index, return_inverse=True)
    counts = torch.bincount(dense)
    return dense, counts


def _group_sum(values: Tensor, dense: Tensor, num_groups: int) -> Tensor:
    return torch.zeros(num_groups, dtype=values.dtype, device=values.device).index_add(0, dense, values)


def _grpo(rewards: Tensor, dense: Tensor, eps: float) -> Tensor:
    counts = torch.bincount(dense).to(rewards.dtype)
    mean = _group_sum(rewards, dense, len(counts)) / counts
    centred = rewards - mean[dense]
    var = _group_sum(centred**2, dense, len(counts)) / (counts - 1).clamp(min=1)
    adv = centred / (var.sqrt()[dense] + eps)
    return torch.where(counts[dense] > 1, adv, torch.zeros_like(adv))


def _drgrpo(rewards: Tensor, dense: Tensor, eps: float) -> Tensor:
    counts = torch.bincount(dense).to(rewards.dtype)
    mean = _group_sum(rewards, dense, len(counts)) / counts
    return torch.where(counts[dense] > 1, rewards - mean[dense], torch.zeros_like(rewards))


def _rloo(rewards: Tensor, dense: Tensor, eps: float) -> Tensor:
    counts = torch.bincount(dense).to(rewards.dtype)
    sums = _group_sum(rewards, dense, len(counts))
    others = (sums[dense] - rewards) / (counts[dense] - 1).clamp(min=1)
    return torch.where(counts[dense] > 1, rewards - others, torch.zeros_like(rewards))


ADVANTAGE_ESTIMATORS: dict[str, GroupEstimator] = {"grpo": _grpo, "drgrpo": _drgrpo, "rloo": _rloo}
"""Group estimators selectable by name from a recipe (``advantage: grpo``)."""


def group_advantages(rewards: Tensor, group_index: Tensor, estimator: str = "grpo", eps: float = 1e-6) -> Tensor:
    """One advantage per trajectory from its group's rewards.

    Args:
        rewards: scalar outcome reward per trajectory. Shape: (B,), float.
        group_index: group label per trajectory (same label = same task / prompt); any integers.
            Shape: (B,), long.
        estimator: a key of :data:`ADVANTAGE_ESTIMATORS` ("grpo", "drgrpo", "rloo").
        eps: added to the group std ("grpo" only), keeps all-equal groups finite (their advantage is 0).

    Returns:
        Advantages, shape (B,), same dtype as ``rewards``; they sum to zero within every group of size > 1,
        and are 0 for groups of size 1.

    Raises:
        KeyError: unknown estimator name.
        ValueError: shapes differ or are not 1-D.
    """
    if estimator not in ADVANTAGE_ESTIMATORS:
        raise KeyError(f"Unknown advantage estimator {estimator!r}; expected one of {sorted(ADVANTAGE_ESTIMATORS)}")
    if rewards.ndim != 1 or rewards.shape != group_index.shape:
        raise ValueError(
            f"rewards and group_index must both have shape (B,); got {tuple(rewards.shape)} and "
            f"{tuple(group_index.shape)}"
        )
    if rewards.numel() == 0:
        return rewards.clone()
    dense, _ = _dense_groups(group_index)
    return ADVANTAGE_ESTIMATORS[estimator](rewards.float() if not rewards.is_floating_point() else rewards, dense, eps)


def broadcast_to_tokens(advantages: Tensor, mask: Tensor) -> Tensor:
    """Per-token advantages (B, T), zero where ``mask`` is 0.

    Args:
        advantages: one per trajectory, shape (B,); or already per token (tree / turn-level credit, e.g.
            :meth:`rlvr_gym_agents.rollout.tree_sampler.TreeRollout.training_batch` padded to (B, T)), shape (B, T).
        mask: (B, T), 1 on trained tokens.

    Raises:
        ValueError: per-token advantages whose shape differs from the mask's.
    """
    if advantages.ndim == 2:
        if advantages.shape != mask.shape:
            raise ValueError(f"per-token advantages {tuple(advantages.shape)} must match the mask {tuple(mask.shape)}")
        return advantages.to(torch.float32) * mask.to(torch.float32)
    return advantages[:, None].to(torch.float32) * mask.to(torch.float32)


# ----------------------------------------------------------------------------------------------------------
# DAPO pieces: overlong reward shaping and dynamic sampling (Yu et al. 2025, arXiv 2503.14476, §3.2, §3.4)


def nonzero_variance_groups(rewards: Tensor, group_index: Tensor, atol: float = 0.0) -> Tensor:
    """DAPO dynamic sampling filter: True for trajectories whose group's rewards are not all equal.

    Zero-variance groups carry zero advantage under every group estimator, so they only dilute the batch.

    Shape: rewards (B,), group_index (B,) -> bool (B,).
    """
    dense, counts = _dense_groups(group_index)
    num = len(counts)
    big = torch.finfo(torch.float64).max
    r = rewards.double()
    low = torch.full((num,), big, dtype=torch.float64).scatter_reduce(0, dense, r, "amin")
    high = torch.full((num,), -big, dtype=torch.float64).scatter_reduce(0, dense, r, "amax")
    return (high - low)[dense] > atol


# ----------------------------------------------------------------------------------------------------------
# Turn-level credit. Inputs are "step rows": one row per turn, rows of a trajectory in turn order.


def discounted_returns(step_rewards: Tensor, traj_index: Tensor, gamma: float = 1.0) -> Tensor:
    """Returns-to-go G_t = r_t + gamma G_{t+1} within each trajectory (G_T = r_T at its last turn).

    Args:
        step_rewards: reward received after each turn. Shape: (S,).
        traj_index: trajectory id of each row; a trajectory's rows appear in turn order. Shape: (S,).
        gamma: discount in [0, 1].

    Returns:
        Shape (S,), float64.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"gamma must be in [0, 1]; got {gamma}")
    returns = torch.zeros(len(step_rewards), dtype=torch.float64)
    running: dict[int, float] = {}
    for row in range(len(step_rewards) - 1, -1, -1):
        traj = int(traj_index[row])
        running[traj] = float(step_rewards[row]) + gamma * running.get(traj, 0.0)
        returns[row] = running[traj]
    return returns


@dataclasses.dataclass
class GiGPOConfig:
    """GiGPO's step credit (Feng et al. 2025, arXiv 2505.10978), for ``algorithm.credit: gigpo``."""

    gamma: float = 0.95
    """Discount of the step returns-to-go, in [0, 1] (0.95 in every GiGPO example)."""
    omega: float = 1.0
    """Weight of the step advantage against the episode advantage (>= 0)."""
    std_norm: bool = False
    """Divide both advantages by their group's std (the paper's ALFWorld setting) instead of only centring."""


def gigpo_advantages(
    step_rewards: Tensor,
    traj_index: Tensor,
    group_index: Tensor,
    anchor_keys: Sequence[Hashable],
    gamma: float = 0.95,
    omega: float = 1.0,
    std_norm: bool = False,
    eps: float = 1e-6,
) -> Tensor:
    """GiGPO: A = A^E(trajectory) + omega * A^S(step) (Feng et al. 2025, arXiv 2505.10978, Eq. 3-8).

    - Episode advantage A^E: group estimator over the episode rewards R = sum_t r_t, *one entry per
      trajectory* (the paper's form; verl-agent's default counts each trajectory once per step, which weights
      long trajectories more in the baseline).
    - Step advantage A^S: rows with the same (group, anchor key) form an anchor group; A^S = (G_t - mean) /
      F_norm over the group's discounted returns-to-go G_t; singleton anchor groups get 0.
    - F_norm = std + eps if ``std_norm`` ("mean_std_norm") else 1 ("mean_norm").

    Args:
        step_rewards: reward after each turn. Shape: (S,).
        traj_index: trajectory id per row, rows in turn order. Shape: (S,).
        group_index: task/prompt group per row. Shape: (S,).
        anchor_keys: hashable key of the env state each turn started from (raw observation text, or the
            tree node a turn starts from, as :mod:`rlvr_gym_agents.credit.tree` does). Length S.
        gamma: step discount (0.95 in every GiGPO example). omega: step-advantage weight (1.0).
        std_norm: divide by the std (ALFWorld example) or not (WebShop/Sokoban). eps: std offset.

    Returns:
        Shape (S,) float64, to be broadcast over the action tokens of each turn.
    """
    if len(anchor_keys) != len(step_rewards):
        raise ValueError(f"need one anchor key per step row: {len(anchor_keys)} keys, {len(step_rewards)} rows")
    estimator = "grpo" if std_norm else "drgrpo"
    episode_adv = _episode_advantages(step_rewards, traj_index, group_index, estimator, eps)
    returns = discounted_returns(step_rewards, traj_index, gamma)
    keys = [(int(g), k) for g, k in zip(group_index.tolist(), anchor_keys, strict=True)]
    ids: dict[tuple[int, Hashable], int] = {}
    anchor_ids = torch.tensor([ids.setdefault(k, len(ids)) for k in keys], dtype=torch.long)
    step_adv = group_advantages(returns, anchor_ids, estimator, eps)
    return episode_adv + omega * step_adv


def _episode_advantages(
    step_rewards: Tensor, traj_index: Tensor, group_index: Tensor, estimator: str, eps: float
) -> Tensor:
    trajs, row_to_traj = torch.unique(traj_index, return_inverse=True)
    episode_reward = torch.zeros(len(trajs), dtype=torch.float64).index_add(0, row_to_traj, step_rewards.double())
    traj_group = torch.zeros(len(trajs), dtype=torch.long).index_copy(0, row_to_traj, group_index.long())
    return group_advantages(episode_reward, traj_group, estimator, eps)[row_to_traj]
