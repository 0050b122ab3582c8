"""ChatFormat: token-in/token-out contexts equal a full re-render for append-only templates."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlvr_gym_agents.policy import load_tokenizer
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.warmstart.tiny import build_bpe_tokenizer, build_word_tokenizer
from transformers import PreTrainedTokenizerFast

# Qwen2.5-Instruct's chat template without the tool branches (as published with Qwen/Qwen2.5-0.5B-Instruct).
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or (message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
WORDS = ["You are in the kitchen.", "go to fridge 1", "You arrive at the fridge 1.", "open fridge 1",
         "Nothing happens.", "system", "user", "assistant", "You are Qwen, created by Alibaba Cloud.",
         "You are a helpful assistant.", "Be brief.", "take apple 1 from fridge 1"]


def _qwen_like_tokenizer() -> PreTrainedTokenizerFast:
    tokenizer = build_word_tokenizer(WORDS)
    tokenizer.add_special_tokens({"eos_token": "<|im_end|>", "additional_special_tokens": ["<|im_start|>"]})
    tokenizer.chat_template = QWEN25_TEMPLATE
    return tokenizer


def _assemble(chat: ChatFormat, observations: list[str], actions: list[str]) -> list[int]:
    """What a rollout does: prompt ids, then generated ids (action + end of turn) and observation ids."""
    ids = chat.prompt_ids(observations[0])
    for i, action in enumerate(actions):
        ids += chat.encode(action) + [chat.end_of_turn_id]
        if i + 1 < len(observations):
            ids += chat.observation_ids(observations[i + 1])
    return ids


@pytest.mark.parametrize("system_prompt", [None, "Be brief."])
def test_tiny_template_tito_equals_full_rerender(tiny_model_dir: Path, system_prompt: str | None) -> None:
    chat = ChatFormat(load_tokenizer(str(tiny_model_dir)), system_prompt=system_prompt)
    observations = ["Say the word: apple", "Wrong.", "Invalid action 'x': actions look like 'say <word>'."]
    actions = ["say bread", "say x", "say apple"]
    assert _assemble(chat, observations, actions) == chat.render_ids(observations, actions)
    assert _assemble(chat, observations, actions[:2]) == chat.render_ids(observations, actions[:2])


@pytest.mark.parametrize("system_prompt", [None, "Be brief."])
def test_qwen25_template_tito_equals_full_rerender(system_prompt: str | None) -> None:
    chat = ChatFormat(_qwen_like_tokenizer(), system_prompt=system_prompt)
    assert chat.end_of_turn_token == "<|im_end|>"
    observations = ["You are in the kitchen.", "You arrive at the fridge 1.", "Nothing happens."]
    actions = ["go to fridge 1", "open fridge 1"]
    assembled = _assemble(chat, observations, actions)
    assert assembled == chat.render_ids(observations, actions)
    # the "\n" Qwen writes after <|im_end|> (never generated) starts every observation delta
    assert chat._delta_prefix == "\n<|im_start|>user\n"
    assert chat._delta_suffix == "<|im_end|>\n<|im_start|>assistant\n"


def test_turn_cut_by_max_new_tokens_gets_its_end_of_turn_inserted(tiny_model_dir: Path) -> None:
    chat = ChatFormat(load_tokenizer(str(tiny_model_dir)))
    assert chat.observation_ids("Wrong.", previous_turn_ended=False)[0] == chat.end_of_turn_id
    assert chat.observation_ids("Wrong.")[0] != chat.end_of_turn_id


def test_decode_action_drops_the_end_of_turn_token(tiny_model_dir: Path) -> None:
    chat = ChatFormat(load_tokenizer(str(tiny_model_dir)))
    assert chat.decode_action(chat.encode("say apple") + [chat.end_of_turn_id]) == "say apple"


def test_non_append_only_template_is_rejected(tiny_model_dir: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_model_dir))
    # renders only the last message: earlier text changes when a message is added
    tokenizer.chat_template = "<|user|> {{ messages[-1]['content'] }} <|end|>"
    with pytest.raises(ValueError, match="append-only"):
        ChatFormat(tokenizer)


def test_tokenizer_without_template_is_rejected(tiny_model_dir: Path) -> None:
    tokenizer = load_tokenizer(str(tiny_model_dir))
    tokenizer.chat_template = None
    with pytest.raises(ValueError, match="chat_template"):
        ChatFormat(tokenizer)


@pytest.mark.parametrize("system_prompt", [None, "Be brief."])
def test_byte_level_template_tito_equals_full_rerender(system_prompt: str | None) -> None:
    chat = ChatFormat(build_bpe_tokenizer(WORDS, vocab_size=320), system_prompt=system_prompt)
    observations = ["You are in the kitchen.", "  Traceback:\n    line 2\n", "Nothing happens. "]
    actions = ["go to fridge 1", "```python\ndef f(x):\n    return x\n```"]
    assert _assemble(chat, observations, actions) == chat.render_ids(observations, actions)
    assert _assemble(chat, observations, actions[:1]) == chat.render_ids(observations[:2], actions[:1])
    # no template text around an observation but the special tokens: nothing joins its first or last word
    assert (chat._delta_prefix, chat._delta_suffix) == ("<|user|>", "<|end|><|assistant|>")


@pytest.mark.parametrize("tokenizer_kind", ["qwen25-bpe", "bpe"])
def test_the_adapters_token_episode_equals_a_full_rerender(tokenizer_kind: str) -> None:
    """The TRL / verl adapters (rlvr_gym.adapters.tokens) and ChatFormat share one delta: a host's episode of
    generated ids (each turn ending with EOS) plus the adapters' observation ids is the template's own render, the
    "\\n" Qwen writes after <|im_end|> included."""
    from rlvr_gym.adapters.tokens import chat_template_delta, observation_ids, prompt_ids

    tokenizer = build_bpe_tokenizer(WORDS, vocab_size=320)  # byte-level: every "\n" is an id of its own
    if tokenizer_kind == "qwen25-bpe":
        tokenizer.add_special_tokens({"eos_token": "<|im_end|>", "additional_special_tokens": ["<|im_start|>"]})
        tokenizer.chat_template = QWEN25_TEMPLATE
    chat = ChatFormat(tokenizer)
    assert chat_template_delta(tokenizer) == (chat._delta_prefix, chat._delta_suffix)
    observations = ["You are in the kitchen.", "You arrive at the fridge 1.", "Nothing happens."]
    actions = ["go to fridge 1", "open fridge 1"]
    ids = prompt_ids(tokenizer, observations[0])
    for action, observation in zip(actions, observations[1:], strict=True):
        ids += tokenizer.encode(action, add_special_tokens=False) + [tokenizer.eos_token_id]
        ids += observation_ids(tokenizer, observation)
    assert ids == chat.render_ids(observations, actions)
