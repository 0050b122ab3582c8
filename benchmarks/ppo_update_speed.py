"""Policy-update throughput: length-sorted micro-batches (``algorithm.micro_batch_tokens``) against one padded pass.

Usage::

    .venv/bin/python benchmarks/ppo_update_speed.py [--model DIR] [--episodes 128] [--budgets 2048 4096 8192]
        [--repeats 3] [--threads 2]

Runs ``--episodes`` sampled text-world episodes (the quickstart's batch: 32 starter tasks x 4) with the policy
in ``--model`` (default: a random-init tiny policy, whose episodes run to the turn limit), then times
``update.ppo_update`` on that batch from the same weights, alternating the baseline (``micro_batch_tokens:
null``, one forward/backward of all continuations padded to the longest; since 2026-12-02 both run each
distinct prompt once, see ``shared_prompt_speed.py``) with each token budget. Prints real (unpadded)
training tokens per second, the ratio to the baseline, and the largest weight difference after the step
(the two must give the same update up to float rounding).
"""

from __future__ import annotations

import argparse
import copy
import tempfile
import time

import torch
from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout import Trajectory, run_episodes
from rlvr_gym_agents.train import update_config
from rlvr_gym_agents.update.ppo import ppo_update
from rlvr_gym_agents.warmstart.demonstrations import collect_demonstrations
from rlvr_gym_agents.warmstart.tiny import save_tiny_policy

from rlvr_gym import load_suite


def policy_for_benchmark(model_dir: str | None, seed: int) -> tuple[TransformersPolicy, ChatFormat]:
    """The policy in ``model_dir``, or a tiny one with an oracle-demonstration tokenizer and random weights."""
    if model_dir is None:
        model_dir = tempfile.mkdtemp(prefix="ppo_update_speed_")
        config = load_config(None, ["sft.expert=oracle"])
        tasks = list(load_suite("textworld/starter-train"))[:200]
        save_tiny_policy([text for d in collect_demonstrations(config.sft, config.env, tasks, 200, seed) for text in d.observations + d.actions], model_dir, seed=seed,
                         tokenizer="word")
    policy = TransformersPolicy.from_pretrained(model_dir, seed=seed)
    chat = ChatFormat(policy.tokenizer)
    policy.stop_token_ids = frozenset(policy.stop_token_ids | {chat.end_of_turn_id})
    return policy, chat


def _update(policy: TransformersPolicy, trajectories: list[Trajectory], advantages: torch.Tensor,
            budget: int | None) -> tuple[float, dict[str, torch.Tensor]]:
    model = copy.deepcopy(policy.model)
    config = load_config("agents/recipes/quickstart.yaml", [f"algorithm.micro_batch_tokens={budget or 'null'}"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.train.learning_rate)
    began = time.perf_counter()
    ppo_update(model, optimizer, trajectories, advantages, update_config(config), None, policy.pad_token_id)
    elapsed = time.perf_counter() - began
    return elapsed, {k: v.detach().clone() for k, v in model.state_dict().items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: a random tiny policy)")
    parser.add_argument("--episodes", type=int, default=128)
    parser.add_argument("--budgets", type=int, nargs="+", default=[2048, 4096, 8192])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy, chat = policy_for_benchmark(args.model, args.seed)
    tasks = [task for task in load_suite("textworld/starter-train")][: args.episodes // 4] * 4
    trajectories = run_episodes(policy, chat, tasks, SamplingParams(1.0, 1.0, 10))
    advantages = torch.randn(len(trajectories), generator=torch.Generator().manual_seed(args.seed))
    lengths = [len(t.token_ids) for t in trajectories]
    tokens = sum(lengths)
    times: dict[int | None, list[float]] = {budget: [] for budget in [None, *args.budgets]}
    weights: dict[int | None, dict[str, torch.Tensor]] = {}
    for _ in range(args.repeats):
        for budget, budget_times in times.items():
            elapsed, weights[budget] = _update(policy, trajectories, advantages, budget)
            budget_times.append(elapsed)
    print(f"{len(trajectories)} trajectories of {min(lengths)}-{max(lengths)} tokens ({tokens} in all, "
          f"{len(trajectories) * max(lengths)} padded), torch {torch.__version__}, {args.threads} threads")
    baseline = min(times[None])
    print(f"{'micro_batch_tokens':<20}{'tokens/s (best)':>16}{'speed-up':>10}{'max |dw| vs one pass':>24}")
    for budget, values in times.items():
        diff = max(float((weights[budget][k] - v).abs().max()) for k, v in weights[None].items())
        label = "null (one pass)" if budget is None else str(budget)
        print(f"{label:<20}{tokens / min(values):>16.0f}{baseline / min(values):>9.2f}x{diff:>24.2e}")


if __name__ == "__main__":
    main()
