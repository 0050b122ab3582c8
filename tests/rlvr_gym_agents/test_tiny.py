"""The tiny-policy builder: tokenizer on env text, ~1M-parameter Qwen2, an ordinary model directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy, load_model_and_tokenizer, load_tokenizer
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.run_io import save_model_dir
from rlvr_gym_agents.warmstart.tiny import (
    BPE_CHAT_TEMPLATE,
    CHAT_TEMPLATE,
    DEFAULT_VOCAB_SIZE,
    TOKENIZER_KINDS,
    build_bpe_tokenizer,
    build_model,
    build_tokenizer,
    build_word_tokenizer,
    check_round_trip,
    save_tiny_policy,
)
from transformers import AutoModelForCausalLM, AutoTokenizer


def test_tokenizer_covers_env_text_and_round_trips() -> None:
    texts = ["You arrive at the fridge 1. The fridge 1 is closed.", "open fridge 1", "Nothing happens."]
    tokenizer = build_word_tokenizer(texts)
    check_round_trip(tokenizer, texts)
    assert tokenizer.eos_token == "<|end|>" and tokenizer.pad_token == "<pad>"
    assert tokenizer.chat_template == CHAT_TEMPLATE
    ids = tokenizer("open fridge 1", add_special_tokens=False)["input_ids"]
    assert len(ids) == 3 and tokenizer.unk_token_id not in ids


def test_round_trip_check_rejects_unknown_words() -> None:
    tokenizer = build_word_tokenizer(["open fridge 1"])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        check_round_trip(tokenizer, ["open the microwave"])


def test_model_size_matches_the_calibration() -> None:
    model = build_model(vocab_size=90)
    assert 1.0e6 < sum(p.numel() for p in model.parameters()) < 1.1e6
    assert model.config.hidden_size == 128 and model.config.num_hidden_layers == 4


def test_saved_directory_pins_the_tokenizer_class(tiny_model_dir: Path) -> None:
    config = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in tiny_model_dir.iterdir()}


KEL_TEXTS = ["Tools: lookup(entity=...), search(query=...)", "lookup(entity='Kelkel Lingath')",
             "Kelkel Lingath was founded in 1873 by Orla Venn.", "<answer>1873</answer>", "open fridge 1",
             "def f(x):\n    return x + 1\n", "assign y = 8'd1;"]


def test_bpe_tokenizer_round_trips_any_text_with_atomic_special_tokens() -> None:
    tokenizer = build_tokenizer(KEL_TEXTS, "bpe", vocab_size=300)
    check_round_trip(tokenizer, [*KEL_TEXTS, "never seen: Ωμέγα\t\t  🙂", "x .  ,"], exact_text=True)
    assert tokenizer.chat_template == BPE_CHAT_TEMPLATE
    assert tokenizer.pad_token_id == 0 and tokenizer.eos_token == "<|end|>"
    assert len(tokenizer) <= 300
    ids = tokenizer("<|user|>open<|end|><|assistant|>", add_special_tokens=False)["input_ids"]
    specials = tokenizer.convert_tokens_to_ids(["<|user|>", "<|end|>", "<|assistant|>"])
    assert [ids[0], *ids[-2:]] == specials and not set(ids[1:-2]) & set(specials)


def test_build_tokenizer_rejects_an_unknown_kind_and_a_vocabulary_without_the_bytes() -> None:
    with pytest.raises(ValueError, match="bpe, word"):
        build_tokenizer(KEL_TEXTS, "char")
    with pytest.raises(ValueError, match=">= 262"):
        build_bpe_tokenizer(KEL_TEXTS, vocab_size=100)


def test_round_trip_check_sees_text_that_a_word_level_tokenizer_changes() -> None:
    tokenizer = build_word_tokenizer(["def f(x):", "return x"])
    check_round_trip(tokenizer, ["def f(x):\n    return x"])  # its ids round-trip ...
    with pytest.raises(ValueError, match="decodes as"):  # ... its text does not (indentation lost)
        check_round_trip(tokenizer, ["def f(x):\n    return x"], exact_text=True)


@pytest.fixture(scope="module", params=["word", "bpe"])
def checkpoint_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trainer checkpoint: the tiny policy loaded by the project's loader and saved again by ``save_model_dir``."""
    torch.set_num_threads(1)
    built = save_tiny_policy(KEL_TEXTS, tmp_path_factory.mktemp(request.param) / "tiny", seed=0,
                             tokenizer=request.param, vocab_size=320, max_context_tokens=128)
    model, tokenizer = load_model_and_tokenizer(str(built))
    save_model_dir(built.parent / "checkpoint", model, tokenizer)
    return built.parent / "checkpoint"


def test_checkpoint_tokenizer_loads_with_plain_autotokenizer(checkpoint_dir: Path) -> None:
    ours, plain = load_tokenizer(str(checkpoint_dir)), AutoTokenizer.from_pretrained(str(checkpoint_dir))
    texts = [*KEL_TEXTS, "lookup(entity='Kelkel Lingath')  and 42"]
    for add_special_tokens in (False, True):
        assert (plain(texts, add_special_tokens=add_special_tokens)["input_ids"]
                == ours(texts, add_special_tokens=add_special_tokens)["input_ids"])
    messages = [{"role": "user", "content": KEL_TEXTS[0]}, {"role": "assistant", "content": KEL_TEXTS[1]}]
    assert (plain.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
            == ours.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    assert plain.decode(ours(KEL_TEXTS[1])["input_ids"]) == ours.decode(ours(KEL_TEXTS[1])["input_ids"])
    assert (len(plain), plain.eos_token_id, plain.pad_token_id) == (len(ours), ours.eos_token_id, ours.pad_token_id)


def test_checkpoint_generates_the_same_ids_with_plain_auto_classes(checkpoint_dir: Path) -> None:
    policy = TransformersPolicy.from_pretrained(str(checkpoint_dir), seed=0)
    chat = ChatFormat(policy.tokenizer)
    prompt = chat.prompt_ids(KEL_TEXTS[0])
    [ours], _ = policy.generate([prompt], SamplingParams(temperature=0.0, max_new_tokens=12))

    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint_dir))
    model = AutoModelForCausalLM.from_pretrained(str(checkpoint_dir))
    text = tokenizer.apply_chat_template([{"role": "user", "content": KEL_TEXTS[0]}], tokenize=False,
                                         add_generation_prompt=True)
    plain_prompt = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    assert plain_prompt[0].tolist() == prompt
    out = model.generate(plain_prompt, do_sample=False, max_new_tokens=12, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    assert out[0, len(prompt):].tolist() == ours.token_ids


def test_config_defaults_match_the_builder() -> None:
    from rlvr_gym_agents.config import ModelConfig

    assert ModelConfig().vocab_size == DEFAULT_VOCAB_SIZE and ModelConfig().tokenizer in TOKENIZER_KINDS
