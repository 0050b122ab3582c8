"""KV-cache surgery for tree rollouts: rewind a row to a turn boundary, stack rows of several states.

Works on :class:`rlvr_gym_agents.policy.KVState` over a transformers ``DynamicCache`` (layers holding
``keys``/``values`` tensors of shape (B, heads, slots, head_dim)). Holes (slots with attention mask 0) are
harmless because :class:`KVState` carries explicit position ids, so rewinding only needs to drop the slots
added since a snapshot, and stacking pads shorter caches with hole slots at the end.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from rlvr_gym_agents.policy import KVState


@dataclasses.dataclass
class RewindInfo:
    """What a KV state looked like before a generate call, to rewind a row to its turn boundary."""

    num_slots: int
    next_position: dict[int, int]
    pending: dict[int, list[int]]

    @classmethod
    def of(cls, state: KVState, path_ids: list[int]) -> RewindInfo:
        return cls(
            int(state.attention_mask.shape[1]),
            dict(zip(path_ids, state.next_position.tolist(), strict=True)),
            {pid: list(p) for pid, p in zip(path_ids, state.pending, strict=True)},
        )

    def apply(self, row_state: KVState, path_id: int) -> KVState:
        """Drops the slots added since the snapshot from a one-row state (a copy made by ``select``)."""
        for layer in row_state.cache.layers:
            layer.keys = layer.keys[..., : self.num_slots, :]
            layer.values = layer.values[..., : self.num_slots, :]
        row_state.attention_mask = row_state.attention_mask[:, : self.num_slots]
        row_state.next_position = torch.full_like(row_state.next_position, self.next_position[path_id])
        row_state.pending = [list(self.pending[path_id])]
        return row_state


def merge_kv_states(states: Sequence[KVState]) -> KVState:
    """Stacks the rows of several KV states; shorter caches get hole slots (attention mask 0) at the end.

    Positions are explicit in :class:`KVState`, so a hole changes nothing a row attends to.

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
        merged.keys = torch.cat([_pad_slots(s.cache.layers[index].keys, width) for s in states])
        merged.values = torch.cat([_pad_slots(s.cache.layers[index].values, width) for s in states])
        cache.layers.append(merged)
    mask = torch.cat([F.pad(s.attention_mask, (0, width - s.attention_mask.shape[1])) for s in states])
    return KVState(
        cache, mask, torch.cat([s.next_position for s in states]), [list(p) for s in states for p in s.pending]
    )


def _pad_slots(tensor: torch.Tensor, width: int) -> torch.Tensor:
    """Right-pads the slot dimension (-2) of a (B, heads, L, head_dim) cache tensor with zeros."""
    return F.pad(tensor, (0, 0, 0, width - tensor.shape[-2]))
