"""Tested pieces no recipe reaches yet; importing this module warns.

They graduate into a stage package once a recipe selects them and a measurement shows they help, or they are
removed (STYLE.md rule 17). Each is a pure function with a hand-computed test in
``tests/rlvr_gym_agents/test_experimental.py``:

- :func:`masked_whiten`: REINFORCE++ batch whitening of advantages.
- :func:`overlong_penalty`: DAPO's soft overlong punishment.
- :func:`turn_rloo_advantages`: a per-turn leave-one-out baseline that stays unbiased under variable turn counts.
- :func:`entropy_band_penalty`: a differentiable form of EPO's entropy smoothing.
"""

from __future__ import annotations

import warnings

import torch
from torch import Tensor

from rlvr_gym_agents.credit.estimators import discounted_returns

warnings.warn("rlvr_gym_agents.experimental: these functions are not used by any recipe yet", stacklevel=2)


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """Whiten over valid positions: (x - mean) / sqrt(var + eps), unbiased variance; masked positions -> 0.

    REINFORCE++ batch normalisation (Hu 2025; verl ``masked_whiten``).

    Args:
        values: any shape, float. mask: same shape, 1 = valid.

    Raises:
        ValueError: fewer than 2 valid positions (the variance is undefined).
    """
    mask = mask.to(values.dtype)
    count = mask.sum()
    if count < 2:
        raise ValueError(f"masked_whiten needs at least 2 valid positions, got {int(count)}")
    mean = (values * mask).sum() / count
    var = (((values - mean) ** 2) * mask).sum() / (count - 1)
    return (values - mean) * torch.rsqrt(var + eps) * mask


def overlong_penalty(lengths: Tensor, max_length: int, buffer_length: int, penalty_factor: float = 1.0) -> Tensor:
    """DAPO soft overlong punishment, to be added to the task reward.

    r_len(L) = 0 if L <= L_max - L_buf; -(L - (L_max - L_buf)) / L_buf * factor up to L_max; -factor beyond.

    Args:
        lengths: response lengths in tokens (generated tokens only). Shape: (B,).
        max_length: L_max, the response budget in tokens. buffer_length: L_buf, tokens, 0 < L_buf <= L_max.
        penalty_factor: the penalty at L_max (>= 0).

    Returns:
        Penalties, shape (B,), float, in [-penalty_factor, 0].
    """
    if not 0 < buffer_length <= max_length:
        raise ValueError(f"need 0 < buffer_length <= max_length; got buffer {buffer_length}, max {max_length}")
    excess = lengths.float() - (max_length - buffer_length)
    return (-excess / buffer_length * penalty_factor).clamp(min=-penalty_factor, max=0.0)


def _turn_numbers(traj_index: Tensor) -> list[int]:
    seen: dict[int, int] = {}
    turns = []
    for traj in traj_index.tolist():
        turns.append(seen.get(traj, 0))
        seen[traj] = turns[-1] + 1
    return turns


def turn_rloo_advantages(step_rewards: Tensor, traj_index: Tensor, group_index: Tensor, gamma: float = 1.0) -> Tensor:
    """Per-turn advantage A_{i,t} = G_{i,t} - mean_{j != i} G_{j,t}, unbiased under variable turn counts.

    G_{j,t} is trajectory j's return-to-go from its turn t, and **0 when j ended before turn t** (an ended
    episode sits in an absorbing state with zero reward). The baseline is computed from the *other*
    trajectories of the group only, with a fixed number of terms, so it does not depend on trajectory i's
    own actions, including its choice of when to stop.

    Why not per-turn-index normalisation (MT-GRPO style): normalising each turn's reward by the group mean
    at that turn index and summing those advantages up to the trajectory's own last turn subtracts
    one baseline term per turn taken; the number of terms depends on the policy's stopping decision, which
    makes the baseline action-dependent and biases the gradient with a hidden per-turn bonus of
    -E[intermediate reward] (verl RFC #7244). ``tests/rlvr_gym_agents/test_advantages.py`` checks by exact
    enumeration on a small stopping problem that this estimator is unbiased and that construction is not.

    Args:
        step_rewards: reward after each turn. Shape: (S,).
        traj_index: trajectory id per row, rows of a trajectory in turn order. Shape: (S,).
        group_index: group (task) id per row; constant within a trajectory. Shape: (S,).
        gamma: discount for the returns-to-go.

    Returns:
        Shape (S,) float64; rows of groups with one trajectory get 0.
    """
    returns = discounted_returns(step_rewards, traj_index, gamma)
    turns = _turn_numbers(traj_index)
    group_of = {int(t): int(g) for t, g in zip(traj_index.tolist(), group_index.tolist(), strict=True)}
    members: dict[int, set[int]] = {}
    for traj, group in group_of.items():
        members.setdefault(group, set()).add(traj)
    table = {(int(traj_index[r]), turns[r]): float(returns[r]) for r in range(len(returns))}
    adv = torch.zeros_like(returns)
    for row, (traj, turn) in enumerate(zip(traj_index.tolist(), turns, strict=True)):
        others = members[group_of[traj]] - {traj}
        if others:
            baseline = sum(table.get((j, turn), 0.0) for j in others) / len(others)
            adv[row] = returns[row] - baseline
    return adv


def entropy_band_penalty(
    entropy: Tensor, mask: Tensor, reference_entropy: Tensor, band: tuple[float, float] = (0.8, 1.2)
) -> Tensor:
    """Differentiable EPO entropy-smoothing penalty P = (H - clip(H, k_l H_ref, k_r H_ref))^2 per token.

    EPO (Xu et al. 2025, arXiv 2509.22576) keeps each token's entropy inside a band around the historical mean
    entropy of its env step; the released code builds the penalty from comparisons and constants, so it has no
    gradient (algorithms.md §6.4). This form is 0 inside the band and its gradient pushes H back toward it.
    Add ``coef * aggregate_loss(penalty, mask, ...)`` to the loss (coef about 1, band (0.8, 1.2)).

    Args:
        entropy: per-token entropy (nats), carrying gradient. Shape: (B, T).
        mask: 1 on trained tokens. Shape: (B, T).
        reference_entropy: H_ref, the historical mean entropy per row (B,) or per token (B, T), >= 0.
        band: (k_l, k_r) with 0 <= k_l <= k_r.

    Returns:
        Penalties, shape (B, T), 0 where ``mask`` is 0.
    """
    low, high = band
    if not 0.0 <= low <= high:
        raise ValueError(f"band must satisfy 0 <= low <= high, got {band}")
    ref = reference_entropy.detach()
    ref = ref[:, None] if ref.ndim == 1 else ref
    inside = torch.minimum(torch.maximum(entropy, low * ref), high * ref)
    return (entropy - inside) ** 2 * mask.to(entropy.dtype)
