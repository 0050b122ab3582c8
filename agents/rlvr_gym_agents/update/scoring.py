"""Scoring a batch whose rows share prefixes: each shared prefix runs through the model once.

A GRPO group is ``group_size`` episodes of one task, so its rows start with the same prompt ids (the
quickstart: ~110 of ~300 ids per episode, 8 episodes per prompt); the leaves of a rollout tree share more: the
turns and observations above their branch points. :class:`PrefixTreeScorer` builds a prefix tree (a radix trie
over the rows' token ids, :func:`prefix_tree`): its roots are the distinct prompts, every other node a run of ids
that two or more rows share after their parent. Each node runs once, level by level, attending to its ancestors'
keys/values; every row's own continuation runs against its deepest node's keys/values, micro-batch by
micro-batch. The nodes' keys/values and log-probs are kept as detached leaves; the gradients the micro-batches
leave on them are sent through the node passes once, by :meth:`PrefixTreeScorer.backward`. Log-probs and
gradients equal those of running every row whole (``batching.token_logprobs``), up to float rounding; a prefix
shared by d rows costs 1/d as much. Sharing only the prompts (``share_turns=False``) is the depth-1 case.

Same idea as the prefix-shared forward of tree-search RL trainers (TreeRL, arXiv:2506.11902; TreePO,
arXiv:2508.17445), done here with the model's KV cache instead of a tree attention mask.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch
import torch.nn.functional as F
from transformers import DynamicCache

from rlvr_gym_agents.batching import length_micro_batches, pad_left
from rlvr_gym_agents.policy.kv import cache_kwarg, returned_cache


@dataclasses.dataclass(frozen=True)
class PrefixNode:
    """A run of ids shared by rows of a mini-batch: ``ids[row, begin:end]``, after its parent's (which ends at
    ``begin``); a root (parent -1, depth 0) is a prompt, ``begin`` 0."""

    row: int
    begin: int
    end: int
    parent: int
    depth: int


def prefix_tree(sequences: Mapping[int, Sequence[int]], prompt_lengths: Mapping[int, int],
                min_shared_tokens: int | None) -> tuple[list[PrefixNode], dict[int, list[int]]]:
    """The prefix tree of ``sequences``: distinct prompts as roots, then runs of ids shared by two or more rows.

    Args:
        sequences: row -> its ids (N_r of them).
        prompt_lengths: row -> its prompt length, in [1, N_r].
        min_shared_tokens: a shared run shorter than this is not a node of its own (its rows each score it in
            their own child node or continuation): one more level costs a pass of the model. None: the roots only
            (rows share prompts, nothing else).

    Returns:
        ``(nodes, paths)``: the nodes, parents before children; row -> the indices of the nodes its ids start
        with, root first (they cover ``ids[row, :nodes[path[-1]].end]``).

    Raises:
        ValueError: ``min_shared_tokens`` < 1.
    """
    if min_shared_tokens is not None and min_shared_tokens < 1:
        raise ValueError(f"min_shared_tokens must be >= 1 (or None: share prompts only), got {min_shared_tokens}")
    nodes: list[PrefixNode] = []
    paths: dict[int, list[int]] = {}
    members: dict[int, list[int]] = {}
    roots: dict[tuple[int, ...], int] = {}
    for row, ids in sequences.items():
        key = tuple(ids[: prompt_lengths[row]])
        if key not in roots:
            roots[key] = len(nodes)
            nodes.append(PrefixNode(row, 0, len(key), -1, 0))
        members.setdefault(roots[key], []).append(row)
        paths[row] = [roots[key]]
    if min_shared_tokens is None:
        return nodes, paths
    # (rows, their deepest node, where that node ends, how far they all agree): ids[begin:agreed] is shared but
    # shorter than min_shared_tokens, so not a node yet.
    pending = [(rows, root, nodes[root].end, nodes[root].end) for root, rows in members.items()]
    while pending:
        rows, parent, begin, agreed = pending.pop()
        by_next_id: dict[int, list[int]] = {}
        for row in rows:
            if len(sequences[row]) > agreed:
                by_next_id.setdefault(sequences[row][agreed], []).append(row)
        for group in by_next_id.values():
            if len(group) < 2:
                continue
            end = agreed + _common_length(sequences, group, agreed)
            if end - begin >= min_shared_tokens:
                nodes.append(PrefixNode(group[0], begin, end, parent, nodes[parent].depth + 1))
                for row in group:
                    paths[row].append(len(nodes) - 1)
                pending.append((group, len(nodes) - 1, end, end))
            else:
                pending.append((group, parent, begin, end))
    return nodes, paths


def _common_length(sequences: Mapping[int, Sequence[int]], rows: list[int], start: int) -> int:
    """How many ids from ``start`` on all ``rows`` share."""
    first = sequences[rows[0]]
    limit = min(len(sequences[r]) for r in rows)
    end = start
    while end < limit and all(sequences[r][end] == first[end] for r in rows[1:]):
        end += 1
    return end - start


class PrefixTreeScorer:
    """Log-probs of right-padded rows that may share prompts (and, with ``share_turns``, longer prefixes).

    Args:
        model: a causal LM (transformers); the node passes run here, with autograd when it is enabled.
        ids: (B, T) long, right-padded token ids of the whole batch.
        lengths: B real lengths.
        prompt_lengths: B prompt lengths; a row's prompt is at least its first id (column 0 is never scored)
            and at most the whole row. Prompt ids are never scored (log-prob 0).
        rows: the rows to score (a mini-batch), indices into ``ids``.
        temperature: logits are divided by it (0 or 1 leave them unchanged), as in the sampler.
        pad_token_id: fills the padding of the node passes.
        share_turns: also run the ids two or more rows share after their prompt (a rollout tree's turns and
            observations above a branch point) once; False: the prompts only.
        min_shared_tokens: with ``share_turns``, the shortest shared run that becomes a node (see
            :func:`prefix_tree`).
        max_tokens: padded ids per node pass (each level's nodes in length-sorted micro-batches); None: one
            pass per level.
        with_entropy: also keep the nodes' entropies, so that :meth:`logprobs` can return entropies.
    """

    def __init__(self, model: torch.nn.Module, ids: torch.Tensor, lengths: Sequence[int],
                 prompt_lengths: Sequence[int], rows: torch.Tensor, temperature: float, pad_token_id: int, *,
                 share_turns: bool = False, min_shared_tokens: int = 1, max_tokens: int | None = None,
                 with_entropy: bool = False) -> None:
        self.ids, self.lengths, self.temperature = ids, list(lengths), temperature
        self.with_entropy, self.pad_token_id = with_entropy, pad_token_id
        self.prompt_lengths = [min(max(p, 1), n) for p, n in zip(prompt_lengths, self.lengths)]
        chosen = rows.tolist()
        self.nodes, self.paths = prefix_tree({r: ids[r, : self.lengths[r]].tolist() for r in chosen},
                                             {r: self.prompt_lengths[r] for r in chosen},
                                             min_shared_tokens if share_turns else None)
        self.path_ends = [self.nodes[self.paths[r][-1]].end if r in self.paths else 0 for r in range(len(lengths))]
        self.suffix_lengths = [n - e for n, e in zip(self.lengths, self.path_ends)]  # ids after the deepest node
        self._cache_kwarg = cache_kwarg(model)
        # The node passes' outputs: keys and values of every layer as (N, heads, head_dim) over the N node ids, their
        # (N,) log-probs (0 on prompt ids) and entropies (zeros unless with_entropy), the (num_nodes, V) logits of
        # every node's last position.
        self._outputs = self._run_nodes(model, max_tokens)
        grad = torch.is_grad_enabled()
        self._leaves = [t.detach().requires_grad_(grad and t.requires_grad) for t in self._outputs]

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

        Raises:
            ValueError: entropies asked for from a scorer built without ``with_entropy``.
        """
        if with_entropy and not self.with_entropy:
            raise ValueError("entropies need a PrefixTreeScorer built with with_entropy=True")
        rows = micro.tolist()
        device = self.ids.device
        width = max(self.lengths[r] for r in rows)
        starts = torch.tensor([self.path_ends[r] for r in rows], device=device)
        suffixes = torch.tensor([self.suffix_lengths[r] for r in rows], device=device)
        lasts = torch.tensor([self.paths[r][-1] for r in rows], device=device)
        logits = self._leaves[-1][lasts, None]  # each row's first continuation id, from its deepest node's end
        if int(suffixes.max()) > 1:
            logits = torch.cat([logits, self._continuation_logits(model, rows, starts, suffixes)], dim=1)
        logprobs = F.log_softmax(_scaled(logits, self.temperature), dim=-1)
        taken = _suffix_ids(self.ids, rows, starts, logits.shape[1])
        node_index, on_node = self._node_positions(rows, width)
        logp = _to_row_layout(logprobs.gather(2, taken[:, :, None]).squeeze(2), starts, suffixes, width)
        logp = logp + torch.where(on_node, self._leaves[-3][node_index], 0.0)
        if not with_entropy:
            return logp, None
        entropy = _to_row_layout(-(logprobs.exp() * logprobs).sum(dim=-1), starts, suffixes, width)
        return logp, entropy + torch.where(on_node, self._leaves[-2][node_index], 0.0)

    def backward(self) -> None:
        """Sends the gradients the micro-batches left on the nodes' keys/values, log-probs and entropies through
        the node passes."""
        pairs = [(out, leaf.grad) for out, leaf in zip(self._outputs, self._leaves)
                 if leaf.grad is not None and out.requires_grad]
        if pairs:
            torch.autograd.backward([out for out, _ in pairs], [grad for _, grad in pairs])

    def _node_positions(self, rows: list[int], width: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(b, width) indices into the node ids of each row's positions, and where they hold a scored node id
        (after the prompt, before the deepest node's end)."""
        index = torch.zeros(len(rows), width, dtype=torch.long)
        on_node = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, row in enumerate(rows):
            end = self.path_ends[row]
            if end > self.prompt_lengths[row]:
                index[i, :end] = self._node_ids[self.paths[row][-1]]
                on_node[i, self.prompt_lengths[row]: end] = True
        return index.to(self.ids.device), on_node.to(self.ids.device)

    def _prefix_cache(self, flat_kv: list[torch.Tensor], prefixes: list[torch.Tensor]) -> tuple[DynamicCache,
                                                                                                torch.Tensor]:
        """A cache of the node ids ``prefixes`` (one index tensor per query row), left-padded, and its (b, W)
        mask."""
        width = max(len(p) for p in prefixes)
        index = torch.zeros(len(prefixes), width, dtype=torch.long)
        mask = torch.zeros(len(prefixes), width, dtype=torch.long)
        for i, prefix in enumerate(prefixes):
            if len(prefix):
                index[i, width - len(prefix):] = prefix
                mask[i, width - len(prefix):] = 1
        index, mask = index.to(self.ids.device), mask.to(self.ids.device)
        cache = DynamicCache()
        flat_index = index.reshape(-1)
        for layer in range(len(flat_kv) // 2):
            keys, values = (t.index_select(0, flat_index).unflatten(0, index.shape).transpose(1, 2)
                            for t in flat_kv[2 * layer: 2 * layer + 2])
            cache.update(keys, values, layer)
        return cache, mask

    def _continuation_logits(self, model: torch.nn.Module, rows: list[int], starts: torch.Tensor,
                             suffixes: torch.Tensor) -> torch.Tensor:
        """(b, S - 1, V) logits of continuation positions 0..S-2 (each scores the next id), S = the longest."""
        suffix = int(suffixes.max())
        cache, prefix_mask = self._prefix_cache(self._leaves[:-3], [self._node_ids[self.paths[r][-1]] for r in rows])
        ids = _suffix_ids(self.ids, rows, starts, suffix)[:, :-1]
        steps = torch.arange(suffix - 1, device=self.ids.device)[None]
        mask = torch.cat([prefix_mask, (steps < suffixes[:, None]).long()], dim=1)
        out = model(input_ids=ids, attention_mask=mask, position_ids=starts[:, None] + steps, use_cache=True,
                    **{self._cache_kwarg: cache})
        return out.logits

    def _run_nodes(self, model: torch.nn.Module, max_tokens: int | None) -> list[torch.Tensor]:
        """Runs every node once, level by level, each level in length-sorted micro-batches of at most
        ``max_tokens`` padded ids; returns the outputs listed above."""
        self._node_ids: list[torch.Tensor] = [torch.empty(0, dtype=torch.long)] * len(self.nodes)  # its path's ids
        last_logits: list[torch.Tensor] = [torch.empty(0)] * len(self.nodes)
        chunks: list[list[torch.Tensor]] = []  # per micro-batch: keys/values of every layer, log-probs, entropies
        lengths = [node.end - node.begin for node in self.nodes]
        levels: dict[int, list[int]] = {}
        for index, node in enumerate(self.nodes):
            levels.setdefault(node.depth, []).append(index)
        stored = 0
        for depth in sorted(levels):
            flat_kv = [torch.cat(parts) for parts in zip(*(chunk[:-2] for chunk in chunks))]
            for batch in length_micro_batches(lengths, torch.tensor(levels[depth]), max_tokens):
                nodes = batch.tolist()
                for u in nodes:  # node ids are stored in this order
                    own = torch.arange(stored, stored + lengths[u])
                    parent = self.nodes[u].parent
                    self._node_ids[u] = own if parent < 0 else torch.cat([self._node_ids[parent], own])
                    stored += lengths[u]
                if depth == 0:
                    kv, last = self._run_prompts(model, nodes)
                    zeros = torch.zeros(sum(lengths[u] for u in nodes), device=self.ids.device)
                    chunks.append([*kv, zeros, zeros])
                else:
                    kv, last, scores = self._run_segments(model, nodes, flat_kv, last_logits)
                    chunks.append([*kv, *scores])
                for u, logits in zip(nodes, last.unbind(0)):
                    last_logits[u] = logits
        return [*(torch.cat(parts) for parts in zip(*chunks)), torch.stack(last_logits)]

    def _run_prompts(self, model: torch.nn.Module, nodes: list[int]) -> tuple[list[torch.Tensor], torch.Tensor]:
        """Runs root nodes (prompts) left-padded; returns the keys and values of every layer over their real ids,
        (n, heads, head_dim) each, and the (u, V) logits of their last position."""
        prompts = [self.ids[self.nodes[u].row, : self.nodes[u].end].tolist() for u in nodes]
        ids, mask = (t.to(self.ids.device) for t in pad_left(prompts, self.pad_token_id))
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        cache = DynamicCache()
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1,
                    **{self._cache_kwarg: cache})
        real = mask.bool()
        kv: list[torch.Tensor] = []
        for layer in returned_cache(out, cache).layers:
            kv += [layer.keys.transpose(1, 2)[real], layer.values.transpose(1, 2)[real]]
        return kv, out.logits[:, -1]

    def _run_segments(self, model: torch.nn.Module, nodes: list[int], flat_kv: list[torch.Tensor],
                      last_logits: list[torch.Tensor]) -> tuple[list[torch.Tensor], torch.Tensor, list[torch.Tensor]]:
        """Runs non-root nodes against their ancestors' keys/values ``flat_kv``; returns the keys and values of
        every layer over their ids, the (u, V) logits of their last position and [log-probs, entropies] of their
        ids (the first scored from the parent's last logits)."""
        device = self.ids.device
        starts = torch.tensor([self.nodes[u].begin for u in nodes], device=device)
        lengths = torch.tensor([self.nodes[u].end - self.nodes[u].begin for u in nodes], device=device)
        width = int(lengths.max())
        rows = [self.nodes[u].row for u in nodes]
        cache, prefix_mask = self._prefix_cache(flat_kv, [self._node_ids[self.nodes[u].parent] for u in nodes])
        ids = _suffix_ids(self.ids, rows, starts, width)
        steps = torch.arange(width, device=device)[None]
        real = steps < lengths[:, None]
        out = model(input_ids=ids, attention_mask=torch.cat([prefix_mask, real.long()], dim=1),
                    position_ids=starts[:, None] + steps, use_cache=True, **{self._cache_kwarg: cache})
        kv: list[torch.Tensor] = []
        for layer in returned_cache(out, cache).layers:
            kv += [layer.keys[:, :, prefix_mask.shape[1]:].transpose(1, 2)[real],
                   layer.values[:, :, prefix_mask.shape[1]:].transpose(1, 2)[real]]
        parents = torch.stack([last_logits[self.nodes[u].parent] for u in nodes])
        logits = torch.cat([parents[:, None], out.logits[:, :-1]], dim=1)
        logprobs = F.log_softmax(_scaled(logits, self.temperature), dim=-1)
        logp = logprobs.gather(2, ids[:, :, None]).squeeze(2)[real]
        entropy = (-(logprobs.exp() * logprobs).sum(dim=-1)[real] if self.with_entropy
                   else torch.zeros_like(logp))
        last = out.logits[torch.arange(len(nodes), device=device), lengths - 1]
        return kv, last, [logp, entropy]


def _scaled(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """fp32 logits divided by the sampling temperature (0 or 1 leave them unchanged)."""
    logits = logits.float()
    return logits if temperature in (0.0, 1.0) else logits / temperature


def _suffix_ids(ids: torch.Tensor, rows: list[int], starts: torch.Tensor, width: int) -> torch.Tensor:
    """(b, width) ids from each row's ``starts`` on; columns past the batch's last repeat it (outside every
    row: masked out by the callers)."""
    columns = (starts[:, None] + torch.arange(width, device=starts.device)[None]).clamp(max=ids.shape[1] - 1)
    return ids[torch.tensor(rows, device=starts.device)[:, None], columns]


def _to_row_layout(values: torch.Tensor, starts: torch.Tensor, suffix: torch.Tensor, width: int) -> torch.Tensor:
    """Moves (b, S) continuation values to (b, width) row positions starts + j; other positions are 0."""
    offset = torch.arange(width, device=starts.device)[None] - starts[:, None]
    inside = (offset >= 0) & (offset < suffix[:, None])
    taken = values.gather(1, offset.clamp(min=0, max=values.shape[1] - 1))
    return torch.where(inside, taken, torch.zeros_like(taken))
