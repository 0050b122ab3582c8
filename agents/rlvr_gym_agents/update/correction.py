"""Training-inference mismatch correction: importance weights between the rollout engine and the trainer.

A rollout engine (vLLM: other kernels, bf16, its own sampler) and the trainer assign different probabilities to the
same tokens even with the same weights, so the samples are slightly off-policy for the trainer. The correction
recomputes pi_train (the trainer's log-probs of the sampled tokens before the update), uses it as the PPO pi_old,
and multiplies each token's loss by a detached importance weight built from r = pi_train / pi_rollout:

- ``tis`` (truncated importance sampling): w = min(r, C) (Yao et al. 2025, "Your Efficient RL Framework Secretly
  Brings You Off-Policy RL Training", fengyao.notion.site; verl ``rollout_is`` with ``mode: truncate``);
- ``mis`` (masked importance sampling): w = r inside the band [C_low, C] and 0 outside it, so tokens (or whole
  sequences) the two engines disagree on are dropped instead of truncated (verl ``rollout_is`` ``mode: mask``);
- ``level: sequence``: r is the product over the sequence's tokens, exp(sum_t log r_t), one weight per sequence.

With ``top_p < 1`` vLLM's processed log-probs are renormalised over the nucleus while the trainer's are over the
whole vocabulary, so r < 1 on every kept token: the weights then also absorb that difference.

Metrics: ``mismatch_kl`` is the k3 estimate of KL(pi_rollout || pi_train) over valid tokens (samples come from the
rollout engine: mean of exp(d) - d - 1, d = log pi_train - log pi_rollout, >= 0), ``mismatch_k1`` the plain mean of
-d, ``rollout_is_weight_mean``, and ``rollout_is_clipped_frac`` (tis) or ``rollout_is_masked_frac`` (mis): the
fraction of valid tokens whose weight was truncated or dropped.
"""

from __future__ import annotations

import torch
from torch import Tensor

CORRECTIONS = ("none", "tis", "mis")
LEVELS = ("token", "sequence")
_LOG_RATIO_CLAMP = 20.0


def rollout_correction(train_logp: Tensor, rollout_logp: Tensor, mask: Tensor, mode: str = "tis", cap: float = 2.0,
                       lower: float | None = None, level: str = "token") -> tuple[Tensor, dict[str, float]]:
    """Detached importance weights pi_train / pi_rollout, truncated (tis) or masked (mis), and mismatch metrics.

    Args:
        train_logp: log pi_train of the sampled tokens, recomputed by the trainer. Shape: (B, T).
        rollout_logp: log pi_rollout, as the rollout engine reported them. Shape: (B, T).
        mask: 1 on generated tokens, 0 elsewhere (weights there are 1 and count nowhere). Shape: (B, T).
        mode: ``none`` (weights 1, metrics only), ``tis`` or ``mis``.
        cap: C, the upper bound (tis: the truncation; mis: the band's top), > 1 is typical (2.0 in Yao et al.).
        lower: mis: the band's bottom (default 1 / cap); ignored by tis.
        level: ``token`` (one ratio per token) or ``sequence`` (the product over each row's valid tokens).

    Returns:
        ``(weights, metrics)``: (B, T) float weights without gradient, and the metrics of the module docstring.

    Raises:
        ValueError: an unknown mode or level, or a cap/lower that is not positive.
    """
    if mode not in CORRECTIONS or level not in LEVELS:
        raise ValueError(f"rollout correction mode must be one of {CORRECTIONS} and level one of {LEVELS}; "
                         f"got {mode!r}, {level!r}")
    lower = 1.0 / cap if lower is None else lower
    if cap <= 0 or lower < 0 or lower > cap:
        raise ValueError(f"need cap > 0 and 0 <= lower <= cap; got cap={cap}, lower={lower}")
    valid = mask.bool()
    log_ratio = (train_logp.detach().float() - rollout_logp.detach().float()).masked_fill(~valid, 0.0)
    log_ratio = log_ratio.clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    metrics = _mismatch_metrics(log_ratio, valid)
    if level == "sequence":
        log_ratio = log_ratio.sum(dim=-1, keepdim=True).clamp(-_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP).expand_as(log_ratio)
    ratio = torch.exp(log_ratio)
    if mode == "none":
        weights = torch.ones_like(ratio)
    elif mode == "tis":
        weights = ratio.clamp(max=cap)
        metrics["rollout_is_clipped_frac"] = _valid_mean((ratio > cap).float(), valid)
    else:
        keep = (ratio >= lower) & (ratio <= cap)
        weights = torch.where(keep, ratio, torch.zeros_like(ratio))
        metrics["rollout_is_masked_frac"] = _valid_mean((~keep).float(), valid)
    weights = weights.masked_fill(~valid, 1.0)
    metrics["rollout_is_weight_mean"] = _valid_mean(weights, valid)
    return weights, metrics


def _mismatch_metrics(log_ratio: Tensor, valid: Tensor) -> dict[str, float]:
    """k3 and k1 estimates of KL(pi_rollout || pi_train) from d = log pi_train - log pi_rollout on valid tokens."""
    k3 = torch.exp(log_ratio) - log_ratio - 1.0
    return {"mismatch_kl": _valid_mean(k3, valid), "mismatch_k1": _valid_mean(-log_ratio, valid)}


def _valid_mean(values: Tensor, valid: Tensor) -> float:
    return float((values * valid).sum() / valid.sum().clamp(min=1))
