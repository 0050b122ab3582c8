"""A transformers KV cache that appends in place: each layer keeps spare slots and doubles when they run out.

transformers' ``DynamicLayer`` appends a decoding step's keys and values with ``torch.cat``, which copies the
whole cache every step: with 64 rows of ~300 slots that was most of a decoding step's time on a 2-core CPU.
:class:`GrowableLayer` writes new slots into a buffer with spare capacity (amortised O(1) per slot, like a
Python list) and hands the model views of its filled part. Everything that replaces a layer's tensors
(``KVState.compact``/``select``, the tree sampler's rewind, transformers' ``crop`` and ``batch_select_indices``)
assigns ``layer.keys``/``layer.values`` as before; the assigned tensor becomes the buffer, filled to its end.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

MIN_CAPACITY = 64
"""Slots allocated at least when a layer's buffer grows."""


class GrowableLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``keys``/``values`` (B, heads, slots, head_dim) are views of larger buffers.

    ``update`` writes the new slots after the filled ones and reallocates (capacity doubled, at least
    :data:`MIN_CAPACITY`) only when they do not fit. Assigning ``keys`` or ``values`` makes the assigned tensor
    the buffer (no spare slots), so code written for ``DynamicLayer`` keeps working. A shallow copy shares
    only the filled part: the next write of either layer never lands in slots the other can see.
    """

    def __init__(self, **kwargs: Any) -> None:
        self._key_buffer: torch.Tensor | None = None
        self._value_buffer: torch.Tensor | None = None
        self._length = 0
        super().__init__(**kwargs)

    @property  # type: ignore[override]
    def keys(self) -> torch.Tensor | None:
        """The filled slots, (B, heads, slots, head_dim); None before the first update."""
        return self._filled(self._key_buffer)

    @keys.setter
    def keys(self, tensor: torch.Tensor | None) -> None:
        self._key_buffer = tensor
        self._length = tensor.shape[-2] if tensor is not None and tensor.dim() == 4 else 0

    @property  # type: ignore[override]
    def values(self) -> torch.Tensor | None:
        """The filled slots, (B, heads, slots, head_dim); None before the first update."""
        return self._filled(self._value_buffer)

    @values.setter
    def values(self, tensor: torch.Tensor | None) -> None:
        self._value_buffer = tensor

    def _filled(self, buffer: torch.Tensor | None) -> torch.Tensor | None:
        return buffer if buffer is None or buffer.dim() != 4 else buffer[..., : self._length, :]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Appends (B, heads, n, head_dim) keys and values; returns all filled slots (views)."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, end = self._length, self._length + key_states.shape[-2]
        if not self._fits(key_states, end):
            self._grow(key_states, value_states, end)
        assert self._key_buffer is not None and self._value_buffer is not None
        self._key_buffer[..., start:end, :] = key_states
        self._value_buffer[..., start:end, :] = value_states
        self._length = end
        return self.keys, self.values  # type: ignore[return-value]

    def _fits(self, key_states: torch.Tensor, end: int) -> bool:
        buffer = self._key_buffer
        return (buffer is not None and buffer.dim() == 4 and buffer.shape[-2] >= end
                and buffer.shape[:2] == key_states.shape[:2] and buffer.dtype == key_states.dtype)

    def _grow(self, key_states: torch.Tensor, value_states: torch.Tensor, end: int) -> None:
        capacity = max(2 * self._length, end, MIN_CAPACITY)
        old_keys, old_values = self.keys, self.values
        batch, heads, _, dim = key_states.shape
        self._key_buffer = key_states.new_empty(batch, heads, capacity, dim)
        self._value_buffer = value_states.new_empty(batch, heads, capacity, value_states.shape[-1])
        if self._length:
            assert old_keys is not None and old_values is not None
            self._key_buffer[..., : self._length, :] = old_keys
            self._value_buffer[..., : self._length, :] = old_values

    def __copy__(self) -> GrowableLayer:
        twin = GrowableLayer.__new__(GrowableLayer)
        twin.__dict__.update(self.__dict__)
        twin.keys, twin.values = self.keys, self.values
        return twin


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
