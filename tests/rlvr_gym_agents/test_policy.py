"""TransformersPolicy: batched generation, KV-cache reuse, branching, loading, sampling."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from rlvr_gym_agents.policy import (
    Policy,
    SamplingParams,
    TransformersPolicy,
    load_model_and_tokenizer,
    load_tokenizer,
    sample_tokens,
)


def test_policy_satisfies_protocol(tiny_policy: TransformersPolicy) -> None:
    assert isinstance(tiny_policy, Policy)


def test_generation_lengths_logps_and_entropies(tiny_policy: TransformersPolicy) -> None:
    contexts = [[3, 9, 10, 7], [3, 9], [3, 9, 10, 7, 8, 13]]
    generations, state = tiny_policy.generate(contexts, SamplingParams(max_new_tokens=5))
    vocab = len(tiny_policy.tokenizer)
    for context, generation in zip(contexts, generations):
        n = len(generation.token_ids)
        assert 1 <= n <= 5 and len(generation.logps) == n == len(generation.entropies)
        assert all(lp <= 0 for lp in generation.logps)
        assert all(0 <= h <= math.log(vocab) + 1e-4 for h in generation.entropies)
        assert (generation.finish_reason == "stop") == (generation.token_ids[-1] in tiny_policy.stop_token_ids)
    assert state.context_lengths() == [len(c) + len(g.token_ids) for c, g in zip(contexts, generations)]


def test_logps_match_a_full_forward_pass(tiny_policy: TransformersPolicy) -> None:
    context = [3, 9, 10, 7, 8]
    (generation,), _ = tiny_policy.generate([context], SamplingParams(temperature=0.7, max_new_tokens=6))
    ids = torch.tensor([context + generation.token_ids])
    with torch.no_grad():
        logits = tiny_policy.model(input_ids=ids).logits[0, len(context) - 1:-1] / 0.7
    expected = torch.log_softmax(logits, -1).gather(1, ids[0, len(context):, None]).squeeze(1)
    assert torch.allclose(torch.tensor(generation.logps), expected, atol=1e-4)


def test_kv_cache_reuse_gives_the_same_tokens_as_recomputing(tiny_policy: TransformersPolicy) -> None:
    """Two turns with appended observations of different lengths: cached and full contexts agree."""
    sampling = SamplingParams(temperature=0.0, max_new_tokens=4)
    first = [[3, 9, 10], [3, 9, 10, 7, 8, 13, 6]]
    appended = [[3, 11, 12, 5, 4], [3, 14, 4]]
    gens1, state = tiny_policy.generate(first, sampling)
    gens2, state = tiny_policy.generate(appended, sampling, state)
    full = [f + g.token_ids + a for f, g, a in zip(first, gens1, appended)]
    recomputed, _ = tiny_policy.generate(full, sampling)
    for cached, fresh in zip(gens2, recomputed):
        assert cached.token_ids == fresh.token_ids
        assert cached.logps == pytest.approx(fresh.logps, abs=1e-4)


def test_compact_drops_the_holes_and_keeps_what_every_row_attends_to(tiny_policy: TransformersPolicy) -> None:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=4)
    first = [[3, 9, 10], [3, 9, 10, 7, 8, 13, 6, 11, 12, 14]]  # 7 holes of left padding in row 0
    appended = [[3, 11, 12, 5, 4, 9, 9], [3, 14]]               # 5 more in row 1
    _, state = tiny_policy.generate(first, sampling)
    _, state = tiny_policy.generate(appended, sampling, state)
    plain = state.select([0, 1])
    real = state.attention_mask.sum(dim=1).tolist()
    assert state.attention_mask.shape[1] > max(real)
    assert state.compact(min_saving=0.0) is state
    # each row's real slots, in order, at the right end; the left-over slots are holes
    assert state.attention_mask.shape[1] == max(real)
    assert state.attention_mask.tolist() == [[0] * (max(real) - n) + [1] * n for n in real]
    assert state.cache.layers[0].keys.shape[2] == max(real)
    follow = [[3, 13, 7], [3, 8]]
    compacted, _ = tiny_policy.generate(follow, SamplingParams(temperature=0.0, max_new_tokens=6), state)
    holes, _ = tiny_policy.generate(follow, SamplingParams(temperature=0.0, max_new_tokens=6), plain)
    for a, b in zip(compacted, holes):
        assert a.token_ids == b.token_ids and a.logps == pytest.approx(b.logps, abs=1e-5)
    # below the saving threshold nothing moves
    width = state.attention_mask.shape[1]
    assert state.compact(min_saving=0.99).attention_mask.shape[1] == width


def test_select_branches_rows_from_a_shared_prefix(tiny_policy: TransformersPolicy) -> None:
    sampling = SamplingParams(temperature=0.0, max_new_tokens=3)
    _, state = tiny_policy.generate([[3, 9, 10], [3, 9, 10, 7, 8]], sampling)
    branched = state.select([1, 1, 0])
    assert branched.context_lengths() == [state.context_lengths()[i] for i in (1, 1, 0)]
    gens, _ = tiny_policy.generate([[3, 11], [3, 11], [3, 11]], sampling, branched)
    assert gens[0].token_ids == gens[1].token_ids
    # the original state is untouched and can still be extended
    again, _ = tiny_policy.generate([[3, 11], [3, 11]], sampling, state)
    assert again[0].token_ids == gens[2].token_ids and again[1].token_ids == gens[0].token_ids


def test_state_row_mismatch_and_empty_rows_are_errors(tiny_policy: TransformersPolicy) -> None:
    _, state = tiny_policy.generate([[3, 9]], SamplingParams(max_new_tokens=2))
    with pytest.raises(ValueError, match="rows"):
        tiny_policy.generate([[3], [3]], SamplingParams(), state)
    with pytest.raises(ValueError, match="at least one token"):
        tiny_policy.generate([[]], SamplingParams())


def test_sample_tokens_greedy_and_top_p() -> None:
    logits = torch.tensor([[0.0, 2.0, 1.0], [3.0, 0.0, 0.0]])
    ids, logps, entropies = sample_tokens(logits, 0.0, 1.0, torch.Generator().manual_seed(0))
    assert ids == [1, 0]
    p = torch.softmax(logits, -1)
    assert logps == pytest.approx(torch.log(p[[0, 1], [1, 0]]).tolist(), abs=1e-6)
    assert entropies == pytest.approx((-(p * p.log()).sum(-1)).tolist(), abs=1e-6)
    # top_p = 0.5: only the argmax survives the nucleus, so sampling is deterministic
    for seed in range(20):
        ids, _, _ = sample_tokens(logits, 1.0, 0.5, torch.Generator().manual_seed(seed))
        assert ids == [1, 0]


def test_sampling_params_validate() -> None:
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)


def test_local_directory_loads_through_the_hub_code_path(tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    assert model.config.model_type == "qwen2"
    text = "Say the word: apple <|end|>"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"] == ids


def test_missing_model_or_tokenizer_gives_a_clear_error(tmp_path: Path, tiny_model_dir: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "nope")):
        TransformersPolicy.from_pretrained(str(tmp_path / "nope"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_model_and_tokenizer(str(empty))
    with pytest.raises(FileNotFoundError, match="no tokenizer"):
        load_tokenizer(str(empty))
    only_model = tmp_path / "only_model"
    only_model.mkdir()
    (only_model / "config.json").write_text((tiny_model_dir / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="no tokenizer"):
        load_model_and_tokenizer(str(only_model))


def test_unreachable_hub_model_gives_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    def offline(*args: object, **kwargs: object) -> None:
        raise OSError("We couldn't connect to the hub")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", offline)
    with pytest.raises(OSError, match=r"could not load hub model 'someone/Missing-0.5B'.*HF_HOME"):
        load_model_and_tokenizer("someone/Missing-0.5B")


def test_fork_copies_rows_at_the_turns_start_and_the_copies_sample_their_own_turn(
        tiny_policy: TransformersPolicy) -> None:
    sampling = SamplingParams(temperature=1.0, max_new_tokens=5)
    contexts = [[3, 9, 10, 7], [3, 11, 12]]
    seen: list[list[float]] = []

    def fork(entropies: list[float]) -> list[int]:
        seen.append(entropies)
        return [1, 1, 0]

    gens, state = tiny_policy.generate(contexts, sampling, fork=fork)
    assert len(seen) == 1 and len(seen[0]) == 2 and len(gens) == len(state) == 5
    # each row's entropy is that of its first-token distribution, the one its first id is drawn from
    assert seen[0] == pytest.approx([gens[0].entropies[0], gens[1].entropies[0]])
    parents = [0, 1, 1, 1, 0]
    for gen, parent in zip(gens, parents):  # every copy's ids score as a continuation of its parent's context
        ids = torch.tensor([contexts[parent] + gen.token_ids])
        with torch.no_grad():
            logprobs = torch.log_softmax(tiny_policy.model(input_ids=ids).logits[0].float(), dim=-1)
        start = len(contexts[parent])
        expected = [float(logprobs[start + i - 1, t]) for i, t in enumerate(gen.token_ids)]
        assert gen.logps == pytest.approx(expected, abs=1e-4)
    assert state.context_lengths() == [len(contexts[p]) + len(g.token_ids) for p, g in zip(parents, gens)]
    assert len({tuple(g.token_ids) for g in gens[1:4]}) > 1  # the copies of row 1 drew their own turns
