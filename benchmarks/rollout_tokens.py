"""Rollout throughput: context tokens per second with and without KV-cache reuse across turns, side by side.

Usage::

    .venv/bin/python benchmarks/rollout_tokens.py [--model DIR] [--episodes 64] [--repeats 2] [--threads 1]

Without ``--model`` a random-init tiny policy is built from text-world text (its episodes run to the turn
limit, the longest case). Both modes run the same tasks from the same sampling seed; the script checks the
trajectories are identical and prints tokens/s of each mode and their ratio (the calibration run measured
3.3x).
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch
from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout import run_episodes
from rlvr_gym_agents.warmstart.demonstrations import collect_demonstrations
from rlvr_gym_agents.warmstart.tiny import save_tiny_policy

from rlvr_gym import load_suite


def _policy(model_dir: str | None, seed: int) -> tuple[TransformersPolicy, ChatFormat]:
    if model_dir is None:
        model_dir = tempfile.mkdtemp(prefix="rollout_tokens_")
        config = load_config(None, ["sft.expert=oracle"])
        tasks = list(load_suite("textworld/easy-train"))[:200]
        save_tiny_policy([text for d in collect_demonstrations(config.sft, config.env, tasks, 200, seed) for text in d.observations + d.actions], model_dir, seed=seed, tokenizer="word",
                         max_context_tokens=1024)
    policy = TransformersPolicy.from_pretrained(model_dir, seed=seed, max_context_tokens=1024)
    chat = ChatFormat(policy.tokenizer)
    policy.stop_token_ids = frozenset(policy.stop_token_ids | {chat.end_of_turn_id})
    return policy, chat


def _run(policy: TransformersPolicy, chat: ChatFormat, reuse: bool, episodes: int, seed: int) -> tuple[float, int, list]:
    tasks = list(load_suite("textworld/easy-test"))[:episodes]
    policy.generator.manual_seed(seed)
    began = time.perf_counter()
    trajectories = run_episodes(policy, chat, tasks, SamplingParams(1.0, 1.0, 10), reuse_kv_cache=reuse)
    elapsed = time.perf_counter() - began
    return elapsed, sum(len(t.token_ids) for t in trajectories), [t.token_ids for t in trajectories]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: a random tiny policy)")
    parser.add_argument("--episodes", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy, chat = _policy(args.model, args.seed)
    results: dict[bool, list[float]] = {True: [], False: []}
    same = True
    for _ in range(args.repeats):
        cached = _run(policy, chat, True, args.episodes, args.seed)
        fresh = _run(policy, chat, False, args.episodes, args.seed)
        same &= cached[2] == fresh[2]
        results[True].append(cached[1] / cached[0])
        results[False].append(fresh[1] / fresh[0])
    best = {mode: max(values) for mode, values in results.items()}
    print(f"episodes {args.episodes} x {args.repeats} repeats, torch threads {args.threads}, "
          f"context tokens per run {cached[1]}")
    print(f"{'mode':<28}{'tokens/s (best)':>18}{'all runs':>30}")
    print(f"{'KV cache reused (ours)':<28}{best[True]:>18.0f}{[round(v) for v in results[True]]!s:>30}")
    print(f"{'recompute every turn':<28}{best[False]:>18.0f}{[round(v) for v in results[False]]!s:>30}")
    print(f"speed-up: {best[True] / best[False]:.2f}x; identical trajectories: {same}")


if __name__ == "__main__":
    main()
