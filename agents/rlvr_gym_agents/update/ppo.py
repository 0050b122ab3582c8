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
from typing import Any, Protocol

import numpy as np
import torch

from rlvr_gym_agents.batching import pad_right
from rlvr_gym_agents.credit.estimators import broadcast_to_tokens
from rlvr_gym_agents.rollout.types import Trajectory
from rlvr_gym_agents.update.correction import rollout_correction
from rlvr_gym_agents.update.losses import BatchStats, LossConfig, batch_stats, policy_loss, stats_of
from rlvr_gym_agents.update.precision import autocast, clipped_step, grad_scaler, model_device, scaled_backward
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
               pad_token_id: int, scaler: torch.amp.GradScaler | None = None) -> dict[str, float]:
    """``epochs`` x ``num_minibatches`` clipped policy-gradient steps on a batch of trajectories.

    Each mini-batch's distinct prompts (and, with ``share_tree_prefixes``, shared turns) run once
    (``PrefixTreeScorer``); its continuations are split into
    length-sorted micro-batches of at most ``micro_batch_tokens`` padded tokens
    (:func:`~rlvr_gym_agents.batching.length_micro_batches`); their gradients are accumulated into one
    optimizer step. Every micro-batch's loss is a summand of the mini-batch loss (counts and entropy statistics
    from the whole mini-batch, ``losses.batch_stats``), so the step does not depend on the split.

    The same steps on several processes: :class:`rlvr_gym_agents.cluster.LearnerGroup` (each rank runs
    :func:`update_shard` on its rows of the same :func:`minibatch_plan`; :func:`merge_shards` combines them).

    Args:
        trajectories: B trajectories; advantages: (B,) one per trajectory, or (B, T') per token with T' at least
            the longest trajectory (right-padded; cropped to it).
        ref_model: the frozen reference policy for the KL term (None when ``kl_coef == 0``).
        scaler: the dynamic loss scaler of float16 autocast (:func:`~rlvr_gym_agents.update.precision.grad_scaler`),
            kept across updates by the caller; None: a fresh one for this call when ``config.autocast_dtype`` is
            float16 (none otherwise). A step whose gradients overflowed is skipped.

    Returns:
        Means over the optimizer steps of the loss metrics (``pg_loss``, ``kl``, ``entropy``, ``loss``: sums over
        micro-batches; ratio and clip fractions: token-weighted means), plus ``grad_norm`` and
        ``train_tokens_per_s`` (real, unpadded tokens); with a scaler, ``loss_scale`` (after the update) and
        ``skipped_steps`` (optimizer steps skipped for overflowed gradients; ``grad_norm`` averages the other
        steps', inf when every step was skipped).
    """
    if scaler is None:
        scaler = grad_scaler(model_device(model), config.autocast_dtype)
    plan = minibatch_plan(len(trajectories), config)
    loss_config = batch_loss_config(config.loss, trajectories)
    return merge_shards([update_shard(model, optimizer, trajectories, advantages, config, loss_config, ref_model,
                                      pad_token_id, plan, scaler=scaler)])


class Updater(Protocol):
    """What the trainer's RL step calls to update the policy: :class:`PPOUpdater` in the trainer's process, or a
    :class:`rlvr_gym_agents.cluster.LearnerGroup` of torch.distributed ranks (``cluster.learners > 1``). Either way
    the trainer's own model holds the new weights when ``update`` returns."""

    version: int
    """Updates done so far by this updater."""

    def update(self, trajectories: list[Trajectory], advantages: torch.Tensor) -> dict[str, float]:
        """One :func:`ppo_update` on the batch (same arguments and metrics)."""
        ...

    def pull_optimizer_state(self) -> None:
        """Makes the trainer's optimizer hold the optimizer state the updates left (before a checkpoint)."""
        ...

    def loss_scaler_state(self) -> dict[str, Any] | None:
        """float16's loss scaler state (``torch.amp.GradScaler.state_dict()``) for the checkpoint; None without one."""
        ...

    def load_loss_scaler_state(self, state: dict[str, Any] | None) -> None:
        """Restores :meth:`loss_scaler_state` on resume."""
        ...

    def close(self) -> None:
        """Releases what the updater started (processes, Ray)."""
        ...


@dataclasses.dataclass
class PPOUpdater:
    """The :class:`Updater` of one process: :func:`ppo_update` on the trainer's model and optimizer."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    config: UpdateConfig
    ref_model: torch.nn.Module | None
    pad_token_id: int
    version: int = 0
    scaler: torch.amp.GradScaler | None = None
    """float16 autocast's loss scaler (built from ``config.autocast_dtype`` when None)."""

    def __post_init__(self) -> None:
        if self.scaler is None:
            self.scaler = grad_scaler(model_device(self.model), self.config.autocast_dtype)

    def update(self, trajectories: list[Trajectory], advantages: torch.Tensor) -> dict[str, float]:
        """:func:`ppo_update` with this updater's model, optimizer, settings, reference model and loss scaler."""
        self.version += 1
        return ppo_update(self.model, self.optimizer, trajectories, advantages, self.config, self.ref_model,
                          self.pad_token_id, self.scaler)

    def loss_scaler_state(self) -> dict[str, Any] | None:
        """The loss scaler's ``state_dict()`` (None without one), for the checkpoint."""
        return self.scaler.state_dict() if self.scaler is not None else None

    def load_loss_scaler_state(self, state: dict[str, Any] | None) -> None:
        """Restores the loss scaler from a checkpoint (nothing to do without one, or without a saved state)."""
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)

    def pull_optimizer_state(self) -> None:
        """Nothing to do: the trainer's optimizer is the one that stepped."""

    def close(self) -> None:
        """Nothing to release."""


class GradientSync(Protocol):
    """How the ranks of a data-parallel update combine what each computed on its rows of a mini-batch.

    One process has nothing to combine (:func:`update_shard` with ``sync=None``); a learner group's ranks implement
    it with torch.distributed collectives (:class:`rlvr_gym_agents.cluster.sync.TorchDistributedSync`). Every
    rank calls every method once per mini-batch, in the same order, even when it holds none of its rows.
    """

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """The element-wise sum of ``values`` over ranks (same shape on every rank)."""
        ...

    def concat(self, values: torch.Tensor) -> torch.Tensor:
        """The 1-D ``values`` of every rank, concatenated in rank order (lengths may differ)."""
        ...

    def gather_parameters(self) -> None:
        """Makes the model's whole parameters present on this rank for the forward and backward passes up to the next
        :meth:`sum_gradients` (sharded ranks all-gather them; replicas have them: nothing to do). Called by every rank
        before the rollout-mismatch pass and before each mini-batch, so that the number of forward passes, which
        differs between ranks, needs no collective."""
        ...

    def sum_gradients(self, parameters: list[torch.nn.Parameter]) -> None:
        """Replaces each parameter's ``.grad`` (None counts as zeros) by its sum over ranks (sharded ranks: each keeps
        its shard of the sum)."""
        ...


def minibatch_plan(num_rows: int, config: UpdateConfig) -> list[torch.Tensor]:
    """The rows of every optimizer step: per epoch, a fresh ``torch.randperm`` (the global torch generator) cut
    into ``min(num_minibatches, num_rows)`` mini-batches. Drawn once by the caller, so every rank of a learner group
    steps through the same mini-batches as one process would."""
    return [rows for _ in range(config.epochs)
            for rows in torch.randperm(num_rows).chunk(min(config.num_minibatches, num_rows))]


def batch_loss_config(loss_config: LossConfig, trajectories: list[Trajectory]) -> LossConfig:
    """``loss_config`` with what depends on the whole batch filled in: Dr. GRPO's constant
    (``seq_mean_token_sum_norm`` without ``loss_scale_factor``) is the batch's padded length, the longest
    trajectory, whatever the micro-batches (or a rank's rows) are cropped to."""
    if loss_config.aggregation == "seq_mean_token_sum_norm" and loss_config.loss_scale_factor is None:
        longest = max(len(t.token_ids) for t in trajectories)
        return dataclasses.replace(loss_config, loss_scale_factor=float(longest))
    return loss_config


@dataclasses.dataclass
class ShardResult:
    """What one process computed in :func:`update_shard` (the whole update when it is alone)."""

    steps: list[list[tuple[dict[str, float], float]]]
    """Per optimizer step, the loss metrics of each of this shard's micro-batches and its valid-token count."""
    grad_norms: list[float]
    """Per optimizer step, the global gradient norm before clipping (equal on every rank)."""
    correction: dict[str, float]
    """The rollout-mismatch metrics of this shard's rows ({} when the correction is off)."""
    tokens: int
    """Real (unpadded) tokens trained on, over all epochs."""
    seconds: float
    """Wall time of the optimizer steps."""
    loss_scale: float | None = None
    """float16's loss scale after the update (None without a scaler)."""


def update_shard(model: torch.nn.Module, optimizer: torch.optim.Optimizer, trajectories: list[Trajectory],
                 advantages: torch.Tensor, config: UpdateConfig, loss_config: LossConfig,
                 ref_model: torch.nn.Module | None, pad_token_id: int, plan: list[torch.Tensor],
                 owned: list[int] | None = None, sync: GradientSync | None = None,
                 scaler: torch.amp.GradScaler | None = None) -> ShardResult:
    """The optimizer steps of ``plan`` on the rows ``owned`` of a batch; with ``sync``, one rank's share of them.

    Alone (``owned`` None, ``sync`` None) this is :func:`ppo_update`'s work. In a learner group every rank gets the
    whole batch, the same ``plan`` and ``loss_config`` and its own ``owned`` rows; the mini-batch statistics every
    loss divides by are summed (counts) and gathered (entropies) over ranks, so each rank's loss is a summand of
    the whole mini-batch's loss and the summed gradients are those of one process (``shared/reference/
    algorithms.md`` §5.8, applied across ranks instead of micro-batches).

    Args:
        trajectories / advantages: the whole batch, as for :func:`ppo_update`.
        loss_config: from :func:`batch_loss_config` over the whole batch.
        plan: the global row indices of each optimizer step (:func:`minibatch_plan`).
        owned: the rows this rank scores and back-propagates (None: all).
        sync: how ranks combine statistics and gradients (None: one process).
        scaler: float16's loss scaler (:func:`ppo_update`). Every rank skips the same steps: replicas hold the
            same summed gradients, and torch's scaler checks sharded (DTensor) gradients over all shards.
    """
    rows_here = list(range(len(trajectories))) if owned is None else list(owned)
    local_of = {row: i for i, row in enumerate(rows_here)}
    shard = trajectories if owned is None else [trajectories[r] for r in rows_here]
    batch = _UpdateBatch.build(shard, advantages if owned is None else advantages[rows_here],
                               pad_token_id).to(model_device(model))
    batch.sharing = config
    if ref_model is not None and shard:
        with torch.no_grad(), autocast(model_device(model), config.autocast_dtype):
            batch.ref_logp = _score(ref_model, batch, torch.arange(len(shard)), config.micro_batch_tokens,
                                    config.temperature, with_entropy=False)[0]
    if sync is not None:
        sync.gather_parameters()
    correction = _correct_rollout_mismatch(model, batch, loss_config, config) if (
        loss_config.rollout_correction != "none" and shard) else {}
    model.train()
    steps, norms = [], []
    began = time.monotonic()
    for rows in plan:
        local = torch.tensor([local_of[r] for r in rows.tolist() if r in local_of], dtype=torch.long)
        optimizer.zero_grad(set_to_none=True)
        if sync is not None:
            sync.gather_parameters()
        stats = _shard_stats(model, batch, local, loss_config, config, sync) if sync is not None else None
        steps.append(_accumulate_gradients(model, batch, local, loss_config, config.micro_batch_tokens,
                                           config.temperature, config.autocast_dtype, stats, scaler) if len(local) else [])
        if sync is not None:
            sync.sum_gradients(list(model.parameters()))
        norm = clipped_step(model, optimizer, config.max_grad_norm, scaler)
        norms.append(float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm))  # sharded grads: a DTensor
    return ShardResult(steps, norms, correction, config.epochs * sum(batch.lengths), time.monotonic() - began,
                       scaler.get_scale() if scaler is not None else None)


def merge_shards(shards: list[ShardResult]) -> dict[str, float]:
    """:func:`ppo_update`'s metrics from the shards of one update: each optimizer step's micro-batch metrics of all
    shards combined (:func:`_combine_micro_metrics`), then means over the steps; ``grad_norm`` is the first shard's
    (every rank has the same), the mismatch metrics are token-weighted over shards, ``train_tokens_per_s`` counts
    every shard's tokens over the slowest shard's time."""
    history = []
    for index, grad_norm in enumerate(shards[0].grad_norms):
        step_metrics = _combine_micro_metrics([part for shard in shards for part in shard.steps[index]])
        step_metrics["grad_norm"] = grad_norm
        history.append(step_metrics)
    means = {key: float(np.mean([h[key] for h in history if key in h])) for key in history[0]}
    means["train_tokens_per_s"] = sum(s.tokens for s in shards) / max(max(s.seconds for s in shards), 1e-9)
    if shards[0].loss_scale is not None:  # a skipped step's norm is inf (its gradients overflowed)
        finite = [n for n in shards[0].grad_norms if np.isfinite(n)]
        means["grad_norm"] = float(np.mean(finite)) if finite else float("inf")
        means["loss_scale"] = shards[0].loss_scale
        means["skipped_steps"] = float(len(shards[0].grad_norms) - len(finite))
    weighted = [(s.correction, s.tokens) for s in shards if s.correction]
    correction = ({key: sum(c[key] * w for c, w in weighted) / max(sum(w for _, w in weighted), 1)
                   for key in weighted[0][0]} if len(weighted) > 1 else dict(weighted[0][0]) if weighted else {})
    return {**means, **correction}


def _correct_rollout_mismatch(model: torch.nn.Module, batch: _UpdateBatch, loss_config: LossConfig,
                              config: UpdateConfig) -> dict[str, float]:
    """Recomputes pi_old with the trainer (gradient-free, eval mode, the update's precision), makes it the batch's
    ``old_logp`` and sets the importance weights against the rollout engine's log-probs (:mod:`.correction`);
    returns the mismatch metrics."""
    model.eval()
    with torch.no_grad(), autocast(model_device(model), config.autocast_dtype):
        train_logp = _score(model, batch, torch.arange(len(batch.lengths)), config.micro_batch_tokens,
                            config.temperature, with_entropy=False)[0]
    batch.rollout_weights, metrics = rollout_correction(
        train_logp, batch.old_logp, batch.mask, loss_config.rollout_correction, loss_config.rollout_correction_cap,
        loss_config.rollout_correction_low, loss_config.rollout_correction_level)
    batch.old_logp = train_logp
    return metrics


def _accumulate_gradients(model: torch.nn.Module, batch: _UpdateBatch, rows: torch.Tensor, loss_config: LossConfig,
                          max_tokens: int | None, temperature: float, autocast_dtype: str | None = None,
                          stats: BatchStats | None = None, scaler: torch.amp.GradScaler | None = None,
                          ) -> list[tuple[dict[str, float], float]]:
    """Backpropagates the loss of mini-batch ``rows``, micro-batch by micro-batch; returns each micro-batch's
    metrics and valid-token count (:func:`_combine_micro_metrics` makes the step's metrics of them).

    ``stats`` (a learner group's, over all ranks' rows) are used as given. Else, with one micro-batch,
    ``policy_loss`` takes the statistics from its own forward pass; with several, they come from the whole
    mini-batch (:func:`_minibatch_stats`), so every micro-batch loss is a summand of the same loss.
    Forward passes run under autocast to ``autocast_dtype`` (None: off); backward passes outside it, on the loss
    times ``scaler``'s scale when given (the shared prefixes' backward carries the scaled gradients).
    """
    needs_entropy = (loss_config.entropy_coef > 0 or loss_config.entropy_advantage_weight > 0
                     or loss_config.top_entropy_quantile < 1.0)
    device = model_device(model)
    with autocast(device, autocast_dtype):
        scorer = batch.scorer(model, rows, temperature, needs_entropy)
        micros = scorer.micro_batches(rows, max_tokens)
        if stats is None and len(micros) > 1:
            stats = _minibatch_stats(model, batch, rows, loss_config, max_tokens, temperature)
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
        scaled_backward(loss, scaler)
        metrics["loss"] = float(loss.detach())
        parts.append((metrics, float(batch.mask[micro].sum())))
    scorer.backward()
    return parts


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
    sharing: UpdateConfig | None = None
    """Its prefix-sharing settings (``share_tree_prefixes``, ``min_shared_tokens``, ``micro_batch_tokens`` for the
    prefix passes); None: prompts shared only."""

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

    def scorer(self, model: torch.nn.Module, rows: torch.Tensor, temperature: float,
               with_entropy: bool) -> PrefixTreeScorer:
        """Runs the shared prefixes of ``rows`` once (with autograd when enabled) to score their continuations."""
        sharing = self.sharing or UpdateConfig(share_tree_prefixes=False, micro_batch_tokens=None)
        return PrefixTreeScorer(model, self.ids, self.lengths, self.prompt_lengths, rows, temperature,
                                self.pad_token_id, share_turns=sharing.share_tree_prefixes,
                                min_shared_tokens=sharing.min_shared_tokens, max_tokens=sharing.micro_batch_tokens,
                                with_entropy=with_entropy)


def _score(model: torch.nn.Module, batch: _UpdateBatch, rows: torch.Tensor, max_tokens: int | None,
           temperature: float, with_entropy: bool) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs (and entropies) of ``rows``, micro-batch by micro-batch, as (len(rows), T) zero-padded tensors."""
    logp = torch.zeros(len(rows), batch.ids.shape[1], device=batch.ids.device)
    entropy = torch.zeros_like(logp) if with_entropy else None
    where = {row: i for i, row in enumerate(rows.tolist())}
    scorer = batch.scorer(model, rows, temperature, with_entropy)
    for micro in scorer.micro_batches(rows, max_tokens):
        width = max(batch.lengths[r] for r in micro.tolist())
        out = [where[r] for r in micro.tolist()]
        micro_logp, micro_entropy = scorer.logprobs(model, micro, with_entropy=with_entropy)
        logp[out, :width] = micro_logp
        if entropy is not None and micro_entropy is not None:
            entropy[out, :width] = micro_entropy
    return logp, entropy


def _minibatch_stats(model: torch.nn.Module, batch: _UpdateBatch, rows: torch.Tensor, loss_config: LossConfig,
                     max_tokens: int | None, temperature: float) -> BatchStats:
    """Token and sequence counts of the mini-batch, and its entropy statistics when the loss needs them (one
    gradient-free pass, so that micro-batches share them: AEPO's entropy-aware advantage, the top-entropy mask)."""
    entropy = None
    if loss_config.entropy_advantage_weight > 0 or loss_config.top_entropy_quantile < 1.0:
        with torch.no_grad():
            entropy = _score(model, batch, rows, max_tokens, temperature, with_entropy=True)[1]
    return batch_stats(batch.mask[rows], entropy, loss_config.top_entropy_quantile)


def _shard_stats(model: torch.nn.Module, batch: _UpdateBatch, rows: torch.Tensor, loss_config: LossConfig,
                 config: UpdateConfig, sync: GradientSync) -> BatchStats:
    """:func:`_minibatch_stats` of a mini-batch whose rows are spread over ranks: this rank's ``rows`` (maybe none)
    counted and scored here, the counts summed and the valid tokens' entropies gathered over ranks."""
    valid = batch.mask[rows].bool()
    counts = sync.sum(torch.tensor([float(valid.sum()), float(valid.any(dim=-1).sum())], dtype=torch.float64))
    entropy = None
    if loss_config.entropy_advantage_weight > 0 or loss_config.top_entropy_quantile < 1.0:
        local = torch.zeros(0, dtype=torch.float64)
        if len(rows):
            with torch.no_grad(), autocast(model_device(model), config.autocast_dtype):
                scored = _score(model, batch, rows, config.micro_batch_tokens, config.temperature, with_entropy=True)[1]
            assert scored is not None
            local = scored[valid].double().cpu()
        entropy = sync.concat(local)
    return stats_of(float(counts[0]), float(counts[1]), entropy, loss_config.top_entropy_quantile)


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
