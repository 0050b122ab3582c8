"""The tiny-policy builder: a word-level tokenizer trained on environment text and a ~1M-parameter Qwen2.

The result is an ordinary model directory (``config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json`` naming ``PreTrainedTokenizerFast`` explicitly, and a chat template), loaded by
:func:`rlvr_gym_agents.policy.load_model_and_tokenizer` exactly like a hub model.

Sizes follow the calibration run in the pitfalls file: hidden 128, 4 layers, ~1.06M parameters, which a
2-core CPU trains at several thousand tokens per second.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from rlvr_gym import Task
from rlvr_gym_agents.warmstart.demonstrations import collect_demonstrations, import_callable

if TYPE_CHECKING:
    from rlvr_gym_agents.config import EnvConfig, ModelConfig, SFTConfig

PAD, UNK, SYSTEM, USER, ASSISTANT, END = "<pad>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = [PAD, UNK, SYSTEM, USER, ASSISTANT, END]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(texts: Iterable[str], min_frequency: int = 1) -> PreTrainedTokenizerFast:
    """Trains a word-level tokenizer (words and punctuation runs are tokens) on ``texts``.

    Args:
        texts: every observation and action text the agent can see (a word missing here becomes ``<unk>``).
        min_frequency: words seen fewer times are left out.

    Returns:
        A ``PreTrainedTokenizerFast`` with pad/unk/eos set, ``<|end|>`` as EOS (end of turn) and the chat
        template :data:`CHAT_TEMPLATE`.
    """
    tokenizer = Tokenizer(models.WordLevel(unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=SPECIAL_TOKENS, min_frequency=min_frequency)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, unk_token=UNK, eos_token=END,
                                   additional_special_tokens=[SYSTEM, USER, ASSISTANT])
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(vocab_size: int, hidden_size: int = 128, num_layers: int = 4, num_heads: int = 4,
                intermediate_size: int = 512, max_context_tokens: int = 2048, seed: int = 0,
                pad_token_id: int = 0, eos_token_id: int | None = None) -> Qwen2ForCausalLM:
    """A randomly initialised Qwen2 causal LM with tied embeddings (~1.06M parameters at the defaults).

    Args:
        vocab_size: tokenizer size.
        hidden_size / num_layers / num_heads / intermediate_size: transformer sizes.
        max_context_tokens: ``max_position_embeddings`` (the longest context).
        seed: seeds the initialisation.
    """
    config = Qwen2Config(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=intermediate_size,
        num_hidden_layers=num_layers, num_attention_heads=num_heads, num_key_value_heads=num_heads,
        max_position_embeddings=max_context_tokens, tie_word_embeddings=True, pad_token_id=pad_token_id,
        eos_token_id=eos_token_id, bos_token_id=None,
    )
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def save_tiny_policy(texts: Iterable[str], out_dir: str | Path, seed: int = 0, **model_sizes: int) -> Path:
    """Builds the tokenizer and the model and saves both as one model directory.

    Args:
        texts: environment text for the tokenizer (see :func:`build_tokenizer`).
        out_dir: the model directory to write (created).
        seed: seeds the model initialisation.
        **model_sizes: passed to :func:`build_model`.

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: when ids of the corpus do not round-trip through decode and encode.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = list(texts)
    tokenizer = build_tokenizer(texts)
    check_round_trip(tokenizer, texts[:200])
    model = build_model(len(tokenizer), seed=seed, pad_token_id=tokenizer.pad_token_id,
                        eos_token_id=tokenizer.eos_token_id, **model_sizes)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _pin_tokenizer_class(out / "tokenizer_config.json")
    return out


def _pin_tokenizer_class(config_file: Path) -> None:
    """Names ``PreTrainedTokenizerFast`` explicitly: transformers 5 otherwise may load Qwen2's tokenizer class
    for a ``qwen2`` model folder (pitfalls file)."""
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def check_round_trip(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str]) -> None:
    """Raises ValueError when ``encode(decode(ids)) != ids`` or a text has ``<unk>`` ids."""
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if tokenizer.unk_token_id in ids:
            raise ValueError(f"text {text!r} has words outside the vocabulary")
        again = tokenizer(tokenizer.decode(ids), add_special_tokens=False)["input_ids"]
        if again != ids:
            raise ValueError(f"ids of {text!r} do not round-trip: {ids} -> {again}")


def build_tiny_policy(model: ModelConfig, sft: SFTConfig, env: EnvConfig, seed: int, train_tasks: list[Task] | None,
                      test_tasks: list[Task], out_dir: str | Path) -> Path:
    """Builds the tiny tokenizer and model into ``out_dir`` from the env's text.

    The tokenizer is trained on the text of expert episodes (with admissible mistakes) on training tasks and on
    the held-out tasks, plus ``model.corpus``'s texts (the env's failure messages, which admissible actions never
    produce): the vocabulary must cover every word the agent can see; only the text is used, no held-out episode
    is trained on.
    """
    demos = collect_demonstrations(sft, env, train_tasks, model.corpus_episodes, seed)
    demos += collect_demonstrations(sft, env, test_tasks, len(test_tasks), seed + 1)
    texts = [text for demo in demos for text in demo.observations + demo.actions]
    return save_tiny_policy(texts + extra_corpus(model, env.env_id, seed), out_dir, seed=seed,
                            hidden_size=model.hidden_size, num_layers=model.num_layers, num_heads=model.num_heads,
                            intermediate_size=model.intermediate_size, max_context_tokens=model.max_context_tokens)


def extra_corpus(model: ModelConfig, env_id: str, seed: int) -> list[str]:
    """``model.corpus``'s texts for the tiny tokenizer (none when unset).

    Raises:
        ValueError: when ``model.corpus`` is not ``package.module:function``.
    """
    if model.corpus is None:
        return []
    return list(import_callable(model.corpus, "model.corpus")(env_id, model.corpus_episodes, seed))


