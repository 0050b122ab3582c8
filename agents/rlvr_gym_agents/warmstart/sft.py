"""Behaviour cloning (SFT) on demonstrations: the warm start before RL.

This follows the calibration run in the pitfalls file: from a ~0% start GRPO has nothing to learn, so the warm
start must give non-trivial *sampled* success; it is the fragile part, hence the loss threshold and a time cap.
Demonstrations come from :mod:`rlvr_gym_agents.warmstart.demonstrations`.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from rlvr_gym import Task
from rlvr_gym_agents.batching import pad_right
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.update.precision import autocast, clipped_step, grad_scaler, model_device, scaled_backward
from rlvr_gym_agents.warmstart.demonstrations import (
    ACTION,
    CONTEXT,
    Demonstration,
    collect_demonstrations,
    demonstration_ids,
    demonstration_tasks,
    demonstration_variants,
)

if TYPE_CHECKING:
    from rlvr_gym_agents.config import EnvConfig, SFTConfig
    from rlvr_gym_agents.console import Console

def warmup_cosine(step: int, warmup_steps: int, total_steps: int, time_fraction: float = 0.0) -> float:
    """Learning-rate multiplier: linear warm-up to 1 over ``warmup_steps``, then cosine decay to 0.1 at
    ``total_steps`` (Loshchilov & Hutter 2017, SGDR, without restarts).

    Args:
        time_fraction: the fraction in [0, 1] of the time budget already spent. The decay follows whichever
            budget is further along, so a run stopped by its time cap still ends annealed (a fixed step
            horizon that the time cap cuts short leaves the rate near its peak, and the loss with it). The
            price: when time is further along, the schedule depends on the machine's speed, so two runs with
            the same seed can differ.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, max((step - warmup_steps) / max(1, total_steps - warmup_steps), time_fraction))
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


def time_fraction(elapsed_s: float, steps_done: int, max_steps: int, max_time_s: float) -> float:
    """The fraction in [0, 1] of the time budget spent, for :func:`warmup_cosine`, or 0.0 while the run is on
    course to finish its ``max_steps`` within ``max_time_s`` (projected at the mean seconds per step so far),
    and always 0.0 during the first tenth of ``max_steps``.

    So a run that the time cap will not stop follows the step schedule alone, and two runs of one seed get the
    same learning rates whatever the machine's momentary speed (using the time fraction whenever it was ahead
    of the step fraction made the early schedule depend on timing, and same-seed warm starts differed). The
    first tenth is not projected: over a few steps, one slow start-up step (or a busy moment) can project past
    the cap, switch the schedule to time for a few steps, and change the run.
    """
    if steps_done < max(1, max_steps // 10) or elapsed_s / steps_done * max_steps <= max_time_s:
        return 0.0
    return min(1.0, elapsed_s / max_time_s)


def behaviour_cloning(model: torch.nn.Module, examples: Sequence[tuple[list[int], list[int]]], *,
                      episodes_per_batch: int, learning_rate: float, warmup_steps: int, max_steps: int,
                      loss_threshold: float, max_time_s: float, seed: int = 0,
                      on_step: Callable[[int, float], None] | None = None, curve_every: int = 100,
                      ema_decay: float | None = None, autocast_dtype: str | None = None,
                      context_loss_weight: float = 0.0) -> dict[str, Any]:
    """Trains ``model`` by next-token cross-entropy on the action ids of ``examples`` (plus, weighted, their context).

    Stops at the first of: ``max_steps`` optimizer steps, ``max_time_s`` seconds, or an exponential moving
    average (0.9) of the loss below ``loss_threshold`` nats/token. The learning rate warms up, then decays
    by :func:`warmup_cosine` over whichever of ``max_steps`` and ``max_time_s`` binds first.

    Args:
        model: the causal LM (trained in place).
        examples: ``(ids, roles)`` pairs from :func:`demonstration_ids`.
        seed: seeds the batch order.
        on_step: called with (step, loss) after each optimizer step.
        curve_every: record the loss average every this many steps (>= 1).
        ema_decay: when set, in (0, 1): ``model`` ends with the exponential moving average of its weights after each
            step, ``avg <- decay * avg + (1 - decay) * weights``, started at the first step's weights (Polyak &
            Juditsky 1992; ``torch.optim.swa_utils``); the loss and its curve are the trained weights'.
        autocast_dtype: ``bfloat16``/``float16`` to run each step's forward pass under ``torch.autocast`` (the
            backward and the optimizer step outside it), as the RL update does under ``train.precision: mixed``; None
            (default) runs in the parameters' dtype. One autocast region must never span optimizer steps: autocast
            caches the low-precision copy of every weight until its region ends, so later forward passes would run on
            the first step's weights (:mod:`rlvr_gym_agents.update.precision`). ``float16`` also scales the loss
            dynamically (:func:`~rlvr_gym_agents.update.precision.grad_scaler`).
        context_loss_weight: >= 0; each step minimises ``action_loss + context_loss_weight * context_loss`` (mean
            nats per action token and per context token); the threshold, ``loss`` and its curve are the action loss.

    Raises:
        ValueError: ``curve_every < 1``, ``ema_decay`` outside (0, 1), or ``context_loss_weight`` negative or not
            finite.

    Returns:
        ``{"steps", "loss", "elapsed_s", "tokens_per_s", "stopped_by", "loss_curve", "time_schedule_from_step"}``;
        ``loss_curve`` is the moving average (nats/token) after steps ``curve_every``, ``2 * curve_every``, ...;
        ``time_schedule_from_step`` is the first step whose learning rate followed the time budget (None when
        the step schedule held throughout, the reproducible case); float16 adds ``loss_scale`` (the last) and
        ``skipped_steps`` (overflowed, not applied). The final ``loss`` alone is noisy with small
        batches; read ``loss_curve``.
    """
    if curve_every < 1:
        raise ValueError(f"curve_every must be >= 1, got {curve_every}")
    if ema_decay is not None and not 0.0 < ema_decay < 1.0:
        raise ValueError(f"sft.ema_decay must be in (0, 1) or None, got {ema_decay}")
    if not (math.isfinite(context_loss_weight) and context_loss_weight >= 0.0):
        raise ValueError(f"sft.context_loss_weight must be finite and >= 0, got {context_loss_weight}")
    average = None if ema_decay is None else AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(ema_decay))
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
    scaler, skipped = grad_scaler(model_device(model), autocast_dtype), 0
    batches = _batches(examples, episodes_per_batch, seed)
    model.train()
    start, ema, tokens, stopped_by, step = time.monotonic(), None, 0, "max_steps", 0
    curve: list[float] = []
    time_schedule_from: int | None = None
    for step in range(1, max_steps + 1):
        spent = time_fraction(time.monotonic() - start, step - 1, max_steps, max_time_s)
        if spent > 0.0 and time_schedule_from is None:
            time_schedule_from = step
        for group in optimizer.param_groups:
            group["lr"] = learning_rate * warmup_cosine(step - 1, warmup_steps, max_steps, spent)
        ids, roles = next(batches)
        scale = scaler.get_scale() if scaler is not None else 0.0
        value = _optimizer_step(model, optimizer, ids, roles, autocast_dtype, context_loss_weight, scaler)
        if scaler is not None and scaler.get_scale() < scale:  # overflowed: the step was skipped, the scale halved
            skipped += 1
        if average is not None:
            average.update_parameters(model)
        ema = value if ema is None else 0.9 * ema + 0.1 * value
        tokens += int((ids != -1).sum())
        if step % curve_every == 0:
            curve.append(round(ema, 4))
        if on_step is not None:
            on_step(step, ema)
        if step >= warmup_steps and ema < loss_threshold:
            stopped_by = "loss_threshold"
            break
        if time.monotonic() - start > max_time_s:
            stopped_by = "max_time_s"
            break
    if average is not None:
        model.load_state_dict(average.module.state_dict())
    elapsed = time.monotonic() - start
    result: dict[str, Any] = {"steps": step, "loss": ema, "elapsed_s": elapsed, "tokens_per_s": tokens / max(elapsed, 1e-9),
                              "stopped_by": stopped_by, "loss_curve": curve, "time_schedule_from_step": time_schedule_from}
    if scaler is not None:
        result.update(loss_scale=scaler.get_scale(), skipped_steps=skipped)
    return result


def _optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, ids: torch.Tensor,
                    roles: torch.Tensor, autocast_dtype: str | None = None, context_loss_weight: float = 0.0,
                    scaler: torch.amp.GradScaler | None = None) -> float:
    """One clipped (global L2 norm 1.0) optimizer step on the batch's cross-entropy; returns the actions' loss. The
    forward pass alone runs under autocast (a fresh region per step: see :func:`behaviour_cloning`); with float16's
    ``scaler`` the loss is scaled for the backward pass and a step whose gradients overflowed is skipped
    (:func:`~rlvr_gym_agents.update.precision.clipped_step`)."""
    with autocast(model_device(model), autocast_dtype):
        action_loss, context_loss = _cross_entropy(model, ids, roles, with_context=context_loss_weight > 0.0)
        loss = action_loss + context_loss_weight * context_loss if context_loss_weight > 0.0 else action_loss
    optimizer.zero_grad(set_to_none=True)
    scaled_backward(loss, scaler)
    clipped_step(model, optimizer, 1.0, scaler)
    return action_loss.item()


def _batches(examples: Sequence[tuple[list[int], list[int]]], size: int, seed: int,
             bucket_batches: int = 16) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Endless shuffled batches of (ids (B, T) padded with -1, roles (B, T) padded with 0), grouped by length.

    Each pass over the examples is shuffled, cut into pools of ``size * bucket_batches`` examples, each
    pool sorted by length and cut into batches, and the batches shuffled (as ``group_by_length`` in
    transformers' Trainer): every example is seen once per pass, and batches pad far less (26% of the
    tokens of random batches of 8 text-world episodes are padding).
    """
    rng = random.Random(seed)
    while True:
        order = list(range(len(examples)))
        rng.shuffle(order)
        batches: list[list[int]] = []
        for start in range(0, len(order), size * bucket_batches):
            pool = sorted(order[start:start + size * bucket_batches], key=lambda i: len(examples[i][0]))
            batches += [pool[i:i + size] for i in range(0, len(pool), size)]
        rng.shuffle(batches)
        for chosen in batches:
            yield (pad_right([examples[i][0] for i in chosen], -1, torch.long),
                   pad_right([examples[i][1] for i in chosen], 0, torch.long))


def _cross_entropy(model: torch.nn.Module, ids: torch.Tensor, roles: torch.Tensor,
                   with_context: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean next-token cross-entropy (nats) over the targets whose role is :data:`ACTION`, and over those whose role is
    :data:`CONTEXT` (a zero tensor unless ``with_context``). ``ids`` (B, T) pads with -1 (never a target); the batch
    (built on the CPU) moves to the model's device. A batch without action targets (or context targets) gives a NaN
    loss for them with zero gradients, as ``F.nll_loss`` does when every target is ignored."""
    device = model_device(model)
    ids, roles = ids.to(device), roles.to(device)
    attention = (ids >= 0).long()
    logits = model(input_ids=ids.clamp(min=0), attention_mask=attention, use_cache=False).logits[:, :-1]
    logprobs = F.log_softmax(logits.reshape(-1, logits.shape[-1]).float(), dim=-1)  # once for both losses
    targets, target_roles = ids[:, 1:], roles[:, 1:]
    action = F.nll_loss(logprobs, targets.masked_fill(target_roles != ACTION, -100).reshape(-1), ignore_index=-100)
    if not with_context:
        return action, action.new_zeros(())
    context_targets = targets.masked_fill((target_roles != CONTEXT) | (targets < 0), -100)
    return action, F.nll_loss(logprobs, context_targets.reshape(-1), ignore_index=-100)


def sft_demonstrations(sft: SFTConfig, env: EnvConfig, seed: int, train_tasks: list[Task] | None,
                       console: Console) -> list[Demonstration]:
    """The warm start's ``sft.num_demos`` expert episodes of :func:`demonstration_tasks` (seeded by ``seed`` + 7)."""
    with console.status(f"collecting {sft.num_demos} demonstrations"):
        tasks = demonstration_tasks(sft, env, train_tasks)
        return collect_demonstrations(sft, env, tasks, sft.num_demos, seed + 7)


def warm_start(sft: SFTConfig, env: EnvConfig, seed: int, model: Any, chat: ChatFormat,
               train_tasks: list[Task] | None, console: Console, autocast_dtype: str | None = None,
               demos: list[Demonstration] | None = None) -> dict[str, Any]:
    """Behaviour cloning on ``sft.num_demos`` expert episodes of ``env``'s tasks; returns its metrics.
    ``autocast_dtype``: as in :func:`behaviour_cloning` (the run's ``train.precision`` and ``model.dtype``).
    ``demos``: :func:`sft_demonstrations` collected already (``model.corpus_from_demos``); None collects them."""
    if demos is None:
        demos = sft_demonstrations(sft, env, seed, train_tasks, console)
    examples = [demonstration_ids(demo, chat) for demo in demos + demonstration_variants(sft, demos, seed + 11)]
    with console.progress(sft.max_steps, "SFT warm start") as advance:
        result = behaviour_cloning(
            model, examples, episodes_per_batch=sft.episodes_per_batch, learning_rate=sft.learning_rate,
            warmup_steps=sft.warmup_steps, max_steps=sft.max_steps, loss_threshold=sft.loss_threshold,
            max_time_s=sft.max_time_s, seed=seed, on_step=lambda step, loss: advance(loss=loss),
            ema_decay=sft.ema_decay, autocast_dtype=autocast_dtype, context_loss_weight=sft.context_loss_weight,
        )
    result["process_cpu_s"] = time.process_time()
    result["demo_success_rate"] = sum(d.success for d in demos) / max(1, len(demos))
    console.note("SFT: {steps} steps, loss {loss:.3f}, {tokens_per_s:.0f} tokens/s, {elapsed_s:.0f} s, "
                 "stopped by {stopped_by}".format(**result))
    if result["time_schedule_from_step"] is not None:
        console.note(f"SFT learning rate followed sft.max_time_s from step {result['time_schedule_from_step']}: "
                     "this warm start depends on the machine's speed (raise sft.max_time_s to make it reproducible)")
    return result
