"""The tiny-policy builder: tokenizer on env text, ~1M-parameter Qwen2, an ordinary model directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rlvr_gym_agents.warmstart.tiny import CHAT_TEMPLATE, build_model, build_tokenizer, check_round_trip


def test_tokenizer_covers_env_text_and_round_trips() -> None:
    texts = ["You arrive at the fridge 1. The fridge 1 is closed.", "open fridge 1", "Nothing happens."]
    tokenizer = build_tokenizer(texts)
    check_round_trip(tokenizer, texts)
    assert tokenizer.eos_token == "<|end|>" and tokenizer.pad_token == "<pad>"
    assert tokenizer.chat_template == CHAT_TEMPLATE
    ids = tokenizer("open fridge 1", add_special_tokens=False)["input_ids"]
    assert len(ids) == 3 and tokenizer.unk_token_id not in ids


def test_round_trip_check_rejects_unknown_words() -> None:
    tokenizer = build_tokenizer(["open fridge 1"])
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
