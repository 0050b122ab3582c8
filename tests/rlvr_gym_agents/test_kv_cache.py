"""GrowableLayer / GrowableCache: in-place appends with spare slots, behaving like transformers' DynamicLayer; merged
states keep spare slots; first contexts that are identical or share a long prefix are prefilled once."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.kv import MIN_CAPACITY, GrowableCache, GrowableLayer, KVState, RewindInfo, merge_kv_states
from rlvr_gym_agents.policy.transformers import MIN_SHARED_PREFILL, shared_prefixes
from transformers.cache_utils import DynamicLayer


def _slots(n: int, fill: float) -> torch.Tensor:
    return torch.full((2, 3, n, 4), fill) + torch.arange(n, dtype=torch.float32)[None, None, :, None]


def test_updates_append_in_place_until_the_buffer_doubles() -> None:
    layer = GrowableLayer()
    assert layer.keys is None and layer.get_seq_length() == 0
    keys, values = layer.update(_slots(5, 0.0), _slots(5, 100.0))
    assert keys.shape == (2, 3, 5, 4) and layer.get_seq_length() == 5
    buffer = layer._key_buffer
    assert buffer is not None and buffer.shape[2] == MIN_CAPACITY
    parts_k, parts_v = [_slots(5, 0.0)], [_slots(5, 100.0)]
    for step in range(MIN_CAPACITY - 5):  # one slot per decoding step: no reallocation until the 65th slot
        parts_k.append(_slots(1, float(step)))
        parts_v.append(_slots(1, -float(step)))
        keys, values = layer.update(parts_k[-1], parts_v[-1])
    assert layer._key_buffer is buffer
    keys, values = layer.update(_slots(1, 7.0), _slots(1, 8.0))
    parts_k.append(_slots(1, 7.0))
    parts_v.append(_slots(1, 8.0))
    assert layer._key_buffer is not buffer and layer._key_buffer.shape[2] == 2 * MIN_CAPACITY
    assert torch.equal(keys, torch.cat(parts_k, dim=2)) and torch.equal(values, torch.cat(parts_v, dim=2))
    assert layer.get_seq_length() == MIN_CAPACITY + 1


def test_assigned_tensors_become_the_buffer_and_later_updates_append_to_them() -> None:
    layer = GrowableLayer()
    layer.update(_slots(4, 0.0), _slots(4, 1.0))
    layer.keys, layer.values = layer.keys[..., :2, :], layer.values[..., :2, :]  # a rewind, as tree_kv does
    assert layer.get_seq_length() == 2
    keys, values = layer.update(_slots(3, 9.0), _slots(3, 10.0))
    assert torch.equal(keys, torch.cat([_slots(4, 0.0)[..., :2, :], _slots(3, 9.0)], dim=2))
    assert torch.equal(values, torch.cat([_slots(4, 1.0)[..., :2, :], _slots(3, 10.0)], dim=2))
    layer.batch_select_indices(torch.tensor([1, 1, 0]))
    assert layer.keys.shape == (3, 3, 5, 4) and torch.equal(layer.keys[2], keys[0])


def test_a_shallow_copy_never_sees_the_other_layers_later_slots() -> None:
    layer = GrowableLayer()
    layer.update(_slots(3, 0.0), _slots(3, 0.0))
    twin = copy.copy(layer)
    layer.update(_slots(1, 5.0), _slots(1, 5.0))
    twin.update(_slots(1, -5.0), _slots(1, -5.0))
    assert torch.equal(layer.keys[..., 3:, :], _slots(1, 5.0))
    assert torch.equal(twin.keys[..., 3:, :], _slots(1, -5.0))
    assert torch.equal(layer.keys[..., :3, :], twin.keys[..., :3, :])


def test_policy_states_use_the_growable_cache(tiny_policy: TransformersPolicy) -> None:
    _, state = tiny_policy.generate([[3, 9, 10], [3, 9]], SamplingParams(temperature=0.0, max_new_tokens=3))
    assert isinstance(state.cache, GrowableCache)
    assert all(isinstance(layer, GrowableLayer) for layer in state.cache.layers)
    assert state.cache.layers[0].keys.shape[2] == state.attention_mask.shape[1]


def test_identical_first_contexts_are_prefilled_once(tiny_policy: TransformersPolicy) -> None:
    """A group's shared prompt runs through the model once; each row still samples on its own."""
    rows_per_call: list[int] = []
    hook = tiny_policy.model.register_forward_pre_hook(
        lambda _module, _args, kwargs: rows_per_call.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=3)
    try:
        grouped, state = tiny_policy.generate([[3, 9, 10], [3, 9, 10, 7], [3, 9, 10], [3, 9, 10]], sampling)
    finally:
        hook.remove()
    assert rows_per_call[0] == 2 and rows_per_call[1:] and set(rows_per_call[1:]) == {4}
    alone, _ = tiny_policy.generate([[3, 9, 10], [3, 9, 10, 7]], sampling)
    for got, want in zip(grouped, [alone[0], alone[1], alone[0], alone[0]]):
        assert got.token_ids == want.token_ids
        assert got.logps == pytest.approx(want.logps, abs=1e-5)
    assert state.context_lengths() == [3 + len(grouped[0].token_ids), 4 + len(grouped[1].token_ids),
                                       3 + len(grouped[2].token_ids), 3 + len(grouped[3].token_ids)]


def test_shared_prefixes_group_sorted_rows_by_a_long_enough_leading_run() -> None:
    rows = [[1, 2, 3, 4, 5, 9], [1, 2, 3, 4, 6], [7, 8], [1, 2, 3, 4, 5, 9, 1], [1, 2, 3]]
    # rows 0, 1, 3 share [1, 2, 3, 4]; row 4 is too short to share 3 ids and keep one; row 2 shares nothing
    assert shared_prefixes(rows, 3) == ([0, 0, 1, 0, 2], [[1, 2, 3, 4], [], []])
    assert shared_prefixes(rows, 5) == ([0, 1, 2, 0, 3], [[1, 2, 3, 4, 5], [], [], []])
    # a prefix leaves every row its last id
    assert shared_prefixes([[1, 2, 3, 4], [1, 2, 3, 4, 5]], 2) == ([0, 0], [[1, 2, 3]])


def test_first_contexts_sharing_a_long_prefix_prefill_it_once(tiny_policy: TransformersPolicy) -> None:
    """Fresh rows sharing MIN_SHARED_PREFILL+ leading ids (a tree's fallback branches) run them once, then each its
    rest; each row generates what it generates alone."""
    common = [(3 + i) % 20 + 3 for i in range(MIN_SHARED_PREFILL + 5)]
    contexts = [common + [7, 9], common[:-2] + [10], common + [7, 9], [3, 9, 10]]
    rows_per_call: list[int] = []
    hook = tiny_policy.model.register_forward_pre_hook(
        lambda _module, _args, kwargs: rows_per_call.append(kwargs["input_ids"].shape[0]), with_kwargs=True)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=3)
    try:
        grouped, state = tiny_policy.generate(contexts, sampling)
    finally:
        hook.remove()
    assert rows_per_call[:2] == [2, 3]  # the shared run and the row alone; then the 3 distinct rows' rests
    for context, got in zip(contexts, grouped):
        alone, _ = tiny_policy.generate([context], sampling)
        assert got.token_ids == alone[0].token_ids
        assert got.logps == pytest.approx(alone[0].logps, abs=1e-5)
    assert state.context_lengths() == [len(c) + len(g.token_ids) for c, g in zip(contexts, grouped)]


def _state(lengths: list[int], fill: float) -> KVState:
    """A one-layer growable state with a row per length (each row's real slots filled with ``fill``)."""
    width = max(lengths)
    cache = GrowableCache()
    cache.layers = [GrowableLayer()]
    cache.layers[0].update(_slots(width, fill)[:1].expand(len(lengths), -1, -1, -1).clone(),
                           _slots(width, -fill)[:1].expand(len(lengths), -1, -1, -1).clone())
    mask = torch.tensor([[1] * n + [0] * (width - n) for n in lengths])
    return KVState(cache, mask, torch.tensor(lengths), [[7] for _ in lengths])


def test_merged_states_are_padded_with_zero_holes_and_get_spare_slots() -> None:
    a, b = _state([5, 3], 1.0), _state([2], 50.0)
    merged = merge_kv_states([a, b])
    layer = merged.cache.layers[0]
    assert layer.keys.shape == (3, 3, 5, 4)
    assert torch.equal(layer.keys[:2], a.cache.layers[0].keys)
    assert torch.equal(layer.keys[2, :, :2], b.cache.layers[0].keys[0]) and not layer.keys[2, :, 2:].any()
    assert torch.equal(layer.values[2, :, :2], b.cache.layers[0].values[0]) and not layer.values[2, :, 2:].any()
    assert merged.attention_mask.tolist() == [[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 0, 0, 0]]
    assert merged.next_position.tolist() == [5, 3, 2] and merged.pending == [[7], [7], [7]]
    buffer = layer._key_buffer
    assert buffer.shape[2] == MIN_CAPACITY  # spare slots, as if the layer had grown
    keys, _ = layer.update(torch.ones(3, 3, 2, 4), torch.ones(3, 3, 2, 4))
    assert layer._key_buffer is buffer and keys.shape[2] == 7  # appended in place, no copy of the cache
    assert torch.equal(keys[:, :, :5], torch.cat([a.cache.layers[0].keys, F.pad(b.cache.layers[0].keys, (0, 0, 0, 3))]))
    assert torch.equal(a.cache.layers[0].keys, _state([5, 3], 1.0).cache.layers[0].keys)  # the parts are untouched


def test_selected_rows_are_copied_once_into_buffers_with_spare_slots() -> None:
    layer = GrowableLayer()
    layer.update(_slots(5, 0.0), _slots(5, 1.0) * torch.tensor([1.0, -1.0])[:, None, None, None])
    keys, values = layer.keys.clone(), layer.values.clone()
    layer.batch_select_indices(torch.tensor([1, 1, 0]))  # repeats: two children of row 1
    assert torch.equal(layer.keys, keys[[1, 1, 0]]) and torch.equal(layer.values, values[[1, 1, 0]])
    buffer = layer._key_buffer
    assert buffer.shape[2] == MIN_CAPACITY
    new_keys, _ = layer.update(torch.full((3, 3, 1, 4), 9.0), torch.full((3, 3, 1, 4), 9.0))
    assert layer._key_buffer is buffer and torch.equal(new_keys[:, :, 5], torch.full((3, 3, 4), 9.0))


def test_mask_row_rewinds_a_row_by_position_to_the_context_apply_cuts_out() -> None:
    # holes anywhere (left padding, stopped rows, a compaction): a rewind keeps each row's first real slots
    state = _state([6, 6], 1.0)
    state.attention_mask = torch.tensor([[0, 1, 1, 0, 1, 1], [1, 1, 1, 1, 0, 1]])
    state.next_position = torch.tensor([4, 5])
    rewind = RewindInfo(next_position={10: 3, 11: 5}, pending={10: [4], 11: [5]})
    batch = state.select([0, 1])
    rewind.mask_row(batch, 0, 10)
    assert batch.attention_mask.tolist() == [[0, 1, 1, 0, 1, 0], [1, 1, 1, 1, 0, 1]]  # row 1 is not touched
    assert batch.next_position.tolist() == [3, 5] and batch.pending == [[4], [7]]
    assert state.attention_mask.tolist() == [[0, 1, 1, 0, 1, 1], [1, 1, 1, 1, 0, 1]]  # nor is the state it came from
    cut = rewind.apply(state.select([0]), 10)
    assert cut.attention_mask.tolist() == [[1, 1, 1]] and cut.next_position.tolist() == [3] and cut.pending == [[4]]
    assert torch.equal(cut.cache.layers[0].keys, state.cache.layers[0].keys[:1, :, [1, 2, 4]])
    assert torch.equal(cut.cache.layers[0].values, state.cache.layers[0].values[:1, :, [1, 2, 4]])


def test_compact_keeps_spare_slots_and_a_rewind_stays_valid_across_it() -> None:
    state = _state([6, 6], 1.0)
    state.attention_mask = torch.tensor([[0, 1, 1, 0, 1, 1], [1, 0, 1, 0, 0, 1]])
    state.next_position = torch.tensor([4, 3])
    keys = state.cache.layers[0].keys.clone()
    rewind = RewindInfo.of(state, [10, 11])
    state.compact(min_saving=0.0)
    assert state.attention_mask.tolist() == [[1, 1, 1, 1], [0, 1, 1, 1]]
    layer = state.cache.layers[0]
    # each row's real slots in order at the right end (row 1 is left-padded with one of its holes)
    assert torch.equal(layer.keys, torch.stack([keys[0, :, [1, 2, 4, 5]], keys[1, :, [4, 0, 2, 5]]]))
    buffer = layer._key_buffer
    assert buffer.shape[2] == MIN_CAPACITY  # spare slots: the next append lands in place
    layer.update(torch.zeros(2, 3, 1, 4), torch.zeros(2, 3, 1, 4))
    assert layer._key_buffer is buffer
    state.attention_mask = torch.cat([state.attention_mask, torch.ones(2, 1, dtype=torch.long)], dim=1)
    rewind.mask_row(state, 0, 10)  # the snapshot was taken before the compaction and the append
    assert state.attention_mask[0].tolist() == [1, 1, 1, 1, 0]
    cut = RewindInfo(next_position={11: 2}, pending={11: []}).apply(state.select([1]), 11)
    assert torch.equal(cut.cache.layers[0].keys[0], keys[1, :, [0, 2]])


def test_rows_kept_without_spare_slots_and_selected_like_a_dynamic_layer() -> None:
    layer = GrowableLayer()
    layer.update(_slots(5, 0.0), _slots(5, 1.0))
    keys = layer.keys.clone()
    kept = copy.copy(layer)
    kept.batch_select_indices(torch.tensor([1]), spare_slots=False)
    assert kept._key_buffer.shape[2] == 5 and torch.equal(kept.keys, keys[[1]])
    listed = copy.copy(layer)
    listed.batch_select_indices([1, 0])  # type: ignore[arg-type]  # DynamicLayer takes a list too
    assert torch.equal(listed.keys, keys[[1, 0]])
    trained = GrowableLayer()
    trained.update(_slots(3, 0.0).requires_grad_(), _slots(3, 1.0).requires_grad_())
    trained.batch_select_indices(torch.tensor([0, 0]))  # keys that require grad: indexing, as DynamicLayer does
    assert trained.keys.shape == (2, 3, 3, 4) and trained.keys.requires_grad


def _distinct(rows: int, n: int, fill: float) -> torch.Tensor:
    """(rows, 3, n, 4) slots whose rows all differ (row r adds 100 r)."""
    return torch.full((rows, 3, n, 4), fill) + torch.arange(n, dtype=torch.float32)[None, None, :, None] + (
        100.0 * torch.arange(rows, dtype=torch.float32)[:, None, None, None])


def test_rows_append_in_place_into_spare_rows_and_reallocate_when_they_run_out() -> None:
    layer = GrowableLayer()
    layer.update(_distinct(2, 5, 0.0), _distinct(2, 5, 0.5))
    keys, values = layer.keys.clone(), layer.values.clone()
    layer.batch_select_indices(torch.tensor([0, 1]), spare_rows=3)
    buffer = layer._key_buffer
    assert buffer.shape[0] == 5 and layer.keys.shape == (2, 3, 5, 4)
    layer.append_rows(torch.tensor([1, 1]))  # two children of row 1: written into spare rows, nothing copied
    assert layer._key_buffer is buffer and torch.equal(layer.keys, keys[[0, 1, 1]][[0, 1, 2, 2]])
    assert torch.equal(layer.values, values[[0, 1, 1, 1]])
    step_k, step_v = _distinct(4, 1, 9.0), _distinct(4, 1, -9.0)
    new_keys, new_values = layer.update(step_k, step_v)  # all four rows decode
    assert layer._key_buffer is buffer and new_keys.shape == (4, 3, 6, 4)
    assert torch.equal(new_keys, torch.cat([keys[[0, 1, 1, 1]], step_k], dim=2))
    assert torch.equal(new_values, torch.cat([values[[0, 1, 1, 1]], step_v], dim=2))
    layer.append_rows(torch.tensor([3, 0]))  # one spare row left for two: every row copied once, spare rows again
    assert layer._key_buffer is not buffer and layer._key_buffer.shape[0] == 12
    assert torch.equal(layer.keys, new_keys[[0, 1, 2, 3, 3, 0]])
    assert torch.equal(layer.values, new_values[[0, 1, 2, 3, 3, 0]])


def test_a_shallow_copy_never_sees_the_other_layers_later_rows() -> None:
    layer = GrowableLayer()
    layer.update(_distinct(3, 4, 0.0), _distinct(3, 4, 0.5))
    layer.batch_select_indices(torch.tensor([0, 1, 2]), spare_rows=4)
    before_k, before_v = layer.keys.clone(), layer.values.clone()
    twin = copy.copy(layer)
    layer.append_rows(torch.tensor([0]))  # into the shared buffer's spare rows
    twin.append_rows(torch.tensor([2]))  # the twin has no spare rows of its own: it copies
    assert torch.equal(layer.keys, before_k[[0, 1, 2, 0]]) and torch.equal(layer.values, before_v[[0, 1, 2, 0]])
    assert torch.equal(twin.keys, before_k[[0, 1, 2, 2]]) and torch.equal(twin.values, before_v[[0, 1, 2, 2]])


def test_dynamic_layer_methods_that_assign_keys_then_values_keep_both() -> None:
    """transformers' own ``batch_select_indices`` (keys that require grad), ``reorder_cache`` and ``crop`` assign
    ``keys`` before they read ``values``: the values keep their extent until they are assigned."""
    keys, values = _distinct(3, 5, 0.0), _distinct(3, 5, 0.5)
    trained = GrowableLayer()
    trained.update(keys.clone().requires_grad_(), values.clone().requires_grad_())
    trained.batch_select_indices(torch.tensor([2]))  # fewer rows than before
    assert torch.equal(trained.keys, keys[[2]]) and torch.equal(trained.values, values[[2]])
    beams = GrowableLayer()
    beams.update(keys, values)
    beams.reorder_cache(torch.tensor([2, 1]))
    assert torch.equal(beams.keys, keys[[2, 1]]) and torch.equal(beams.values, values[[2, 1]])
    cropped = GrowableLayer()
    cropped.update(keys, values)
    cropped.crop(-2)
    assert torch.equal(cropped.keys, keys[:, :, :3]) and torch.equal(cropped.values, values[:, :, :3])
    new_keys, new_values = cropped.update(_distinct(3, 1, 7.0), _distinct(3, 1, -7.0))
    assert torch.equal(new_keys, torch.cat([keys[:, :, :3], _distinct(3, 1, 7.0)], dim=2))
    assert torch.equal(new_values, torch.cat([values[:, :, :3], _distinct(3, 1, -7.0)], dim=2))
    half = GrowableLayer()  # keys assigned alone: a write would leave keys and values inconsistent
    half.update(keys, values)
    half.keys = keys[[2, 1]]
    with pytest.raises(ValueError, match="assign both"):
        half.update(_distinct(2, 1, 0.0), _distinct(2, 1, 0.0))
    with pytest.raises(ValueError, match="assign both"):
        half.append_rows(torch.tensor([0]))


def test_appended_state_rows_equal_selected_ones_and_compaction_keeps_spare_rows() -> None:
    state = _state([6, 4, 5], 1.0)
    state.pending = [[1], [2], [3]]
    layer = state.cache.layers[0]
    layer.keys, layer.values = _distinct(3, 6, 1.0), _distinct(3, 6, -1.0)  # rows that differ
    expected = state.select([0, 1, 2, 2, 0])
    grown = state.select([0, 1, 2], spare_rows=2)
    assert grown.append_rows([2, 0]) is grown
    assert torch.equal(grown.cache.layers[0].keys, expected.cache.layers[0].keys)
    assert torch.equal(grown.cache.layers[0].values, expected.cache.layers[0].values)
    assert torch.equal(grown.attention_mask, expected.attention_mask)
    assert grown.next_position.tolist() == [6, 4, 5, 5, 6] and grown.pending == [[1], [2], [3], [3], [1]]
    grown.pending[3].append(4)  # a child's pending ids are its own
    assert grown.pending[2] == [3]
    spare = state.select([0, 1], spare_rows=4)
    spare.compact(min_saving=0.0)  # drops row 1's holes; the spare rows stay
    compacted = spare.cache.layers[0]
    buffer = compacted._key_buffer
    assert buffer.shape[0] == 6 and spare.attention_mask.tolist() == [[1] * 6, [0, 0, 1, 1, 1, 1]]
    spare.append_rows([1])
    assert compacted._key_buffer is buffer and len(spare) == 3
    assert torch.equal(compacted.keys[2], compacted.keys[1]) and torch.equal(compacted.values[2], compacted.values[1])
    assert torch.equal(compacted.keys[1, :, 2:], layer.keys[1, :, :4])  # row 1's real slots, right-aligned
    assert torch.equal(compacted.values[1, :, 2:], layer.values[1, :, :4])
    assert spare.attention_mask[2].tolist() == [0, 0, 1, 1, 1, 1] and spare.next_position.tolist() == [6, 4, 4]
    merged = merge_kv_states([_state([3], 1.0), _state([2], 2.0)], spare_rows=2)
    assert merged.cache.layers[0]._key_buffer.shape[0] == 4 and merged.cache.layers[0].keys.shape[0] == 2


def test_retained_rows_move_into_dropped_ones_in_place_and_the_freed_rows_become_spare() -> None:
    state = _state([6, 4, 5, 6, 3], 1.0)
    state.pending = [[1], [2], [3], [4], [5]]
    layer = state.cache.layers[0]
    layer.keys, layer.values = _distinct(5, 6, 1.0), _distinct(5, 6, -1.0)  # rows that differ
    keys, values = layer.keys.clone(), layer.values.clone()
    state = state.select(range(5))  # buffers of five rows
    layer = state.cache.layers[0]
    buffer = layer._key_buffer
    before_mask, row_3 = state.attention_mask.clone(), layer.keys[3].clone()
    order = state.retain_rows([0, 2, 3])  # row 1 dropped: row 3 (past the three kept) moves into it
    assert order == [0, 3, 2] and len(state) == 3
    assert layer._key_buffer is buffer and buffer.shape[0] == 5  # in place; rows 3 and 4 now spare
    assert torch.equal(layer.keys, keys[order]) and torch.equal(layer.values, values[order])
    assert torch.equal(state.attention_mask, before_mask[order])
    assert state.next_position.tolist() == [6, 6, 5] and state.pending == [[1], [4], [3]]
    state.append_rows([1])  # a child of the moved row, written into a freed row
    assert layer._key_buffer is buffer and torch.equal(layer.keys[3], row_3)
    assert state.retain_rows([0, 1, 2, 3]) == [0, 1, 2, 3] and len(state) == 4  # all kept: nothing moves
    assert state.retain_rows([3]) == [3] and torch.equal(layer.keys[0], row_3)
    with pytest.raises(ValueError, match="distinct rows"):
        state.retain_rows([0, 0])
    with pytest.raises(ValueError, match="distinct rows"):
        state.retain_rows([1])
    plain = _state([4, 2, 3], 1.0)  # a DynamicLayer (no spare rows): its rows are selected
    plain.cache.layers = [DynamicLayer()]
    plain.cache.layers[0].update(_distinct(3, 4, 0.0), _distinct(3, 4, 0.5))
    assert plain.retain_rows([2, 1]) == [2, 1]
    assert torch.equal(plain.cache.layers[0].keys, _distinct(3, 4, 0.0)[[2, 1]])
    trained = _state([4, 2, 3], 1.0)  # keys that require grad: indexed copies, gradients flow
    source = _distinct(3, 4, 0.0).requires_grad_()
    trained.cache.layers[0] = GrowableLayer()
    trained.cache.layers[0].update(source * 1.0, _distinct(3, 4, 0.5))
    trained.retain_rows([0, 2])
    trained.cache.layers[0].keys.sum().backward()
    assert source.grad is not None and source.grad[:, 0, 0, 0].tolist() == [1.0, 0.0, 1.0]
