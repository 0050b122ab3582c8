"""Scoring a batch whose rows share prompts: each distinct prompt runs through the model once.

A GRPO group is ``group_size`` episodes of one task, so its rows start with the same prompt ids (the
quickstart: ~110 of ~300 ids per episode, 8 episodes per prompt). :class:`SharedPromptScorer` runs the
distinct prompts once, keeps their keys/values as detached leaves, and scores every row's continuation
(turns and observations) against its prompt's keys/values, micro-batch by micro-batch. Gradients that reach
the leaves are accumulated over the micro-batches and sent through the prompt pass once, by
:meth:`SharedPromptScorer.backward`. Log-probs and gradients equal those of running every row whole
(``batching.token_logprobs``), up to float rounding; the prompt tokens cost 1/group_size as much.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from rlvr_gym_agents.batching import length_micro_batches, pad_left
from rlvr_gym_agents.policy.kv import cache_kwarg, returned_cache


class SharedPromptScorer:
    """Log-probs of right-padded rows whose first ``prompt_lengths[r]`` ids are a prompt other rows may share.

    Args:
        model: a causal LM (transformers); the prompt pass runs here, with autograd when it is enabled.
        ids: (B, T) long, right-padded token ids of the whole batch.
        lengths: B real lengths.
        prompt_lengths: B prompt lengths; a row's prompt is at least its first id (column 0 is never scored)
            and at most the whole row.
        rows: the rows to score (a mini-batch), indices into ``ids``.
        temperature: logits are divided by it (0 or 1 leave them unchanged), as in the sampler.
        pad_token_id: fills the left padding of the prompts.
    """

    def __init__(self, model: torch.nn.Module, ids: torch.Tensor, lengths: Sequence[int],
                 prompt_lengths: Sequence[int], rows: torch.Tensor, temperature: float, pad_token_id: int) -> None:
        self.ids, self.lengths, self.temperature = ids, list(lengths), temperature
        self.prompt_lengths = [min(max(p, 1), n) for p, n in zip(prompt_lengths, self.lengths)]
        self.suffix_lengths = [n - p for n, p in zip(self.lengths, self.prompt_lengths)]  # ids after the prompt
        self._cache_kwarg = cache_kwarg(model)
        distinct: dict[tuple[int, ...], int] = {}
        self.prompt_of: dict[int, int] = {}
        for row in rows.tolist():
            key = tuple(ids[row, : self.prompt_lengths[row]].tolist())
            self.prompt_of[row] = distinct.setdefault(key, len(distinct))
        self.prompt_mask, prompt_kv, last_logits = _run_prompts(model, list(distinct), pad_token_id,
                                                                self._cache_kwarg, ids.device)
        self._outputs = [*prompt_kv, last_logits]  # keys and values of every layer, then the last logits
        grad = torch.is_grad_enabled()
        self._leaves = [t.detach().requires_grad_(grad) for t in self._outputs]

    def micro_batches(self, rows: torch.Tensor, max_tokens: int | None) -> list[torch.Tensor]:
        """``rows`` in micro-batches of at most ``max_tokens`` padded continuation ids, shortest first."""
        return length_micro_batches(self.suffix_lengths, rows, max_tokens)

    def logprobs(self, model: torch.nn.Module, micro: torch.Tensor,
                 with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Log-probs (and entropies, nats) of the rows ``micro``, laid out like ``ids[micro, :width]``.

        Returns:
            ``(logp, entropy)``: (b, width) tensors, width = the longest row of ``micro``; position t scores
            ``ids[r, t]`` from the ids before it. Prompt positions and padding are 0 (the sampler never
            generated them); ``entropy`` is None unless asked for.
        """
        rows = micro.tolist()
        width = max(self.lengths[r] for r in rows)
        starts = torch.tensor([self.prompt_lengths[r] for r in rows], device=self.ids.device)
        suffixes = torch.tensor([self.suffix_lengths[r] for r in rows], device=self.ids.device)
        suffix = int(suffixes.max())
        prompts = torch.tensor([self.prompt_of[r] for r in rows], device=self.ids.device)
        logits = self._leaves[-1][prompts, None]  # each row's first continuation id, from its prompt's end
        if suffix > 1:
            logits = torch.cat([logits, self._continuation_logits(model, rows, prompts, starts, suffixes)], dim=1)
        if self.temperature not in (0.0, 1.0):
            logits = logits / self.temperature
        logprobs = F.log_softmax(logits.float(), dim=-1)
        taken = _suffix_ids(self.ids, rows, starts, logits.shape[1])
        logp = _to_row_layout(logprobs.gather(2, taken[:, :, None]).squeeze(2), starts, suffixes, width)
        if not with_entropy:
            return logp, None
        entropy = -(logprobs.exp() * logprobs).sum(dim=-1)
        return logp, _to_row_layout(entropy, starts, suffixes, width)

    def backward(self) -> None:
        """Sends the gradients the micro-batches left on the prompt keys/values through the prompt pass."""
        pairs = [(out, leaf.grad) for out, leaf in zip(self._outputs, self._leaves) if leaf.grad is not None]
        if pairs:
            torch.autograd.backward([out for out, _ in pairs], [grad for _, grad in pairs])

    def _continuation_logits(self, model: torch.nn.Module, rows: list[int], prompts: torch.Tensor,
                             starts: torch.Tensor, suffixes: torch.Tensor) -> torch.Tensor:
        """(b, S - 1, V) logits of continuation positions 0..S-2 (each scores the next id), S = the longest."""
        suffix = int(suffixes.max())
        cache = DynamicCache()
        for index in range(len(self._leaves) // 2):
            cache.update(self._leaves[2 * index][prompts], self._leaves[2 * index + 1][prompts], index)
        ids = _suffix_ids(self.ids, rows, starts, suffix)[:, :-1]
        steps = torch.arange(suffix - 1, device=self.ids.device)[None]
        real = steps < suffixes[:, None]
        mask = torch.cat([self.prompt_mask[prompts], real.long()], dim=1)
        positions = starts[:, None] + steps
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                    **{self._cache_kwarg: cache})
        return out.logits


def _run_prompts(model: torch.nn.Module, prompts: list[tuple[int, ...]], pad_token_id: int, cache_arg: str,
                 device: torch.device) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """Runs left-padded prompts on ``device``; returns their (U, P) mask, the (U, heads, P, head_dim) keys and values
    of every layer (k0, v0, k1, v1, ...) and the (U, V) logits of their last position."""
    ids, mask = (t.to(device) for t in pad_left(prompts, pad_token_id))
    positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
    cache = DynamicCache()
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                **{cache_arg: cache})
    prompt_kv: list[torch.Tensor] = []
    for layer in returned_cache(out, cache).layers:
        prompt_kv += [layer.keys, layer.values]
    return mask, prompt_kv, out.logits[:, -1]


def _suffix_ids(ids: torch.Tensor, rows: list[int], starts: torch.Tensor, width: int) -> torch.Tensor:
    """(b, width) ids from each row's prompt end on; columns past the batch's last repeat it (outside every
    row: masked out by the callers)."""
    columns = (starts[:, None] + torch.arange(width, device=starts.device)[None]).clamp(max=ids.shape[1] - 1)
    return ids[torch.tensor(rows, device=starts.device)[:, None], columns]


def _to_row_layout(values: torch.Tensor, starts: torch.Tensor, suffix: torch.Tensor, width: int) -> torch.Tensor:
    """Moves (b, S) continuation values to (b, width) row positions starts + j; other positions are 0."""
    offset = torch.arange(width, device=starts.device)[None] - starts[:, None]
    inside = (offset >= 0) & (offset < suffix[:, None])
    taken = values.gather(1, offset.clamp(min=0, max=values.shape[1] - 1))
    return torch.where(inside, taken, torch.zeros_like(taken))
