"""Shared prompts and in-place KV appends: a GRPO group's prompt runs through the model once, in rollouts and
in the update.

Usage::

    .venv/bin/python benchmarks/shared_prompt_speed.py [--model DIR] [--tasks 8] [--group 8] [--repeats 4]
        [--threads 2]

Builds the quickstart's batch: ``--tasks`` starter tasks x ``--group`` episodes each (every episode of a task
starts with the same prompt ids), sampled at T=1 from the policy in ``--model`` (default: a tiny policy with
an oracle-demonstration tokenizer and random weights). Then, alternating ours and the baseline:

- rollouts: ours (``GrowableCache``: appends in place; identical first contexts prefilled once) against
  transformers' ``DynamicCache`` (``torch.cat`` per decoding step) with every row prefilled; same sampling
  seed, so both must produce the same token ids;
- update: ``PrefixTreeScorer`` (distinct prompts once, continuations in length-sorted micro-batches of
  4,096 padded tokens) against ``batching.token_logprobs`` on whole rows in length-sorted micro-batches of
  4,096 padded tokens (the update before 2026-12-02); forward and backward of the same weighted log-prob sum,
  whose gradients must agree up to float rounding.

Prints seconds (median), ``ours / baseline`` and the checks.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

import torch
import transformers
from ppo_update_speed import policy_for_benchmark  # this folder: the scripts run from it
from rlvr_gym_agents.batching import length_micro_batches, pad_right, token_logprobs
from rlvr_gym_agents.policy import KVState, SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout import Trajectory, run_episodes
from rlvr_gym_agents.update.scoring import PrefixTreeScorer

from rlvr_gym import Task, load_suite

MICRO_BATCH_TOKENS = 4096


@contextlib.contextmanager
def _baseline_sampler() -> Iterator[None]:
    """transformers' DynamicCache and one prefill row per episode, as the sampler was before 2026-12-02."""
    empty, first_feed = KVState.empty, TransformersPolicy._first_feed

    def dynamic_empty(cls: type[KVState], batch_size: int, device: torch.device) -> KVState:
        return cls(transformers.DynamicCache(), torch.zeros(batch_size, 0, dtype=torch.long, device=device),
                   torch.zeros(batch_size, dtype=torch.long, device=device), [[] for _ in range(batch_size)])

    def every_row(self: TransformersPolicy, feeds: list[list[int]], state: KVState) -> tuple[torch.Tensor, KVState]:
        return self._feed(feeds, state), state

    KVState.empty = classmethod(dynamic_empty)  # type: ignore[method-assign, assignment]
    TransformersPolicy._first_feed = every_row  # type: ignore[method-assign]
    try:
        yield
    finally:
        KVState.empty = empty  # type: ignore[method-assign]
        TransformersPolicy._first_feed = first_feed  # type: ignore[method-assign]


def _rollout(policy: TransformersPolicy, chat: ChatFormat, tasks: list[Task], seed: int) -> tuple[float, list[Trajectory]]:
    policy.generator.manual_seed(seed)
    began = time.perf_counter()
    trajectories = run_episodes(policy, chat, tasks, SamplingParams(1.0, 1.0, 10))
    return time.perf_counter() - began, trajectories


def _whole_rows(model: torch.nn.Module, ids: torch.Tensor, lengths: list[int], weights: torch.Tensor) -> None:
    attention = pad_right([[1] * n for n in lengths], 0, torch.long)
    for micro in length_micro_batches(lengths, torch.arange(len(lengths)), MICRO_BATCH_TOKENS):
        width = max(lengths[r] for r in micro.tolist())
        logp, _ = token_logprobs(model, ids[micro, :width], attention[micro, :width])
        (logp * weights[micro, :width]).sum().backward()


def _shared(model: torch.nn.Module, ids: torch.Tensor, lengths: list[int], prompt_lengths: list[int],
            weights: torch.Tensor, pad_token_id: int) -> None:
    rows = torch.arange(len(lengths))
    scorer = PrefixTreeScorer(model, ids, lengths, prompt_lengths, rows, 1.0, pad_token_id,
                              max_tokens=MICRO_BATCH_TOKENS)
    for micro in scorer.micro_batches(rows, MICRO_BATCH_TOKENS):
        logp, _ = scorer.logprobs(model, micro)
        (logp * weights[micro, : logp.shape[1]]).sum().backward()
    scorer.backward()


def _timed_grads(model: torch.nn.Module, run: Callable[[], None]) -> tuple[float, list[torch.Tensor]]:
    model.zero_grad(set_to_none=True)
    began = time.perf_counter()
    run()
    elapsed = time.perf_counter() - began
    return elapsed, [p.grad.detach().clone() for p in model.parameters() if p.grad is not None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: a random tiny policy)")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    policy, chat = policy_for_benchmark(args.model, args.seed)
    tasks = [task for task in list(load_suite("textworld/starter-train"))[: args.tasks] for _ in range(args.group)]

    rollout_times: dict[str, list[float]] = {"ours": [], "baseline": []}
    ids_of: dict[str, list[list[int]]] = {}
    for _ in range(args.repeats):
        for name, times in rollout_times.items():
            with _baseline_sampler() if name == "baseline" else contextlib.nullcontext():
                elapsed, trajectories = _rollout(policy, chat, tasks, args.seed)
            times.append(elapsed)
            ids_of[name] = [t.token_ids for t in trajectories]

    lengths = [len(t.token_ids) for t in trajectories]
    prompt_lengths = [t.prompt_length for t in trajectories]
    ids = pad_right([t.token_ids for t in trajectories], policy.pad_token_id, torch.long)
    trained = pad_right([t.loss_mask for t in trajectories], 0, torch.float32)
    weights = trained * torch.randn(ids.shape, generator=torch.Generator().manual_seed(args.seed))
    model = policy.model.train()
    update_times: dict[str, list[float]] = {"ours": [], "baseline": []}
    grads: dict[str, list[torch.Tensor]] = {}
    for _ in range(args.repeats):
        for name, times in update_times.items():
            run = ((lambda: _shared(model, ids, lengths, prompt_lengths, weights, policy.pad_token_id))
                   if name == "ours" else (lambda: _whole_rows(model, ids, lengths, weights)))
            elapsed, grads[name] = _timed_grads(model, run)
            times.append(elapsed)

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {args.threads} threads; "
          f"{len(lengths)} episodes ({args.tasks} tasks x {args.group}), {sum(lengths)} ids, prompts "
          f"{statistics.mean(prompt_lengths):.0f} ids on average")
    for what, both in (("rollout", rollout_times), ("update (forward + backward)", update_times)):
        ours, base = statistics.median(both["ours"]), statistics.median(both["baseline"])
        print(f"{what:28s} ours {ours:6.2f} s   baseline {base:6.2f} s   ours / baseline {ours / base:.2f}")
    same = ids_of["ours"] == ids_of["baseline"]
    worst = max(float((a - b).abs().max()) for a, b in zip(grads["ours"], grads["baseline"]))
    scale = max(float(b.abs().max()) for b in grads["baseline"])
    print(f"same rollout ids: {same}; largest gradient difference {worst:.2e} (largest gradient {scale:.2e})")


if __name__ == "__main__":
    main()
