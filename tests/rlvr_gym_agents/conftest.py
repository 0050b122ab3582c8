"""Fixtures of the learning-side tests: a tiny random-init policy built from testing/Echo-v0 text."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

ECHO_TEXT = [
    "Say the word: apple bread candle dish egg fork glass hat",
    "say apple", "say bread", "say candle", "say dish", "say egg", "say fork", "say glass", "say hat",
    "Correct.", "Wrong.", "Invalid action 'x': actions look like 'say <word>'.",
]


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A saved tiny model directory (word-level tokenizer on Echo text, random ~1M-parameter Qwen2)."""
    from rlvr_gym_agents.tiny import save_tiny_policy

    torch.set_num_threads(1)
    return save_tiny_policy(ECHO_TEXT, tmp_path_factory.mktemp("tiny") / "model", seed=0, max_context_tokens=256)


@pytest.fixture()
def tiny_policy(tiny_model_dir: Path):  # type: ignore[no-untyped-def]
    """A fresh TransformersPolicy over the tiny model (sampling seed 0)."""
    from rlvr_gym_agents.policy import TransformersPolicy

    return TransformersPolicy.from_pretrained(str(tiny_model_dir), seed=0)
