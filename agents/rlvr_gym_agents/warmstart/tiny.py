"""The tiny-policy builder: a tokenizer trained on environment text and a ~1M-parameter Qwen2.

Two tokenizers (``model.tokenizer``):

- ``bpe`` (the default): byte-level BPE from the ``tokenizers`` library, trained on the recipe's own text. Its
  alphabet is the 256 bytes, so any string encodes (no ``<unk>``) and decodes back to the same bytes: Python
  indentation, Verilog literals (``8'd1``), ``<answer>`` tags and non-ASCII text survive. Its pipeline is exactly
  the one transformers' ``Qwen2Tokenizer`` rebuilds from a ``tokenizer.json`` (NFC normaliser, Qwen2's split
  regex, byte-level mapping, BPE without ``<unk>``): transformers 5 loads a ``qwen2`` model folder's tokenizer
  with that class whatever ``tokenizer_config.json`` names, so plain ``AutoTokenizer.from_pretrained`` gives the
  same ids as :func:`rlvr_gym_agents.policy.load_tokenizer`. The one exception to an exact round trip is text
  that is not in Unicode NFC, which comes back composed (as with Qwen2.5's own tokenizer).
- ``word``: one token per word or punctuation run (whitespace dropped), trained on env text; a word missing
  from the corpus becomes ``<unk>``. Short sequences for the text world, where every word is known; it cannot
  carry code (indentation is lost, ``8'd1`` comes back as ``8 ' d1``).

The result is an ordinary model directory (``config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json`` naming ``PreTrainedTokenizerFast`` explicitly, and a chat template), loaded by
:func:`rlvr_gym_agents.policy.load_model_and_tokenizer` exactly like a hub model
(:func:`rlvr_gym_agents.run_io.save_model_dir` writes it).

Sizes follow the calibration run in the pitfalls file: hidden 128, 4 layers, ~1.06M parameters, which a
2-core CPU trains at several thousand tokens per second.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX as QWEN2_PRETOKENIZE_REGEX

from rlvr_gym import Task
from rlvr_gym_agents.run_io import save_model_dir
from rlvr_gym_agents.warmstart.demonstrations import Demonstration, collect_demonstrations, import_callable

if TYPE_CHECKING:
    from rlvr_gym_agents.config import EnvConfig, ModelConfig, SFTConfig

PAD, UNK, SYSTEM, USER, ASSISTANT, END = "<pad>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"
SPECIAL_TOKENS = [PAD, UNK, SYSTEM, USER, ASSISTANT, END]
TOKENIZER_KINDS = ("bpe", "word")
DEFAULT_VOCAB_SIZE = 2048
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|> {{ message['content'] }} <|end|> {% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
"""The word-level tokenizer's template (its pre-tokenizer drops the spaces)."""
BPE_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
"""The byte-level tokenizer's template: no spaces around a message, because byte-level BPE keeps them (a space
before the content would join its first word, ``" open"``, and the ids a policy generates for ``"open"`` would
differ from the ids of a full re-render; without it, token-in/token-out equals the re-render)."""


def build_tokenizer(texts: Iterable[str], kind: str = "bpe", vocab_size: int = DEFAULT_VOCAB_SIZE,
                    min_frequency: int = 1) -> PreTrainedTokenizerFast:
    """Trains the tokenizer ``kind`` (``bpe`` or ``word``, see the module docstring) on ``texts``.

    Raises:
        ValueError: on an unknown ``kind`` (or a ``vocab_size`` :func:`build_bpe_tokenizer` rejects).
    """
    if kind == "bpe":
        return build_bpe_tokenizer(texts, vocab_size)
    if kind == "word":
        return build_word_tokenizer(texts, min_frequency)
    raise ValueError(f"tokenizer kind must be one of {', '.join(TOKENIZER_KINDS)}, got {kind!r}")


def build_word_tokenizer(texts: Iterable[str], min_frequency: int = 1) -> PreTrainedTokenizerFast:
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
    return _wrap(tokenizer, CHAT_TEMPLATE)


def build_bpe_tokenizer(texts: Iterable[str], vocab_size: int = DEFAULT_VOCAB_SIZE) -> PreTrainedTokenizerFast:
    """Trains a byte-level BPE tokenizer on ``texts`` (Sennrich et al. 2016, BPE; Radford et al. 2019, the
    byte-level alphabet), with the pipeline of transformers' ``Qwen2Tokenizer``.

    Args:
        texts: the recipe's text (demonstrations and every message the env can show). Text outside it still
            encodes, byte by byte.
        vocab_size: the most tokens: the special tokens, the 256 byte symbols, then one token per merge learnt
            (fewer when the corpus runs out of pairs). Must be >= 262.

    Returns:
        A ``PreTrainedTokenizerFast`` with pad/unk/eos set (``<unk>`` is never produced), ``<|end|>`` as EOS and
        the chat template :data:`BPE_CHAT_TEMPLATE`; special tokens are atomic.

    Raises:
        ValueError: when ``vocab_size`` cannot hold the special tokens and the byte alphabet.
    """
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if vocab_size < len(SPECIAL_TOKENS) + len(alphabet):
        raise ValueError(f"vocab_size must be >= {len(SPECIAL_TOKENS) + len(alphabet)} (special tokens + 256 "
                         f"bytes), got {vocab_size}")
    tokenizer = Tokenizer(models.BPE())  # no unk_token, no byte_fallback: the byte alphabet covers every input
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=alphabet,
                                  show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return _wrap(tokenizer, BPE_CHAT_TEMPLATE)


def _wrap(tokenizer: Tokenizer, chat_template: str) -> PreTrainedTokenizerFast:
    # clean_up_tokenization_spaces would turn " ." into "." on decode and break the byte round trip
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token=PAD, unk_token=UNK, eos_token=END,
                                   additional_special_tokens=[SYSTEM, USER, ASSISTANT],
                                   clean_up_tokenization_spaces=False)
    fast.chat_template = chat_template
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


def save_tiny_policy(texts: Iterable[str], out_dir: str | Path, seed: int = 0, tokenizer: str = "bpe",
                     vocab_size: int = DEFAULT_VOCAB_SIZE, **model_sizes: int) -> Path:
    """Builds the tokenizer and the model and saves both as one model directory.

    Args:
        texts: environment text for the tokenizer (see :func:`build_tokenizer`).
        out_dir: the model directory to write (created).
        seed: seeds the model initialisation.
        tokenizer: ``bpe`` (byte-level BPE) or ``word`` (see the module docstring).
        vocab_size: the BPE tokenizer's most tokens (ignored by ``word``).
        **model_sizes: passed to :func:`build_model`.

    Returns:
        ``out_dir`` as a Path.

    Raises:
        ValueError: on an unknown ``tokenizer``, or when the corpus does not round-trip (ids through decode and
            encode; with ``bpe`` also the text through encode and decode).
    """
    out = Path(out_dir)
    texts = list(texts)
    built = build_tokenizer(texts, tokenizer, vocab_size=vocab_size)
    check_round_trip(built, texts[:200], exact_text=tokenizer == "bpe")
    model = build_model(len(built), seed=seed, pad_token_id=built.pad_token_id, eos_token_id=built.eos_token_id,
                        **model_sizes)
    save_model_dir(out, model, built)
    return out


def check_round_trip(tokenizer: PreTrainedTokenizerFast, texts: Iterable[str], exact_text: bool = False) -> None:
    """Raises ValueError when a text has ``<unk>`` ids, when ``encode(decode(ids)) != ids``, or (``exact_text``,
    for byte-level tokenizers) when ``decode(encode(text))`` is not the text (in Unicode NFC)."""
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        if tokenizer.unk_token_id in ids:
            raise ValueError(f"text {text!r} has words outside the vocabulary")
        decoded = tokenizer.decode(ids)
        if exact_text and decoded != unicodedata.normalize("NFC", text):
            raise ValueError(f"text {text!r} decodes as {decoded!r}")
        again = tokenizer(decoded, add_special_tokens=False)["input_ids"]
        if again != ids:
            raise ValueError(f"ids of {text!r} do not round-trip: {ids} -> {again}")


def build_tiny_policy(model: ModelConfig, sft: SFTConfig, env: EnvConfig, seed: int, train_tasks: list[Task] | None,
                      test_tasks: list[Task], out_dir: str | Path, demos: list[Demonstration] | None = None) -> Path:
    """Builds the tiny tokenizer (``model.tokenizer``, ``model.vocab_size``) and model into ``out_dir`` from the
    env's text.

    The tokenizer is trained on the text of expert episodes (with admissible mistakes) on training tasks and on
    the held-out tasks, plus ``model.corpus``'s texts (the env's failure messages, which admissible actions never
    produce): the vocabulary must cover every word the agent can see; only the text is used, no held-out episode
    is trained on. ``demos`` (``model.corpus_from_demos``: the warm start's own demonstrations) replaces both sets
    of episodes.
    """
    if demos is None:
        demos = collect_demonstrations(sft, env, train_tasks, model.corpus_episodes, seed)
        demos += collect_demonstrations(sft, env, test_tasks, len(test_tasks), seed + 1)
    texts = [text for demo in demos for text in demo.observations + demo.actions]
    return save_tiny_policy(texts + extra_corpus(model, env.env_id, seed), out_dir, seed=seed,
                            tokenizer=model.tokenizer, vocab_size=model.vocab_size, hidden_size=model.hidden_size,
                            num_layers=model.num_layers, num_heads=model.num_heads,
                            intermediate_size=model.intermediate_size, max_context_tokens=model.max_context_tokens)


def extra_corpus(model: ModelConfig, env_id: str, seed: int) -> list[str]:
    """``model.corpus``'s texts for the tiny tokenizer (none when unset).

    Raises:
        ValueError: when ``model.corpus`` is not ``package.module:function``.
    """
    if model.corpus is None:
        return []
    return list(import_callable(model.corpus, "model.corpus")(env_id, model.corpus_episodes, seed))


