"""Mixed precision for the update: fp32 master weights, forward passes autocast to a low-precision dtype.

The scheme (``train.precision: mixed``, the default):

- the trained model's parameters, their gradients and AdamW's moments stay **fp32** (the master weights);
- forward passes of the update run under ``torch.autocast(device_type, dtype=model.dtype)`` when ``model.dtype``
  is ``bfloat16`` or ``float16``: matrix multiplies in that dtype, reductions and softmax in fp32 as autocast
  decides; log-probs are taken in fp32 (``log_softmax(logits.float())``), so the loss is fp32 too;
- ``backward()`` runs outside the autocast region (the backward ops take the forward's dtypes);
- one autocast region never spans an optimizer step: autocast keeps the low-precision copy of each weight it casts
  until its outermost region ends, so forward passes after a step in the same region run on the old weights (the
  weight matrices then stop learning; only embeddings and norms, which autocast does not cast, train).

Why: bf16 has an 8-bit mantissa, so an update smaller than 2^-8 of a weight rounds away. With plain AdamW on bf16
parameters at lr 1e-6 (the GPU recipes), 10 steps changed 0.7% of a 256x256 matrix's entries; with fp32 master
weights 99.95% (``shared/reference/pitfalls.md``; ``tests/rlvr_gym_agents/test_precision.py`` re-measures it).
Micikevicius et al. 2018, "Mixed Precision Training" (fp32 master copy); bf16 needs no loss scaling.

float16 does (same paper, section 3.2): its smallest subnormal is 6e-8, so the backward pass of a loss whose
gradients are small (a policy-gradient loss with advantages near 0, a learning signal spread over many tokens)
rounds them to zero in the float16 matrix multiplies, and the step changes nothing. Under ``mixed`` with
``model.dtype: float16`` the update and the SFT warm start scale the loss dynamically with ``torch.amp.GradScaler``
(:func:`grad_scaler`): the loss is multiplied by the scale before ``backward()``, the fp32 gradients are divided by
it before clipping, a step whose gradients overflowed (inf/NaN) is skipped and halves the scale, and 2,000
steps in a row without overflow double it.

Where it applies: the update (``ppo_update``: the recomputed log-probs, the reference model's, the mismatch
correction's pi_old) and the SFT warm start. Rollouts and evaluations by the transformers engine run in the
parameters' dtype (fp32); a vLLM engine holds its own bf16 copy (synced weights are cast to it), and the difference
between its log-probs and the trainer's is what ``algorithm.loss.rollout_correction`` corrects.

``train.precision: pure`` keeps the parameters in ``model.dtype`` (the old behaviour, the failure mode above at
small learning rates); it halves parameter and optimizer memory.
"""

from __future__ import annotations

import contextlib

import torch

PRECISIONS = ("mixed", "pure")
DTYPES = ("float32", "bfloat16", "float16")


def parameter_dtype(precision: str, dtype: str) -> str:
    """The dtype the trained model is loaded in: fp32 master weights under ``mixed``, ``dtype`` under ``pure``."""
    return "float32" if precision == "mixed" else dtype


def autocast_dtype(precision: str, dtype: str) -> str | None:
    """The dtype forward passes autocast to: ``dtype`` under ``mixed`` when it is not fp32, else None (off)."""
    return dtype if precision == "mixed" and dtype != "float32" else None


def autocast(device: torch.device | str, dtype: str | None) -> contextlib.AbstractContextManager[object]:
    """``torch.autocast`` on ``device``'s type to ``dtype`` (``bfloat16``/``float16``), or a no-op when None."""
    if dtype is None:
        return contextlib.nullcontext()
    device_type = torch.device(device).type
    return torch.autocast(device_type=device_type, dtype=getattr(torch, dtype))


def grad_scaler(device: torch.device | str, dtype: str | None) -> torch.amp.GradScaler | None:
    """A dynamic loss scaler (``torch.amp.GradScaler`` on ``device``'s type, its defaults: initial scale 2^16,
    growth 2x every 2,000 steps without overflow, backoff 0.5x) when forward passes autocast to ``float16``; None for
    ``bfloat16`` (its range is fp32's) and fp32."""
    if dtype != "float16":
        return None
    return torch.amp.GradScaler(torch.device(device).type)


def scaled_backward(loss: torch.Tensor, scaler: torch.amp.GradScaler | None) -> None:
    """``loss.backward()``, on the loss times ``scaler``'s scale when given (float16: :func:`grad_scaler`)."""
    (scaler.scale(loss) if scaler is not None else loss).backward()


def clipped_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, max_norm: float,
                 scaler: torch.amp.GradScaler | None) -> torch.Tensor:
    """One optimizer step on the gradients :func:`scaled_backward` left: unscaled first (with ``scaler``), clipped to a
    global L2 norm of ``max_norm``, then applied; with ``scaler`` the step is skipped when a gradient is inf/NaN and
    the scale is updated. Returns the norm before clipping (a DTensor for sharded gradients; inf/NaN: overflowed)."""
    if scaler is not None:
        scaler.unscale_(optimizer)  # the true gradients, for clipping and for the overflow check
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if scaler is None:
        optimizer.step()
    else:
        scaler.step(optimizer)
        scaler.update()
    return norm


def model_device(model: torch.nn.Module) -> torch.device:
    """The device of ``model``'s first parameter."""
    return next(model.parameters()).device
