"""Issue 24's tokenizer numbers: gold-action round trips per suite, RTL designs that still pass after a round trip,
and tokens per episode, for the word-level and the byte-level BPE tiny tokenizers.

    python benchmarks/tokenizer_roundtrip.py suites            # round trips of every shipped suite's gold
    python benchmarks/tokenizer_roundtrip.py rtl               # gold RTL designs judged after a round trip
    python benchmarks/tokenizer_roundtrip.py episodes RECIPE [N_CORPUS] [N_EPISODES]
                                                               # tokens per demonstrated episode

``suites`` trains both tokenizers per family on the text of the family's training tasks (their data and gold;
the dev and test gold is outside it). ``episodes`` trains them as ``build_tiny_policy`` does (the recipe's corpus
episodes, held-out tasks and ``model.corpus``) and measures the recipe's held-out demonstrations.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Iterator
from typing import Any

from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.warmstart.demonstrations import collect_demonstrations, demonstration_ids
from rlvr_gym_agents.warmstart.tiny import build_tokenizer, extra_corpus

import rlvr_gym
from rlvr_gym.tasks import Task, list_suites, load_suite


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)


def family_corpus(family: str) -> list[str]:
    tasks = [t for name in list_suites(family) for t in load_suite(name) if t.split == "train"]
    return [s for t in tasks for s in [*_strings(t.data), *_strings(t.options), *(t.gold or [])]]


def round_trips(tokenizer: Any, actions: list[str]) -> list[str]:
    """The decoded text of each action (special tokens dropped, as ``ChatFormat.decode_action``)."""
    ids = tokenizer(actions, add_special_tokens=False)["input_ids"]
    return list(tokenizer.batch_decode(ids, skip_special_tokens=True))


def suites() -> None:
    print("| suite | gold actions | word-level exact | BPE exact (family corpus) | BPE exact (Echo corpus) |")
    print("|---|---:|---:|---:|---:|")
    foreign = build_tokenizer(["Say the word: apple", "say apple", "Correct.", "Wrong."], "bpe")
    cache: dict[str, tuple[Any, Any]] = {}
    for name in list_suites():
        family = name.split("/", 1)[0]
        if family not in cache:
            corpus = family_corpus(family) or ["say apple"]
            cache[family] = (build_tokenizer(corpus, "word"), build_tokenizer(corpus, "bpe"))
        actions = [a for t in load_suite(name) for a in t.gold or []]
        counts = [sum(a == d for a, d in zip(actions, round_trips(tok, actions))) for tok in (*cache[family], foreign)]
        print(f"| {name} | {len(actions)} | {counts[0]} | {counts[1]} | {counts[2]} |")


def _passes(task: Task, action: str) -> bool:
    env = rlvr_gym.make(task.env_id)
    try:
        env.reset(options={"task": task})
        _, reward, terminated, _, _ = env.step(action)
        return bool(terminated and reward >= 1.0)
    finally:
        env.close()


def rtl() -> None:
    corpus = family_corpus("rtl")
    tokenizers = {"word": build_tokenizer(corpus, "word"), "bpe": build_tokenizer(corpus, "bpe")}
    for name in ("rtl/generated-dev", "rtl/generated-test"):
        tasks = list(load_suite(name))
        golds = [t.gold[0] for t in tasks if t.gold]
        line = [f"{name}: gold passes {sum(_passes(t, g) for t, g in zip(tasks, golds))}/{len(tasks)}"]
        for kind, tokenizer in tokenizers.items():
            decoded = round_trips(tokenizer, golds)
            exact = sum(g == d for g, d in zip(golds, decoded))
            passing = sum(_passes(t, d) for t, d in zip(tasks, decoded))
            line.append(f"{kind}: exact {exact}/{len(tasks)}, pass after round trip {passing}/{len(tasks)}")
        print("; ".join(line), flush=True)


def episodes(recipe: str, num_corpus: int | None, num_episodes: int) -> None:
    config = load_config(recipe, ["sft.mistake_rate=0.0"] if "textworld" not in recipe else [])
    test_tasks = list(load_suite(config.env.test_suite))[:num_episodes] if config.env.test_suite else []
    train_tasks = list(load_suite(config.env.train_suite)) if config.env.train_suite else None
    corpus_episodes = num_corpus or config.model.corpus_episodes
    demos = collect_demonstrations(config.sft, config.env, train_tasks, corpus_episodes, config.seed)
    held_out = collect_demonstrations(config.sft, config.env, test_tasks, len(test_tasks), config.seed + 1)
    texts = [t for d in demos + held_out for t in d.observations + d.actions]
    texts += extra_corpus(config.model, config.env.env_id, config.seed)
    print(f"{recipe}: corpus {corpus_episodes} episodes + {len(test_tasks)} held-out, {len(texts)} texts; "
          f"rollout.max_new_tokens={config.rollout.max_new_tokens}, model.max_context_tokens="
          f"{config.model.max_context_tokens}")
    for kind in ("word", "bpe"):
        tokenizer = build_tokenizer(texts, kind, vocab_size=config.model.vocab_size)
        chat = ChatFormat(tokenizer, system_prompt=config.env.system_prompt)
        lengths = [len(demonstration_ids(d, chat)[0]) for d in held_out]
        actions = [len(chat.encode(a)) + 1 for d in held_out for a in d.actions]
        unk = sum(tokenizer.unk_token_id in chat.encode(a) for d in held_out for a in d.actions)
        print(f"  {kind}: vocab {len(tokenizer)}; tokens per episode min/median/mean/max "
              f"{min(lengths)}/{statistics.median(lengths):.0f}/{statistics.mean(lengths):.1f}/{max(lengths)}; "
              f"action tokens incl. end of turn median/max {statistics.median(actions):.0f}/{max(actions)}; "
              f"actions with <unk> {unk}/{len(actions)}", flush=True)


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else "suites"
    if command == "suites":
        suites()
    elif command == "rtl":
        rtl()
    elif command == "episodes":
        episodes(sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else None,
                 int(sys.argv[4]) if len(sys.argv) > 4 else 200)
    else:
        raise SystemExit(f"unknown command {command!r}: suites, rtl or episodes")
