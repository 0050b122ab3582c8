"""Padding token sequences into tensors and scoring them with the model (shared by SFT and RL)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def pad_right(rows: Sequence[Sequence[float]], pad_value: float, dtype: torch.dtype) -> torch.Tensor:
    """Right-pads ``rows`` into a (B, T) tensor, T = the longest row."""
    width = max((len(r) for r in rows), default=0)
    return torch.tensor([list(r) + [pad_value] * (width - len(r)) for r in rows], dtype=dtype).reshape(len(rows), width)


def pad_left(rows: Sequence[Sequence[int]], pad_value: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pads id ``rows`` into (B, T) long ids and their (B, T) long mask (1 on real ids), T = the longest row;
    an empty row is all padding. One tensor is built from nested lists (a copy per row costs ~10x as much on the
    one-id rows of a decoding step)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad_value] * (width - len(r)) + list(r) for r in rows], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], dtype=torch.long)
    return ids.reshape(len(rows), width), mask.reshape(len(rows), width)


def token_logprobs(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   temperature: float = 1.0, with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probability of each token given the tokens before it.

    Args:
        model: a causal LM.
        input_ids: (B, T) long, right-padded.
        attention_mask: (B, T) long, 1 on real tokens.
        temperature: logits are divided by it (matching the sampler; 0 or 1 leave them unchanged).
        with_entropy: also return the next-token entropy (nats) at each position.

    Returns:
        ``(logp, entropy)``: (B, T) tensors; position t scores ``input_ids[:, t]`` from positions < t, so
        column 0 (no context) is 0. ``entropy`` is None unless asked for.
    """
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits[:, :-1].float()
    if temperature not in (0.0, 1.0):
        logits = logits / temperature
    logprobs = F.log_softmax(logits, dim=-1)
    chosen = logprobs.gather(2, input_ids[:, 1:, None]).squeeze(2)
    zeros = torch.zeros_like(chosen[:, :1])
    logp = torch.cat([zeros, chosen], dim=1)
    if not with_entropy:
        return logp, None
    entropy = -(logprobs.exp() * logprobs).sum(dim=-1)
    return logp, torch.cat([zeros, entropy], dim=1)


def length_micro_batches(lengths: Sequence[int], rows: torch.Tensor, max_tokens: int | None) -> list[torch.Tensor]:
    """Split ``rows`` into micro-batches of similar lengths whose padded size stays within ``max_tokens``.

    The rows are sorted by length and packed greedily: a micro-batch of b rows padded to its longest row L
    holds b * L <= ``max_tokens`` (a single row longer than that forms a micro-batch of its own). Gradients
    accumulated over the micro-batches equal the mini-batch's when each loss is a summand of the mini-batch
    loss (``losses.batch_stats``); cropping each one to its own longest row saves the padding compute of one
    (B, T_max) forward, and the (b, L, L) attention scores stay cache-sized. Same idea as verl's dynamic batch
    size (``use_dynamic_bsz``, ``ppo_max_token_len_per_gpu``).

    Args:
        lengths: the length in tokens of every row of the whole batch (indexed by the values in ``rows``).
        rows: (R,) long, the batch rows of one mini-batch.
        max_tokens: padded tokens per micro-batch; None keeps the mini-batch whole.

    Returns:
        Tensors of row indices (a partition of ``rows``), shortest rows first.

    Raises:
        ValueError: ``max_tokens`` < 1.
    """
    if max_tokens is None:
        return [rows]
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1 (or None for one micro-batch); got {max_tokens}")
    order = sorted(rows.tolist(), key=lambda r: lengths[r])
    batches: list[list[int]] = [[]]
    for row in order:
        if batches[-1] and (len(batches[-1]) + 1) * lengths[row] > max_tokens:
            batches.append([])
        batches[-1].append(row)
    return [torch.tensor(b, dtype=torch.long) for b in batches]
