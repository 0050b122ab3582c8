"""Every gold action of every shipped suite survives the tiny policy's byte-level BPE tokenizer byte for byte.

One tokenizer per family is trained once on the text of the family's training tasks (their data and gold
actions), the stand-in for a recipe's corpus; the gold of dev and test tasks is outside it. A second tokenizer,
trained on the Echo toy's few words only, shows that text far outside the corpus still round-trips (the byte
alphabet, no ``<unk>``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import pytest
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.warmstart.tiny import build_bpe_tokenizer
from transformers import PreTrainedTokenizerFast

from rlvr_gym.tasks import Task, list_suites, load_suite

SUITES = list_suites()
FAMILIES = ("code", "rtl", "textworld", "tools", "web")
ECHO_TEXT = ["Say the word: apple bread candle", "say apple", "Correct.", "Wrong."]


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def _family_corpus(family: str) -> list[str]:
    """The text of the family's training tasks: every string of their data and options, and their gold actions."""
    tasks: list[Task] = [t for name in SUITES if name.startswith(family + "/") for t in load_suite(name)
                         if t.split == "train"]
    return [text for task in tasks for text in [*_strings(task.data), *_strings(task.options), *(task.gold or [])]]


@functools.cache
def _family_tokenizer(family: str) -> PreTrainedTokenizerFast:
    return build_bpe_tokenizer(_family_corpus(family) or ECHO_TEXT, vocab_size=2048)


@functools.cache
def _foreign_tokenizer() -> PreTrainedTokenizerFast:
    return build_bpe_tokenizer(ECHO_TEXT, vocab_size=2048)


def _broken_actions(tokenizer: PreTrainedTokenizerFast, actions: list[str]) -> list[tuple[str, str]]:
    """(action, decoded) for each action whose ids do not decode to its exact bytes; the ids are what a policy
    generates, and the decoded text (special tokens dropped) is what reaches the env."""
    ids = tokenizer(actions, add_special_tokens=False)["input_ids"]
    assert all(tokenizer.unk_token_id not in row for row in ids)
    decoded = tokenizer.batch_decode(ids, skip_special_tokens=True)
    return [(a, d) for a, d in zip(actions, decoded) if a.encode() != d.encode()]


def test_every_family_ships_suites_with_gold() -> None:
    for family in FAMILIES:
        suites = [name for name in SUITES if name.startswith(family + "/")]
        assert suites, f"no shipped suite of {family}"
        assert all(task.gold for name in suites for task in load_suite(name)), family


@pytest.mark.parametrize("suite", SUITES)
def test_gold_actions_round_trip_byte_for_byte(suite: str) -> None:
    family = suite.split("/", 1)[0]
    actions = [action for task in load_suite(suite) for action in task.gold or []]
    assert actions, f"{suite} has no gold action"
    assert _broken_actions(_family_tokenizer(family), actions) == []
    assert _broken_actions(_foreign_tokenizer(), actions) == []  # text outside the corpus: byte by byte


def test_text_outside_the_corpus_round_trips() -> None:
    tokenizer = _foreign_tokenizer()
    texts = ["def f(x):\n    return x  \t\n\n", "assign y = 8'd1 | 4'b1010;", "<answer>42</answer>",
             "Ünïcödé ✓ 漢字 🙂", "  leading and trailing  ", "a .", "\r\n\r\n"]
    assert _broken_actions(tokenizer, texts) == []


def test_family_corpus_shortens_its_own_actions() -> None:
    """The merges learnt on a family's text pay off: its held-out gold designs take less than half the tokens
    they take with a tokenizer that never saw Verilog (2.6 bytes per token against 1.2 when measured)."""
    actions = [a for task in load_suite("rtl/generated-dev") for a in task.gold or []]

    def num_tokens(tokenizer: PreTrainedTokenizerFast) -> int:
        return sum(len(row) for row in tokenizer(actions, add_special_tokens=False)["input_ids"])

    assert num_tokens(_family_tokenizer("rtl")) < num_tokens(_foreign_tokenizer()) / 2


def test_special_tokens_stay_atomic_and_the_chat_format_decodes_actions() -> None:
    tokenizer = _family_tokenizer("tools")
    chat = ChatFormat(tokenizer)
    ids = chat.encode("<|user|>lookup(entity='Kelkel Lingath')<|end|>")
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|user|>") and ids[-1] == chat.end_of_turn_id
    action = '<answer>Kelkel Lingath</answer>'
    assert chat.decode_action(chat.encode(action) + [chat.end_of_turn_id]) == action
