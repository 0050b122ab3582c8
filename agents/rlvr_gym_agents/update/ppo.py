"""The policy update of the GRPO-family trainer: clipped policy-gradient steps on a batch of trajectories.

:func:`ppo_update` turns a batch of trajectories and their advantages into ``epochs`` x ``num_minibatches``
optimizer steps of :func:`rlvr_gym_agents.update.losses.policy_loss`. Each mini-batch runs its distinct prompts once
(:class:`~rlvr_gym_agents.update.scoring.PrefixTreeScorer`; a GRPO group's episodes share one), with
``share_tree_prefixes`` also the turns its rows share (a rollout tree's prefixes above its branch points), and cuts
the continuations into length-sorted micro-batches of at most ``micro_batch_tokens`` padded tokens
whose gradients are accumulated; the counts and entropy statistics every loss term divides by come from the
whole mini-batch
(:func:`~rlvr_gym_agents.update.losses.batch_stats`), so the step does not depend on the split
(``shared/reference/algorithms.md`` §5.8).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np
import torch

from rlvr_gym_agents.batching import pad_right
from rlvr_gym_agents.credit.estimators import broadcast_to_tokens
from rlvr_gym_agents.rollout.types import Trajectory
from rlvr_gym_agents.update.correction import rollout_correction
from rlvr_gym_agents.update.losses import BatchStats, LossConfig, batch_stats, policy_loss
from rlvr_gym_agents.update.precision import autocast, model_device
from rlvr_gym_agents.update.scoring import PrefixTreeScorer


@dataclasses.dataclass
class UpdateConfig:
    """What the update reads (built from the recipe's ``algorithm``, ``rollout`` and ``train`` sections)."""

    epochs: int = 2
    """Passes over each batch of rollouts."""
    num_minibatches: int = 2
    """Optimizer steps per epoch."""
    micro_batch_tokens: int | None = 4096
    """Padded continuation tokens per forward/backward pass (None: one pass per mini-batch)."""
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    """The policy loss."""
    temperature: float = 1.0
    """The rollouts' sampling temperature: log-probs are recomputed under the same distribution."""
    max_grad_norm: float = 1.0
    """Gradient clipping (global L2 norm)."""
    autocast_dtype: str | None = None
    """Forward passes run under ``torch.autocast`` to this dtype (``bfloat16``/``float16``) over fp32 master weights
    (:mod:`rlvr_gym_agents.update.precision`); None: in the parameters' dtype."""
    share_tree_prefixes: bool = True
    """Run the ids that rows of a mini-batch share after their prompt (a tree's turns above a branch point) once,
    as the prompts are (:class:`~rlvr_gym_agents.update.scoring.PrefixTreeScorer`); same log-probs and gradients."""
    min_shared_tokens: int = 32
    """With ``share_tree_prefixes``: the shortest shared run of ids that gets a pass of its own."""


def ppo_update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, trajectories: list[Trajectory],
               advantages: torch.Tensor, config: UpdateConfig, ref_model: torch.nn.Module | None,
               pad_token_id: int) -> dict[str, float]:
    """``epochs`` x ``num_minibatches`` clipped policy-gradient steps on a batch of trajectories.

    Each mini-batch's distinct prompts (and, with ``share_tree_prefixes``, shared turns) run once
    (``PrefixTreeScorer``); its continuations are split into
    length-sorted micro-batches of at most ``micro_batch_tokens`` padded tokens
    (:func:`~rlvr_gym_agents.batching.length_micro_batches`); their gradients are accumulated into one
    optimizer step. Every micro-batch's loss is a summand of the mini-batch loss (counts and entropy statistics
    from the whole mini-batch, ``losses.batch_stats``), so the step does not depend on the split.

    Args:
        trajectories: B trajectories; advantages: (B,) one per trajectory, or (B, T') per token with T' at least
            the longest trajectory (right-padded; cropped to it).
        ref_model: the frozen reference policy for the KL term (None when ``kl_coef == 0``).

    Returns:
        Means over the optimizer steps of the loss metrics (``pg_loss``, ``kl``, ``entropy``, ``loss``: sums over
        micro-batches; ratio and clip fractions: token-weighted means), plus ``grad_norm`` and
        ``train_tokens_per_s`` (real, unpadded tokens).
    """
    batch = _UpdateBatch.build(trajectories, advantages, pad_token_id).to(model_device(model))
    loss_config = config.loss
    if loss_config.aggregation == "seq_mean_token_sum_norm" and loss_config.loss_scale_factor is None:
        # Dr. GRPO's constant: the batch's padded length, whatever the micro-batches are cropped to.
        loss_config = dataclasses.replace(loss_config, loss_scale_factor=float(batch.ids.shape[1]))
    if ref_model is not None:
        with torch.no_grad(), autocast(model_device(model), config.autocast_dtype):
            batch.ref_logp = _score(ref_model, batch, torch.arange(len(trajectories)), config, with_entropy=False)[0]
    correction = _correct_rollout_mismatch(model, batch, loss_config, config) if (
        loss_config.rollout_correction != "none") else {}
    model.train()
    history: list[dict[str, float]] = []
    began = time.monotonic()
    for _ in range(config.epochs):
        for rows in torch.randperm(len(trajectories)).chunk(min(config.num_minibatches, len(trajectories))):
            optimizer.zero_grad(set_to_none=True)
            step_metrics = _accumulate_gradients(model, batch, rows, loss_config, config)
            step_metrics["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                                             config.max_grad_norm))
            optimizer.step()
            history.append(step_metrics)
    means = {key: float(np.mean([h[key] for h in history if key in h])) for key in history[0]}
    tokens = config.epochs * sum(batch.lengths)
    means["train_tokens_per_s"] = tokens / max(time.monotonic() - began, 1e-9)
    return {**means, **correction}


def _correct_rollout_mismatch(model: torch.nn.Module, batch: _UpdateBatch, loss_config: LossConfig,
                              config: UpdateConfig) -> dict[str, float]:
    """Recomputes pi_old with the trainer (gradient-free, eval mode, the update's precision), makes it the batch's
    ``old_logp`` and sets the importance weights against the rollout engine's log-probs (:mod:`.correction`);
    returns the mismatch metrics."""
    model.eval()
    with torch.no_grad(), autocast(model_device(model), config.autocast_dtype):
        train_logp = _score(model, batch, torch.arange(len(batch.lengths)), config, with_entropy=False)[0]
    batch.rollout_weights, metrics = rollout_correction(
        train_logp, batch.old_logp, batch.mask, loss_config.rollout_correction, loss_config.rollout_correction_cap,
        loss_config.rollout_correction_low, loss_config.rollout_correction_level)
    batch.old_logp = train_logp
    return metrics


def _accumulate_gradients(model: torch.nn.Module, batch: _UpdateBatch, rows: torch.Tensor, loss_config: LossConfig,
                          config: UpdateConfig) -> dict[str, float]:
    """Backpropagates the loss of mini-batch ``rows``, micro-batch by micro-batch; returns its metrics.

    With one micro-batch, ``policy_loss`` takes the statistics from its own forward pass; with several, they come
    from the whole mini-batch (:func:`_minibatch_stats`), so every micro-batch loss is a summand of the same loss.
    Forward passes run under autocast to ``config.autocast_dtype`` (None: off); backward passes outside it.
    """
    max_tokens, autocast_dtype = config.micro_batch_tokens, config.autocast_dtype
    needs_entropy = (loss_config.entropy_coef > 0 or loss_config.entropy_advantage_weight > 0
                     or loss_config.top_entropy_quantile < 1.0)
    device = model_device(model)
    with autocast(device, autocast_dtype):
        scorer = batch.scorer(model, rows, config, needs_entropy)
        micros = scorer.micro_batches(rows, max_tokens)
        stats = _minibatch_stats(model, batch, rows, loss_config, config) if len(micros) > 1 else None
    parts = []
    for micro in micros:
        width = max(batch.lengths[r] for r in micro.tolist())
        with autocast(device, autocast_dtype):
            logp, entropy = scorer.logprobs(model, micro, with_entropy=needs_entropy)
        loss, metrics = policy_loss(
            logp, batch.old_logp[micro, :width], batch.token_adv[micro, :width], batch.mask[micro, :width],
            loss_config, entropy=entropy, stats=stats,
            ref_logp=batch.ref_logp[micro, :width] if batch.ref_logp is not None else None,
            rollout_weights=batch.rollout_weights[micro, :width] if batch.rollout_weights is not None else None,
        )
        loss.backward()
        metrics["loss"] = float(loss.detach())
        parts.append((metrics, float(batch.mask[micro].sum())))
    scorer.backward()
    return _combine_micro_metrics(parts)


@dataclasses.dataclass
class _UpdateBatch:
    """A batch of trajectories as right-padded (B, T) tensors, T = the longest trajectory."""

    ids: torch.Tensor
    mask: torch.Tensor
    old_logp: torch.Tensor
    token_adv: torch.Tensor
    lengths: list[int]
    prompt_lengths: list[int]
    pad_token_id: int
    ref_logp: torch.Tensor | None = None
    rollout_weights: torch.Tensor | None = None
    """Importance weights of the mismatch correction (None: off)."""

    @classmethod
    def build(cls, trajectories: list[Trajectory], advantages: torch.Tensor, pad_token_id: int) -> _UpdateBatch:
        mask = pad_right([t.loss_mask for t in trajectories], 0, torch.long)
        adv = advantages[:, : mask.shape[1]] if advantages.ndim == 2 else advantages
        return cls(ids=pad_right([t.token_ids for t in trajectories], pad_token_id, torch.long),
                   mask=mask, old_logp=pad_right([t.logps for t in trajectories], 0.0, torch.float32),
                   token_adv=broadcast_to_tokens(adv, mask), lengths=[len(t.token_ids) for t in trajectories],
                   prompt_lengths=[t.prompt_length for t in trajectories], pad_token_id=pad_token_id)

    def to(self, device: torch.device) -> _UpdateBatch:
        """The batch's tensors on ``device`` (the model's)."""
        return dataclasses.replace(self, ids=self.ids.to(device), mask=self.mask.to(device),
                                   old_logp=self.old_logp.to(device), token_adv=self.token_adv.to(device))

    def scorer(self, model: torch.nn.Module, rows: torch.Tensor, config: UpdateConfig,
               with_entropy: bool) -> PrefixTreeScorer:
        """Runs the shared prefixes of ``rows`` once (with autograd when enabled) to score their continuations."""
        return PrefixTreeScorer(model, self.ids, self.lengths, self.prompt_lengths, rows, config.temperature,
                                self.pad_token_id, share_turns=config.share_tree_prefixes,
                                min_shared_tokens=config.min_shared_tokens, max_tokens=config.micro_batch_tokens,
                                with_entropy=with_entropy)


def _score(model: torch.nn.Module, batch: _UpdateBatch, rows: torch.Tensor, config: UpdateConfig,
           with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of ``rows``, micro-batch by micro-batch, as (len(rows), T) zero-padded tensors."""
    logp = torch.zeros(len(rows), batch.ids.shape[1], device=batch.ids.device)
    entropy = torch.zeros_like(logp) if with_entropy else None
    where = {row: i for i, row in enumerate(rows.tolist())}
    scorer = batch.scorer(model, rows, config, with_entropy)
    for micro in scorer.micro_batches(rows, config.micro_batch_tokens):
        width = max(batch.lengths[r] for r in micro.tolist())
        out = [where[r] for r in micro.tolist()]
        micro_logp, micro_entropy = scorer.logprobs(model, micro, with_entropy=with_entropy)
        logp[out, :width] = micro_logp
        if entropy is not None and micro_entropy is not None:
            entropy[out, :width] = micro_entropy
    return logp, entropy


def _minibatch_stats(model: torch.nn.Module, batch: _UpdateBatch, rows: torch.Tensor, loss_config: LossConfig,
                     config: UpdateConfig) -> BatchStats:
    """Token and sequence counts of the mini-batch, and its entropy statistics when the loss needs them (one
    gradient-free pass, so that micro-batches share them: AEPO's entropy-aware advantage, the top-entropy mask)."""
    entropy = None
    if loss_config.entropy_advantage_weight > 0 or loss_config.top_entropy_quantile < 1.0:
        with torch.no_grad():
            entropy = _score(model, batch, rows, config, with_entropy=True)[1]
    return batch_stats(batch.mask[rows], entropy, loss_config.top_entropy_quantile)


_SUMMED_METRICS = ("pg_loss", "kl", "entropy", "loss")


def _combine_micro_metrics(parts: list[tuple[dict[str, float], float]]) -> dict[str, float]:
    """One optimizer step's metrics from its micro-batches': the loss terms add up (each micro-batch loss is a
    summand), the ratio statistics are means weighted by the micro-batch's valid tokens."""
    total = sum(weight for _, weight in parts) or 1.0
    combined: dict[str, float] = {}
    for key in parts[0][0]:
        values = [(m[key], w) for m, w in parts if key in m]
        combined[key] = (sum(v for v, _ in values) if key in _SUMMED_METRICS
                         else sum(v * w for v, w in values) / total)
    return combined
