"""Policy losses for RL from verifiable rewards: pure functions over (B, T) token tensors.

Every loss is ``per-token surrogate -> aggregation``; the per-token surrogates are selected by
:attr:`LossConfig.name` from :data:`LOSSES`:

- ``"ppo_clip"``: PPO clipped surrogate (Schulman et al. 2017) with asymmetric clip (DAPO clip-higher,
  Yu et al. 2025) and optional dual clip (Ye et al. 2019). verl ``compute_policy_loss_vanilla``.
- ``"aepo"``: AEPO entropy-balanced clipping (Dong et al. 2025, arXiv 2510.14545 §4): same forward value as
  ``ppo_clip``, but the upper clip bound is (1+eps_high) * r / sg(r), so a token with A > 0 and r > 1+eps_high
  still gets the gradient -A (1+eps_high) grad log pi instead of 0.
- ``"gspo"``: GSPO sequence-level ratio s_i = exp(mean_t (log pi - log pi_old)) (Zheng et al. 2025).
- ``"clip_cov"`` / ``"kl_cov"``: covariance-based entropy controls (Cui et al. 2025, arXiv 2505.22617).

Modifiers that apply to any surrogate: the AEPO entropy-aware advantage
(``entropy_advantage_weight``), the top-rho high-entropy "forking token" mask (Wang et al. 2025,
``top_entropy_quantile``), a KL penalty to a reference model and an entropy bonus.

Aggregation modes (verl ``agg_loss``; ``shared/reference/algorithms.md`` §5.8): ``token_mean``,
``seq_mean_token_sum``, ``seq_mean_token_mean``, ``seq_mean_token_sum_norm``. Pass ``global_token_count`` /
``stats`` computed once over the whole mini-batch (:func:`batch_stats`) to make every micro-batch's loss a
summand of the mini-batch loss, so the gradient does not depend on how the mini-batch is split.

All tensors are (B, T) over response positions; ``mask`` is 1 on tokens the policy generated and 0 on
prompt, observation, tool-output and padding tokens, which get zero loss and zero gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor

from rlvr_gym_agents.update.correction import CORRECTIONS, LEVELS

AGGREGATIONS = ("token_mean", "seq_mean_token_sum", "seq_mean_token_mean", "seq_mean_token_sum_norm")
KL_ESTIMATORS = ("k1", "abs", "k2", "k3", "k1+", "k3+")
LOG_RATIO_CLAMP = 20.0  # verl clamps log pi - log pi_old to +-20 before exp to avoid inf


@dataclass
class LossConfig:
    """Which policy loss to use and its hyper-parameters (a recipe's ``loss:`` section)."""

    name: str = "ppo_clip"
    """Per-token surrogate, a key of LOSSES: ppo_clip, aepo, gspo, clip_cov, kl_cov."""
    clip_low: float = 0.2
    """eps_low: the ratio is clipped below at 1 - clip_low."""
    clip_high: float = 0.2
    """eps_high: the ratio is clipped above at 1 + clip_high (DAPO clip-higher: 0.28)."""
    dual_clip: float | None = None
    """c > 1: for A < 0 the loss is bounded by -A * c (Ye et al. 2019; verl default 3.0). None = off."""
    aggregation: str = "token_mean"
    """token_mean | seq_mean_token_sum | seq_mean_token_mean | seq_mean_token_sum_norm."""
    loss_scale_factor: float | None = None
    """Constant divisor C of seq_mean_token_sum_norm (Dr. GRPO; e.g. the max response length). None = T."""
    kl_coef: float = 0.0
    """Weight of the KL(pi || pi_ref) loss term; needs ref_logp when > 0."""
    kl_estimator: str = "k1"
    """k1 | abs | k2 | k3 | k1+ | k3+ (Schulman 2020 estimators; '+' = straight-through k2 gradient)."""
    entropy_coef: float = 0.0
    """Weight of the entropy bonus (subtracted from the loss); needs entropy when > 0."""
    entropy_advantage_weight: float = 0.0
    """AEPO entropy-aware advantage A * (1 + w * sg(z(H))); AEPO uses 0.2. 0 = off."""
    top_entropy_quantile: float = 1.0
    """rho: only the top-rho fraction of tokens by entropy get a policy-gradient loss (0.2 in Wang et al.)."""
    clip_cov_ratio: float = 2e-4
    """clip_cov: fraction of valid tokens whose gradient is detached."""
    clip_cov_bounds: tuple[float, float] = (1.0, 5.0)
    """clip_cov: (lb, ub) covariance window of candidate tokens."""
    kl_cov_ratio: float = 2e-4
    """kl_cov: fraction of valid tokens (top covariance) that get the |log-ratio| penalty."""
    kl_cov_coef: float = 1.0
    """kl_cov: weight of the |log pi - log pi_old| penalty."""
    rollout_correction: str = "none"
    """Training-inference mismatch correction (:mod:`.correction`): ``none`` (the rollout's log-probs are pi_old),
    ``tis`` (pi_old recomputed by the trainer; each token's loss weighted by min(pi_train / pi_rollout, cap)) or
    ``mis`` (the same, tokens with a ratio outside [cap_low, cap] dropped)."""
    rollout_correction_cap: float = 2.0
    """C: the truncation of ``tis``, the top of ``mis``'s band (2.0 in Yao et al. 2025)."""
    rollout_correction_low: float | None = None
    """The bottom of ``mis``'s band; None = 1 / cap."""
    rollout_correction_level: str = "token"
    """``token`` (a ratio per token) or ``sequence`` (the product over the sequence; one weight per sequence)."""
    extra: dict[str, float] = field(default_factory=dict)
    """Reserved for experimental surrogates; unused by the built-in ones."""

    def __post_init__(self) -> None:
        if self.name not in LOSSES:
            raise ValueError(f"Unknown loss {self.name!r}; expected one of {sorted(LOSSES)}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"Unknown aggregation {self.aggregation!r}; expected one of {AGGREGATIONS}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"Unknown kl_estimator {self.kl_estimator!r}; expected one of {KL_ESTIMATORS}")
        if not (0.0 <= self.clip_low < 1.0 and self.clip_high >= 0.0):
            raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0; got {self.clip_low}, {self.clip_high}")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1 (e.g. 3.0) or None; got {self.dual_clip}")
        if self.rollout_correction not in CORRECTIONS or self.rollout_correction_level not in LEVELS:
            raise ValueError(f"rollout_correction must be one of {CORRECTIONS} and rollout_correction_level one of "
                             f"{LEVELS}; got {self.rollout_correction!r}, {self.rollout_correction_level!r}")
        low = self.rollout_correction_low
        if self.rollout_correction_cap <= 1.0 or (low is not None and not 0.0 <= low <= 1.0):
            raise ValueError(f"need rollout_correction_cap > 1 and rollout_correction_low in [0, 1] (or null); got "
                             f"{self.rollout_correction_cap}, {low}")
        if not 0.0 < self.top_entropy_quantile <= 1.0:
            raise ValueError(f"top_entropy_quantile must be in (0, 1]; got {self.top_entropy_quantile}")


@dataclass(frozen=True)
class BatchStats:
    """Statistics of a whole mini-batch, computed once and passed to every micro-batch's loss call.

    Without them each micro-batch would normalise by its own token count / entropy statistics, which makes
    the update depend on the micro-batch split (a known bug of the ARPO/AEPO verl forks).
    """

    token_count: float
    """Number of valid (mask = 1) tokens in the mini-batch."""
    seq_count: float
    """Number of sequences with at least one valid token."""
    entropy_mean: float | None = None
    entropy_std: float | None = None
    entropy_threshold: float | None = None
    """Entropy quantile 1 - rho over valid tokens (top-entropy mask); None when rho = 1 or no entropy."""


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``values`` over positions where ``mask`` is 1 (0 where no position is valid).

    Shape: values and mask broadcastable; returns a scalar (dim=None) or the reduced tensor.
    """
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1.0)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def batch_stats(mask: Tensor, entropy: Tensor | None = None, top_entropy_quantile: float = 1.0) -> BatchStats:
    """Compute :class:`BatchStats` over a whole mini-batch. Shape: mask (B, T); entropy (B, T) nats."""
    valid = mask.bool()
    return stats_of(float(valid.sum()), float(valid.any(dim=-1).sum()),
                    entropy.detach()[valid] if entropy is not None else None, top_entropy_quantile)


def stats_of(token_count: float, seq_count: float, valid_entropy: Tensor | None,
             top_entropy_quantile: float = 1.0) -> BatchStats:
    """:class:`BatchStats` from a mini-batch's counts and the entropies of its valid tokens, wherever they were
    computed (one process: :func:`batch_stats`; a learner group: counts summed and entropies gathered over ranks).

    Args:
        token_count / seq_count: valid tokens / sequences with a valid token, in the whole mini-batch.
        valid_entropy: (N,) entropies (nats) of the N = token_count valid tokens, in any order; None: no entropy
            statistics.
        top_entropy_quantile: rho of the top-entropy mask (< 1 sets ``entropy_threshold``).
    """
    stats: dict[str, float] = {"token_count": token_count, "seq_count": seq_count}
    if valid_entropy is not None and valid_entropy.numel() > 0:
        h = valid_entropy.detach().double()
        stats["entropy_mean"] = float(h.mean())
        std = float(h.std()) if h.numel() > 1 else 0.0
        stats["entropy_std"] = std if std > 0 else 1.0
        if top_entropy_quantile < 1.0:
            stats["entropy_threshold"] = float(torch.quantile(h, 1.0 - top_entropy_quantile))
    return BatchStats(**stats)


def aggregate_loss(
    token_loss: Tensor,
    mask: Tensor,
    mode: str = "token_mean",
    global_token_count: float | None = None,
    global_seq_count: float | None = None,
    loss_scale_factor: float | None = None,
) -> Tensor:
    """Reduce a per-token loss to a scalar.

    - token_mean: sum(m l) / N_tokens (DAPO; verl default).
    - seq_mean_token_sum: sum_i sum_t m l / N_seq.
    - seq_mean_token_mean: sum_i (sum_t m l / sum_t m) / N_seq (original GRPO, GSPO).
    - seq_mean_token_sum_norm: sum(m l) / C with a constant C (Dr. GRPO; like verl, not divided by N_seq).

    With ``global_token_count`` / ``global_seq_count`` taken from the whole mini-batch, summing the results
    of the micro-batches gives exactly the mini-batch loss.

    Args:
        token_loss: (B, T). mask: (B, T), 1 = counted.
        mode: one of :data:`AGGREGATIONS`.
        global_token_count: N_tokens of the whole mini-batch; default: this batch's mask sum.
        global_seq_count: N_seq of the whole mini-batch; default: sequences here with a valid token.
        loss_scale_factor: C for seq_mean_token_sum_norm; default T (the padded length).

    Raises:
        ValueError: unknown mode.
    """
    m = mask.to(token_loss.dtype)
    masked = token_loss * m
    seq_count = global_seq_count if global_seq_count is not None else (m.sum(-1) > 0).sum().clamp(min=1)
    if mode == "token_mean":
        tokens = global_token_count if global_token_count is not None else m.sum().clamp(min=1.0)
        return masked.sum() / tokens
    if mode == "seq_mean_token_sum":
        return masked.sum() / seq_count
    if mode == "seq_mean_token_mean":
        return (masked.sum(-1) / m.sum(-1).clamp(min=1.0)).sum() / seq_count
    if mode == "seq_mean_token_sum_norm":
        return masked.sum() / (loss_scale_factor if loss_scale_factor is not None else token_loss.shape[-1])
    raise ValueError(f"Unknown aggregation {mode!r}; expected one of {AGGREGATIONS}")


def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: str = "k1") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from sampled-token log-probs (Schulman 2020, "Approximating KL").

    - k1: log pi - log pi_ref (unbiased, can be negative). abs: |k1|. k2: 0.5 (log pi - log pi_ref)^2.
    - k3: exp(d) - d - 1 with d = clamp(log pi_ref - log pi, -20, 20), clamped to [-10, 10] (verl low_var_kl).
    - k1+ / k3+: the value of k1 / k3 with the gradient of k2 (straight-through; unbiased KL gradient).

    Shape: logp, ref_logp (B, T) -> (B, T). Raises ValueError on an unknown estimator.
    """
    diff = logp - ref_logp
    base = estimator.rstrip("+")
    if base == "k1":
        value = diff
    elif base == "abs":
        value = diff.abs()
    elif base == "k2":
        value = 0.5 * diff**2
    elif base == "k3":
        d = (-diff).clamp(-20.0, 20.0)
        value = (torch.exp(d) - d - 1.0).clamp(-10.0, 10.0)
    else:
        raise ValueError(f"Unknown KL estimator {estimator!r}; expected one of {KL_ESTIMATORS}")
    if estimator.endswith("+"):
        k2 = 0.5 * diff**2
        value = k2 - k2.detach() + value.detach()
    return value


# ----------------------------------------------------------------------------------------------------------
# Per-token surrogates. Each takes (logp, old_logp, adv, mask, config) and returns (token_loss, metrics).

Surrogate = Callable[[Tensor, Tensor, Tensor, Tensor, LossConfig], tuple[Tensor, dict[str, Tensor]]]


def _ratio(logp: Tensor, old_logp: Tensor) -> tuple[Tensor, Tensor]:
    log_ratio = (logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    return torch.exp(log_ratio), log_ratio


def _apply_dual_clip(loss: Tensor, adv: Tensor, config: LossConfig) -> tuple[Tensor, Tensor]:
    if config.dual_clip is None:
        return loss, torch.zeros_like(loss, dtype=torch.bool)
    bound = -adv * config.dual_clip
    active = (adv < 0) & (loss > bound)
    return torch.where(adv < 0, torch.minimum(loss, bound), loss), active


def _ppo_clip(
    logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, config: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    ratio, log_ratio = _ratio(logp, old_logp)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high)
    loss = torch.maximum(unclipped, clipped)
    loss, dual = _apply_dual_clip(loss, adv, config)
    return loss, {"clipped": clipped > unclipped, "dual_clipped": dual, "ratio": ratio, "log_ratio": log_ratio}


def _aepo(
    logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, config: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """AEPO: the upper bound (1+eps_h) r / sg(r) equals 1+eps_h in value but carries the gradient of r."""
    ratio, log_ratio = _ratio(logp, old_logp)
    upper = (1.0 + config.clip_high) * ratio / ratio.detach()
    lower = torch.full_like(ratio, 1.0 - config.clip_low)
    clipped_ratio = torch.where(ratio > 1.0 + config.clip_high, upper, torch.where(ratio < lower, lower, ratio))
    unclipped = -adv * ratio
    clipped = -adv * clipped_ratio
    loss = torch.maximum(unclipped, clipped)
    loss, dual = _apply_dual_clip(loss, adv, config)
    return loss, {"clipped": clipped > unclipped, "dual_clipped": dual, "ratio": ratio, "log_ratio": log_ratio}


def _gspo(
    logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, config: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO: every token's ratio equals the sequence ratio in value; gradients flow token-wise."""
    log_ratio = (logp - old_logp) * mask
    seq_log_ratio = log_ratio.sum(-1) / mask.sum(-1).clamp(min=1.0)
    token_log_ratio = (seq_log_ratio.detach()[:, None] + logp - logp.detach()).clamp(max=10.0)
    ratio = torch.exp(token_log_ratio)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high)
    loss = torch.maximum(unclipped, clipped)
    return loss, {"clipped": clipped > unclipped, "ratio": ratio, "log_ratio": log_ratio}


def _covariance(adv: Tensor, logp: Tensor, mask: Tensor) -> Tensor:
    """Cov_{i,t} = (A - mean A)(log pi - mean log pi) over valid tokens, detached (Cui et al. 2025 Eq. 11)."""
    valid = mask.bool()
    a, lp = adv.detach(), logp.detach()
    return (a - a[valid].mean()) * (lp - lp[valid].mean())


def _clip_cov(
    logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, config: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clip-Cov: detach the gradient of k random tokens with covariance in (lb, ub) that PPO did not clip."""
    ratio, log_ratio = _ratio(logp, old_logp)
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high)
    is_clipped = clipped > unclipped
    valid = mask.bool()
    cov = _covariance(adv, logp, mask)
    lb, ub = config.clip_cov_bounds
    candidates = (valid & ~is_clipped & (cov > lb) & (cov < ub)).flatten().nonzero().squeeze(-1)
    num = max(1, int(config.clip_cov_ratio * int(valid.sum())))
    chosen = candidates[torch.randperm(len(candidates), device=candidates.device)[:num]]
    keep = torch.ones(logp.numel(), dtype=logp.dtype, device=logp.device)
    keep[chosen] = 0.0
    loss = unclipped * keep.view_as(logp)
    return loss, {"clipped": is_clipped, "cov_dropped": keep.view_as(logp) == 0, "ratio": ratio, "log_ratio": log_ratio}


def _kl_cov(
    logp: Tensor, old_logp: Tensor, adv: Tensor, mask: Tensor, config: LossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """KL-Cov: unclipped -A r everywhere, plus coef * |log r| on the top-k covariance tokens."""
    ratio, log_ratio = _ratio(logp, old_logp)
    valid = mask.bool()
    cov = _covariance(adv, logp, mask).masked_fill(~valid, -math.inf).flatten()
    num = min(max(1, int(config.kl_cov_ratio * int(valid.sum()))), int(valid.sum()))
    top = torch.topk(cov, num).indices
    penalised = torch.zeros(logp.numel(), dtype=torch.bool, device=logp.device)
    penalised[top] = True
    penalised = penalised.view_as(logp)
    loss = -adv * ratio + penalised.to(logp.dtype) * config.kl_cov_coef * log_ratio.abs()
    return loss, {
        "clipped": torch.zeros_like(valid),
        "kl_cov_penalised": penalised,
        "ratio": ratio,
        "log_ratio": log_ratio,
    }


LOSSES: dict[str, Surrogate] = {
    "ppo_clip": _ppo_clip,
    "aepo": _aepo,
    "gspo": _gspo,
    "clip_cov": _clip_cov,
    "kl_cov": _kl_cov,
}
"""Per-token policy surrogates selectable by name (``LossConfig.name``)."""


def entropy_aware_advantages(
    advantages: Tensor, entropy: Tensor, mask: Tensor, weight: float = 0.2, stats: BatchStats | None = None
) -> Tensor:
    """AEPO entropy-aware advantage: A * (1 + w * sg(z)), z = (H - mean_V H) / std_V H over valid tokens V.

    Dong et al. 2025 (arXiv 2510.14545) §4.2; AEPO code uses w = 0.2 and per-micro-batch statistics, which
    makes the result depend on the micro-batch split. Pass ``stats`` from :func:`batch_stats` over the whole
    mini-batch to avoid that. std := 1 when all entropies are equal (then the result equals A).

    Shape: advantages, entropy, mask (B, T) -> (B, T); masked positions keep their (zero) advantage.
    """
    if stats is None or stats.entropy_mean is None:
        stats = batch_stats(mask, entropy)
    if stats.entropy_mean is None or stats.entropy_std is None:
        return advantages
    z = (entropy.detach() - stats.entropy_mean) / stats.entropy_std
    return torch.where(mask.bool(), advantages * (1.0 + weight * z), advantages)


def high_entropy_mask(entropy: Tensor, mask: Tensor, quantile: float, threshold: float | None = None) -> Tensor:
    """80/20 forking-token mask (Wang et al. 2025, arXiv 2506.01939): keep valid tokens with H >= tau.

    tau = the (1 - quantile) quantile of entropies over valid tokens (or the given ``threshold``, computed
    over the whole mini-batch). Ties make the kept fraction >= quantile; padding is never kept; an input
    without valid tokens gives an all-False mask.

    Shape: entropy, mask (B, T) -> bool (B, T).
    """
    valid = mask.bool()
    if not valid.any():
        return torch.zeros_like(valid)
    if threshold is None:
        threshold = float(torch.quantile(entropy.detach()[valid].double(), 1.0 - quantile))
    return valid & (entropy.detach() >= threshold)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    config: LossConfig,
    ref_logp: Tensor | None = None,
    entropy: Tensor | None = None,
    global_token_count: float | None = None,
    stats: BatchStats | None = None,
    rollout_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """Total policy loss = agg(w * surrogate) + kl_coef * agg(KL) - entropy_coef * agg(H).

    Args:
        logp: log pi_theta of the sampled tokens (requires grad). Shape: (B, T).
        old_logp: log pi_old from the rollout/behaviour policy. Shape: (B, T).
        advantages: per-token advantages (already broadcast). Shape: (B, T).
        mask: 1 on policy-generated tokens, 0 elsewhere. Shape: (B, T).
        config: which surrogate and modifiers.
        ref_logp: log pi_ref, needed when ``config.kl_coef > 0``. Shape: (B, T).
        entropy: per-token entropy of the current policy in nats (may carry grad for the bonus). Shape: (B, T).
            Needed by entropy_coef > 0, entropy_advantage_weight > 0 and top_entropy_quantile < 1.
        global_token_count: valid tokens in the whole mini-batch (token_mean divisor); overrides ``stats``.
        stats: whole-mini-batch statistics from :func:`batch_stats`; default: computed from this batch.
        rollout_weights: w, detached importance weights of the training-inference mismatch correction
            (:func:`rlvr_gym_agents.update.correction.rollout_correction`); None = 1. Shape: (B, T).

    Returns:
        (scalar loss, metrics) with metrics ``pg_loss``, ``kl``, ``entropy``, ``clip_frac``, ``ratio_mean``,
        ``approx_kl_old`` (masked mean of -log r) as floats.

    Raises:
        ValueError: shape mismatch, or a term enabled without the tensor it needs.
    """
    _check_inputs(logp, old_logp, advantages, mask, config, ref_logp, entropy)
    valid = mask.bool()
    # Masked positions may hold anything (-inf log-probs of padding): zero them so 0 * inf never makes NaN.
    logp, old_logp = logp.masked_fill(~valid, 0.0), old_logp.masked_fill(~valid, 0.0)
    ref_logp = ref_logp.masked_fill(~valid, 0.0) if ref_logp is not None else None
    entropy = entropy.masked_fill(~valid, 0.0) if entropy is not None else None
    mask_f = mask.to(logp.dtype)
    if stats is None:
        stats = batch_stats(mask, entropy, config.top_entropy_quantile)
    counts = {
        "global_token_count": global_token_count if global_token_count is not None else stats.token_count,
        "global_seq_count": stats.seq_count,
        "loss_scale_factor": config.loss_scale_factor,
    }
    adv = advantages.detach() * mask_f
    if config.entropy_advantage_weight > 0:
        assert entropy is not None  # checked by _check_inputs
        adv = entropy_aware_advantages(adv, entropy, mask, config.entropy_advantage_weight, stats)
    token_loss, parts = LOSSES[config.name](logp, old_logp, adv, mask_f, config)
    pg_mask = mask_f
    if config.top_entropy_quantile < 1.0:
        assert entropy is not None
        pg_mask = mask_f * high_entropy_mask(entropy, mask, config.top_entropy_quantile, stats.entropy_threshold)
    if rollout_weights is not None:
        pg_mask = pg_mask * rollout_weights.detach().to(pg_mask.dtype)
    # The denominator stays the full token count: masking forking tokens must not rescale the loss.
    pg_loss = aggregate_loss(token_loss * pg_mask, mask_f, config.aggregation, **counts)
    loss = pg_loss
    metrics = {"pg_loss": float(pg_loss.detach())}
    if config.kl_coef > 0:
        assert ref_logp is not None
        kl = aggregate_loss(kl_penalty(logp, ref_logp, config.kl_estimator), mask_f, config.aggregation, **counts)
        loss = loss + config.kl_coef * kl
        metrics["kl"] = float(kl.detach())
    if entropy is not None:
        ent = aggregate_loss(entropy, mask_f, config.aggregation, **counts)
        if config.entropy_coef > 0:
            loss = loss - config.entropy_coef * ent
        metrics["entropy"] = float(ent.detach())
    metrics.update(_ratio_metrics(parts, mask))
    return loss, metrics


def _ratio_metrics(parts: dict[str, Tensor], mask: Tensor) -> dict[str, float]:
    m = mask.to(torch.float32)
    out = {
        "clip_frac": float(masked_mean(parts["clipped"].float(), m)),
        "ratio_mean": float(masked_mean(parts["ratio"].detach().float(), m)),
        "approx_kl_old": float(masked_mean(-parts["log_ratio"].detach().float(), m)),
    }
    if "dual_clipped" in parts:
        out["dual_clip_frac"] = float(masked_mean(parts["dual_clipped"].float(), m))
    return out


def _check_inputs(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    config: LossConfig,
    ref_logp: Tensor | None,
    entropy: Tensor | None,
) -> None:
    shapes = {"logp": logp, "old_logp": old_logp, "advantages": advantages, "mask": mask}
    shapes.update({k: v for k, v in {"ref_logp": ref_logp, "entropy": entropy}.items() if v is not None})
    if logp.ndim != 2 or any(t.shape != logp.shape for t in shapes.values()):
        got = {k: tuple(v.shape) for k, v in shapes.items()}
        raise ValueError(f"policy_loss expects (B, T) tensors of one shape; got {got}")
    if config.kl_coef > 0 and ref_logp is None:
        raise ValueError("config.kl_coef > 0 needs ref_logp (log-probs of the reference model)")
    needs_entropy = config.entropy_coef > 0 or config.entropy_advantage_weight > 0 or config.top_entropy_quantile < 1
    if needs_entropy and entropy is None:
        raise ValueError(
            "entropy_coef > 0, entropy_advantage_weight > 0 or top_entropy_quantile < 1 needs per-token entropy "
            "(compute it unconditionally: AEPO's code silently skipped the entropy-aware advantage without it)"
        )
