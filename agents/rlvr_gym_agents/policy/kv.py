"""KV state, one owner: the growable cache, the per-row state of a batch (with holes), tree rewind and merge.

- :class:`GrowableLayer` / :class:`GrowableCache`: a transformers ``DynamicLayer`` whose keys and values are views
  of buffers with spare slots, doubling when full instead of running ``torch.cat`` over the whole cache every
  decoding step.
- :class:`KVState`: the cache of a batch of rows with the holes left by left-padding, explicit position ids and the
  ids sampled but not yet run. ``state.select([0, 0, 1])`` copies rows into a new state; ``state.append_rows([1])``
  adds a copy of row 1 in place, into spare rows when the buffers have them (branching from a prefix), and
  ``state.retain_rows([0, 2])`` drops the other rows in place, copying only as many rows as it drops.
- :class:`RewindInfo` / :func:`merge_kv_states`: tree rollouts rewind a row to a turn boundary by keeping the
  real slots it had at a snapshot (cutting the later ones out, or masking them as holes in a batch), and stack rows
  of several states padding shorter caches with hole slots (positions are explicit, so a hole changes nothing a
  row attends to).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

MIN_CAPACITY = 64
"""Slots allocated at least when a layer's buffer grows."""


class GrowableLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``keys``/``values`` (B, heads, slots, head_dim) are views of larger buffers: the
    first B rows and the first ``slots`` slots of (rows capacity, heads, slots capacity, head_dim) tensors.

    ``update`` writes the new slots after the filled ones and reallocates (capacity doubled, at least
    :data:`MIN_CAPACITY`) only when they do not fit; ``append_rows`` writes copies of rows after the filled rows
    (a tree's children) and reallocates only when the spare rows run out. Assigning ``keys`` makes the assigned
    tensor the key buffer, all of it filled (no spare slots or rows), and leaves ``values`` as they were until they
    are assigned too; so code written for ``DynamicLayer`` (which assigns ``keys`` from ``keys``, then ``values``
    from ``values``: ``crop``, ``batch_select_indices``, ``reorder_cache``) keeps working. A shallow copy shares only
    the filled part: the next ``update`` or ``append_rows`` of either layer never lands where the other can see;
    ``move_rows`` (dropping rows in place) rewrites filled rows, which a shallow copy does see.
    """

    def __init__(self, **kwargs: Any) -> None:
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self._length = 0  # filled slots and rows of the keys (and of the values, unless _value_extent says otherwise)
        self._rows = 0
        self._value_extent: tuple[int, int] | None = None  # (rows, slots) of the values between two assignments
        super().__init__(**kwargs)

    @property  # type: ignore[override]
    def keys(self) -> torch.Tensor | None:
        """The filled slots, (B, heads, slots, head_dim); None before the first update."""
        return _filled(self._key_buffer, self._rows, self._length)

    @keys.setter
    def keys(self, tensor: torch.Tensor | None) -> None:
        if self._value_extent is None:  # the values keep their extent until they are assigned
            self._value_extent = (self._rows, self._length)
        self._key_buffer = tensor
        self._rows, self._length = _extent(tensor)
        self._settle_values()

    @property  # type: ignore[override]
    def values(self) -> torch.Tensor | None:
        """The filled slots, (B, heads, slots, head_dim); None before the first update."""
        rows, length = self._value_extent or (self._rows, self._length)
        return _filled(self._value_buffer, rows, length)

    @values.setter
    def values(self, tensor: torch.Tensor | None) -> None:
        self._value_buffer = tensor
        self._value_extent = _extent(tensor)
        self._settle_values()

    @property
    def row_capacity(self) -> int:
        """Rows the buffers hold: the filled ones plus the spare ones :meth:`append_rows` writes into."""
        buffer = self._key_buffer
        return buffer.shape[0] if buffer is not None and buffer.dim() == 4 else self._rows

    def _check_assigned_together(self) -> None:
        """Raises ValueError when ``keys`` and ``values`` were last assigned tensors of different rows or slots (one
        of them alone): a write would leave them inconsistent."""
        if self._value_extent is not None:
            raise ValueError(f"keys have (rows, slots) {(self._rows, self._length)} but values {self._value_extent}: "
                             "assign both before the layer is updated or extended")

    def _settle_values(self) -> None:
        if self._value_extent == (self._rows, self._length):
            self._value_extent = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Appends (B, heads, n, head_dim) keys and values; returns all filled slots (views)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self._check_assigned_together()
        start, end = self._length, self._length + key_states.shape[-2]
        if not self._fits(key_states, end):
            self._grow(key_states, value_states, end)
        assert self._key_buffer is not None and self._value_buffer is not None
        self._key_buffer[: self._rows, :, start:end, :] = key_states
        self._value_buffer[: self._rows, :, start:end, :] = value_states
        self._length, self._value_extent = end, None
        return self.keys, self.values  # type: ignore[return-value]

    def _fits(self, key_states: torch.Tensor, end: int) -> bool:
        buffer = self._key_buffer
        return (buffer is not None and buffer.dim() == 4 and buffer.shape[-2] >= end
                and key_states.shape[0] == self._rows and buffer.shape[1] == key_states.shape[1]
                and buffer.dtype == key_states.dtype)

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, end: int) -> None:
        capacity = max(2 * self._length, end, MIN_CAPACITY)
        old_keys, old_values = self.keys, self.values
        batch, heads, _, dim = key_states.shape
        row_capacity = self.row_capacity if batch == self._rows else batch  # a new batch drops the spare rows
        self._key_buffer = key_states.new_empty(row_capacity, heads, capacity, dim)
        self._value_buffer = value_states.new_empty(row_capacity, heads, capacity, value_states.shape[-1])
        self._rows, self._value_extent = batch, None
        if self._length:
            assert old_keys is not None and old_values is not None
            self._key_buffer[:batch, :, : self._length, :] = old_keys
            self._value_buffer[:batch, :, : self._length, :] = old_values

    def batch_select_indices(self, indices: torch.Tensor | Sequence[int], spare_slots: bool = True,
                             spare_rows: int = 0) -> None:
        """Keeps the rows ``indices`` (repeats allowed: branching), each copied once into new buffers; with
        ``spare_slots`` the buffers get spare slots (capacity doubled, as after a grow), so the next update appends
        without another copy of the cache, and ``spare_rows`` rows for :meth:`append_rows`. Keys that require grad
        take ``DynamicLayer``'s path (indexing)."""
        keys, values = self.keys, self.values
        if keys is None or values is None or keys.dim() != 4 or self._length == 0:
            return
        indices = torch.as_tensor(indices, dtype=torch.long, device=keys.device)
        if keys.requires_grad or values.requires_grad:  # index_select(out=...) does not support autograd
            super().batch_select_indices(indices)
            return
        capacity = max(2 * self._length, MIN_CAPACITY) if spare_slots else self._length
        rows = len(indices)
        key_buffer = keys.new_empty(rows + spare_rows, keys.shape[1], capacity, keys.shape[3])
        value_buffer = values.new_empty(rows + spare_rows, values.shape[1], capacity, values.shape[3])
        torch.index_select(keys, 0, indices, out=key_buffer[:rows, :, : self._length, :])
        torch.index_select(values, 0, indices, out=value_buffer[:rows, :, : self._length, :])
        self.set_buffers(key_buffer, value_buffer, self._length, rows)

    def append_rows(self, indices: torch.Tensor) -> None:
        """Appends copies of the filled rows ``indices`` (1-D long, repeats allowed) after the last filled row: written
        in place into spare rows when the buffers have enough, else every row is copied once into new buffers with
        as many spare rows again (as ``update`` grows slots). Keys that require grad take ``DynamicLayer``'s path."""
        keys, values = self.keys, self.values
        if keys is None or values is None or keys.dim() != 4 or self._length == 0 or len(indices) == 0:
            return
        self._check_assigned_together()
        rows, added = self._rows, len(indices)
        assert self._key_buffer is not None and self._value_buffer is not None
        if keys.requires_grad or values.requires_grad or self.row_capacity < rows + added:
            every = torch.cat([torch.arange(rows, device=indices.device), indices])
            self.batch_select_indices(every, spare_rows=rows + added)
            return
        # the new rows lie outside the filled view the indices read: no overlap
        torch.index_select(keys, 0, indices, out=self._key_buffer[rows:rows + added, :, : self._length, :])
        torch.index_select(values, 0, indices, out=self._value_buffer[rows:rows + added, :, : self._length, :])
        self._rows, self._value_extent = rows + added, None

    def move_rows(self, sources: torch.Tensor, targets: torch.Tensor, rows: int) -> None:
        """Copies the filled rows ``sources`` onto the rows ``targets`` in place (1-D long tensors of one length, no row
        in both), then keeps the first ``rows`` rows filled; the rows after them become spare rows. Keys that require
        grad take ``DynamicLayer``'s path (indexing a copy)."""
        keys, values = self.keys, self.values
        if keys is None or values is None or keys.dim() != 4 or self._length == 0:
            return
        self._check_assigned_together()
        if keys.requires_grad or values.requires_grad:
            order = torch.arange(self._rows, device=sources.device)
            order[targets] = sources
            super().batch_select_indices(order[:rows])
            return
        if len(sources):  # keys and values are views of the buffers: the copies land there
            keys.index_copy_(0, targets, keys.index_select(0, sources))
            values.index_copy_(0, targets, values.index_select(0, sources))
        self._rows = rows

    def set_buffers(self, key_buffer: torch.Tensor, value_buffer: torch.Tensor, length: int,
                    rows: int | None = None) -> None:
        """Makes (rows capacity, heads, slots capacity, head_dim) tensors the buffers, their first ``rows`` rows
        (default: all) and first ``length`` slots the filled ones."""
        self._key_buffer, self._value_buffer, self._length = key_buffer, value_buffer, length
        self._rows, self._value_extent = key_buffer.shape[0] if rows is None else rows, None

    def __copy__(self) -> GrowableLayer:
        twin = GrowableLayer.__new__(GrowableLayer)
        twin.__dict__.update(self.__dict__)
        twin.keys, twin.values = self.keys, self.values
        return twin


def _extent(tensor: torch.Tensor | None) -> tuple[int, int]:
    """(rows, slots) of a (B, heads, slots, head_dim) tensor; (0, 0) for None or the 1-D placeholder of a layer not
    initialised."""
    return (tensor.shape[0], tensor.shape[-2]) if tensor is not None and tensor.dim() == 4 else (0, 0)


def _filled(buffer: torch.Tensor | None, rows: int, length: int) -> torch.Tensor | None:
    """The first ``rows`` rows and ``length`` slots of a 4-D buffer (None and placeholders as they are)."""
    return buffer if buffer is None or buffer.dim() != 4 else buffer[:rows, :, :length, :]


class GrowableCache(DynamicCache):
    """A ``DynamicCache`` made of :class:`GrowableLayer` s (created lazily, one per attention layer)."""

    def __init__(self) -> None:
        Cache.__init__(self, layer_class_to_replicate=GrowableLayer)


def cache_kwarg(model: torch.nn.Module) -> str:
    """The name of the model's cache argument: ``cache`` in transformers >= 5.2x, ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def returned_cache(output: Any, fallback: Any) -> Any:
    """The cache a forward pass returned (``cache`` in transformers >= 5.2x, ``past_key_values`` before)."""
    for name in ("cache", "past_key_values"):
        value = output.get(name) if hasattr(output, "get") else getattr(output, name, None)
        if value is not None:
            return value
    return fallback


class KVState:
    """The key/value cache of a batch of rows, with the holes left by padding.

    Attributes:
        cache: the transformers cache (B rows, L slots).
        attention_mask: (B, L) long, 1 on real tokens, 0 on holes.
        next_position: (B,) long, the position id the next real token of each row gets.
        pending: per row, ids already in the context but not yet run through the model (the last sampled id).
    """

    def __init__(self, cache: Any, attention_mask: torch.Tensor, next_position: torch.Tensor,
                 pending: list[list[int]]) -> None:
        self.cache, self.attention_mask, self.next_position, self.pending = cache, attention_mask, next_position, pending

    @classmethod
    def empty(cls, batch_size: int, device: torch.device) -> KVState:
        """A state with no context for ``batch_size`` rows."""
        return cls(GrowableCache(), torch.zeros(batch_size, 0, dtype=torch.long, device=device),
                   torch.zeros(batch_size, dtype=torch.long, device=device), [[] for _ in range(batch_size)])

    def __len__(self) -> int:
        return len(self.pending)

    @property
    def row_capacity(self) -> int:
        """Rows the cache's buffers hold: ``len(self)`` plus the spare rows of its :class:`GrowableLayer` s."""
        return max((layer.row_capacity for layer in self.cache.layers if isinstance(layer, GrowableLayer)),
                   default=len(self))

    def context_lengths(self) -> list[int]:
        """Number of context ids per row (fed and pending)."""
        return [int(n) + len(p) for n, p in zip(self.next_position.tolist(), self.pending)]

    def compact(self, min_saving: float = 0.1) -> KVState:
        """Drops the holes in place: each row's real slots move, in order, to the right end of a cache as wide as
        the longest row (left-padded), when that removes at least ``min_saving`` of the slots.

        Holes build up from the left padding of every fed chunk, from rows that stop generating before the others
        (~38% of the slots after ten text-world turns) and, in a rollout tree, from children rewound by masking
        (~46% of a tree's slots); attention and the cache's append both cost in proportion to the width. Positions
        are explicit (``next_position``), so no row's attention changes, and a :class:`RewindInfo` rewinds by
        position, so it stays valid across a compaction. A :class:`GrowableLayer` gets spare slots (as after a
        grow) and keeps its spare rows, so the next append needs no copy.

        Returns:
            ``self``.
        """
        mask = self.attention_mask.bool()
        width = int(mask.sum(dim=1).max()) if mask.numel() else 0
        if mask.shape[1] == 0 or width > (1.0 - min_saving) * mask.shape[1]:
            return self
        # A stable sort of "is real" puts the holes first and keeps the real slots in order.
        index = torch.sort(mask.to(torch.int8), dim=1, stable=True).indices[:, -width:]
        for layer in self.cache.layers:
            keys, values = layer.keys, layer.values
            slots = index[:, None, :, None].expand(-1, keys.shape[1], -1, keys.shape[3])
            if isinstance(layer, GrowableLayer) and not (keys.requires_grad or values.requires_grad):
                capacity, rows = max(2 * width, MIN_CAPACITY), keys.shape[0]
                key_buffer = keys.new_empty(layer.row_capacity, keys.shape[1], capacity, keys.shape[3])  # spare rows stay
                value_buffer = values.new_empty(layer.row_capacity, values.shape[1], capacity, values.shape[3])
                torch.gather(keys, 2, slots, out=key_buffer[:rows, :, :width, :])
                torch.gather(values, 2, slots, out=value_buffer[:rows, :, :width, :])
                layer.set_buffers(key_buffer, value_buffer, width, rows)
            else:
                layer.keys, layer.values = keys.gather(2, slots), values.gather(2, slots)
        self.attention_mask = self.attention_mask.gather(1, index)
        return self

    def select(self, rows: Sequence[int], spare_slots: bool = True, spare_rows: int = 0) -> KVState:
        """Returns a new state made of copies of ``rows`` (repeats allowed: branching from a prefix); without
        ``spare_slots`` its :class:`GrowableLayer` s get no room to append slots (a row kept, not extended), with
        ``spare_rows`` room for that many :meth:`append_rows` without another copy."""
        index = torch.as_tensor(list(rows), dtype=torch.long, device=self.attention_mask.device)
        cache = copy.copy(self.cache)
        cache.layers = [copy.copy(layer) for layer in self.cache.layers]
        if self.attention_mask.shape[1] > 0:
            for layer in cache.layers:
                if isinstance(layer, GrowableLayer):
                    layer.batch_select_indices(index, spare_slots, spare_rows)
                else:
                    layer.batch_select_indices(index)
        return KVState(cache, self.attention_mask[index], self.next_position[index],
                       [list(self.pending[r]) for r in rows])

    def retain_rows(self, rows: Sequence[int]) -> list[int]:
        """Keeps the distinct ``rows`` in place and drops the others: a kept row at or past ``len(rows)`` moves into a
        dropped row before it, so only as many rows are copied as were dropped (a :class:`GrowableLayer`; other layers
        are copied whole). The freed rows of a :class:`GrowableLayer` become spare rows for :meth:`append_rows`.

        Returns:
            The old index of each row of the state, ``len(rows)`` of them: the kept rows, not in ``rows``' order.

        Raises:
            ValueError: ``rows`` repeats a row or names one the state does not have, or a layer's keys and values
                were last assigned apart (see :class:`GrowableLayer`).
        """
        kept = set(rows)
        if len(kept) != len(rows) or not kept <= set(range(len(self))):
            raise ValueError(f"retain_rows needs distinct rows of 0..{len(self) - 1}, got {list(rows)}")
        for layer in self.cache.layers:  # before any row moves: a refusal leaves the state as it was
            if isinstance(layer, GrowableLayer):
                layer._check_assigned_together()
        count = len(rows)
        targets = [r for r in range(count) if r not in kept]
        sources = [r for r in rows if r >= count]
        order = list(range(count))
        for target, source in zip(targets, sources, strict=True):
            order[target] = source
        if order == list(range(len(self))):
            return order
        device = self.attention_mask.device
        index = torch.as_tensor(order, dtype=torch.long, device=device)
        if self.attention_mask.shape[1] > 0:
            moved = torch.as_tensor(sources, dtype=torch.long, device=device)
            into = torch.as_tensor(targets, dtype=torch.long, device=device)
            for layer in self.cache.layers:
                if isinstance(layer, GrowableLayer):
                    layer.move_rows(moved, into, count)
                else:
                    layer.batch_select_indices(index)
        self.attention_mask = self.attention_mask[index]
        self.next_position = self.next_position[index]
        self.pending = [self.pending[r] for r in order]
        return order

    def append_rows(self, rows: Sequence[int]) -> KVState:
        """Appends, in place, a copy of each of ``rows`` (repeats allowed) after the last row: children branching
        from their parents' prefixes. A :class:`GrowableLayer` writes only the new rows when it has spare rows
        (:meth:`select`'s ``spare_rows``); otherwise every row is copied once, as ``select`` would.

        Returns:
            ``self``, with ``len(self) + len(rows)`` rows.
        """
        if not rows:
            return self
        index = torch.as_tensor(list(rows), dtype=torch.long, device=self.attention_mask.device)
        if self.attention_mask.shape[1] > 0:
            for layer in self.cache.layers:
                if isinstance(layer, GrowableLayer):
                    layer.append_rows(index)
                else:  # a plain DynamicLayer: every row copied
                    layer.batch_select_indices(torch.cat([torch.arange(len(self), device=index.device), index]))
        self.attention_mask = torch.cat([self.attention_mask, self.attention_mask[index]])
        self.next_position = torch.cat([self.next_position, self.next_position[index]])
        self.pending = self.pending + [list(self.pending[r]) for r in rows]
        return self


@dataclasses.dataclass
class RewindInfo:
    """What the rows of a KV state looked like before a generate call, to rewind a row to its turn boundary.

    A rewind is by position: a row had ``next_position`` real slots then (every fed id fills one real slot, in
    order), so rewinding keeps a row's first ``next_position`` real slots and turns the later ones into holes,
    wherever compaction (:meth:`KVState.compact`) has moved them since.
    """

    next_position: dict[int, int]
    pending: dict[int, list[int]]

    @classmethod
    def of(cls, state: KVState, path_ids: list[int]) -> RewindInfo:
        return cls(
            dict(zip(path_ids, state.next_position.tolist(), strict=True)),
            {pid: list(p) for pid, p in zip(path_ids, state.pending, strict=True)},
        )

    def apply(self, row_state: KVState, path_id: int) -> KVState:
        """Cuts a one-row state (a copy made by ``select``) down to its first ``next_position`` real slots, without
        holes."""
        real = row_state.attention_mask[0].nonzero().squeeze(1)[: self.next_position[path_id]]
        for layer in row_state.cache.layers:
            layer.keys, layer.values = layer.keys.index_select(2, real), layer.values.index_select(2, real)
        row_state.attention_mask = torch.ones_like(row_state.attention_mask[:, : len(real)])
        row_state.next_position = torch.full_like(row_state.next_position, self.next_position[path_id])
        row_state.pending = [list(self.pending[path_id])]
        return row_state

    def mask_row(self, state: KVState, row: int, path_id: int) -> None:
        """Rewinds ``row`` of ``state`` (a copy made by ``select``) in place by turning its real slots after the first
        ``next_position`` into holes: the same context as :meth:`apply`, without cutting it out of the batch."""
        mask = state.attention_mask[row]
        mask.mul_((mask.cumsum(0) <= self.next_position[path_id]).to(mask.dtype))
        state.next_position[row] = self.next_position[path_id]
        state.pending[row] = list(self.pending[path_id])


def merge_kv_states(states: Sequence[KVState], spare_rows: int = 0) -> KVState:
    """Stacks the rows of several KV states; shorter caches get hole slots (attention mask 0) at the end.

    Positions are explicit in :class:`KVState`, so a hole changes nothing a row attends to. Each layer's rows are
    written once into one new buffer; a :class:`GrowableLayer` gets spare slots there as if it had grown (the next
    round appends without another copy of the whole cache), and ``spare_rows`` rows for
    :meth:`KVState.append_rows`. A single non-empty state is returned as it is.

    Raises:
        TypeError: a cache layer has no ``keys``/``values`` tensors (not a transformers DynamicCache).
    """
    states = [s for s in states if len(s) > 0]
    if len(states) == 1:
        return states[0]
    width = max(int(s.attention_mask.shape[1]) for s in states)
    base = states[0].cache
    cache = copy.copy(base)
    cache.layers = []
    for index, layer in enumerate(base.layers):
        if not hasattr(layer, "keys"):
            raise TypeError(f"cannot merge cache layer {type(layer).__name__}: no keys/values tensors")
        merged = copy.copy(layer)
        growable = isinstance(merged, GrowableLayer)
        capacity = max(2 * width, MIN_CAPACITY) if growable else width
        spare = spare_rows if growable else 0
        keys = _stack_slots([s.cache.layers[index].keys for s in states], width, capacity, spare)
        values = _stack_slots([s.cache.layers[index].values for s in states], width, capacity, spare)
        if growable:
            merged.set_buffers(keys, values, width, keys.shape[0] - spare)
        else:
            merged.keys, merged.values = keys, values
        cache.layers.append(merged)
    mask = torch.cat([F.pad(s.attention_mask, (0, width - s.attention_mask.shape[1])) for s in states])
    return KVState(
        cache, mask, torch.cat([s.next_position for s in states]), [list(p) for s in states for p in s.pending]
    )


def _stack_slots(tensors: Sequence[torch.Tensor], width: int, capacity: int, spare_rows: int = 0) -> torch.Tensor:
    """Stacks (B_i, heads, L_i, head_dim) cache tensors into one (sum B_i + spare_rows, heads, capacity, head_dim)
    buffer: slots ``L_i:width`` of each part are zeros (holes must hold finite values: attention masks them by adding
    -inf), slots after ``width`` and the spare rows are left unwritten."""
    first = tensors[0]
    out = first.new_empty(sum(t.shape[0] for t in tensors) + spare_rows, first.shape[1], capacity, first.shape[-1])
    row = 0
    for tensor in tensors:
        rows, filled = tensor.shape[0], tensor.shape[-2]
        out[row:row + rows, :, :filled] = tensor
        out[row:row + rows, :, filled:width] = 0
        row += rows
    return out
