"""The update on tree rollouts: each leaf scored whole against each tree's shared prefixes scored once.

Usage::

    .venv/bin/python benchmarks/tree_prefix_scoring.py [--model runs/quickstart-seed0/checkpoint] [--batches 3]
        [--repeats 3] [--tasks 8] [--min-shared 1 8 32] [--threads 1] [--set KEY=VALUE ...]

For each of ``--batches`` rollout batches (``--tasks`` text-world tasks, one tree of ``train.group_size`` leaves per
task, sampled with ``agents/recipes/textworld-tree.yaml``'s tree settings, credit and update settings; ``--set``
overrides any recipe key), :func:`rlvr_gym_agents.update.ppo.ppo_update` runs from the same weights with
``algorithm.share_tree_prefixes`` off (per leaf: each leaf's row scored whole after its prompt, the prompts shared as
always) and on (each ``--min-shared`` value), ``--repeats`` times, the variants interleaved and their order reversed
every repeat, so a loaded machine slows all alike. Prints per variant the update's wall and CPU seconds
(min/median/max over all batches and repeats; with one thread the CPU seconds are the work, which a loaded machine
disturbs less), the ratios of medians to per-leaf, the ids the forward passes ran per batch (prefix nodes
plus continuations) against per-leaf scoring, and the largest weight difference to the per-leaf step (the update
must be the same up to float rounding). ``--set rollout.sampler=flat`` measures flat GRPO groups instead (rows share
the prompt and, where episodes took the same first actions, more). Numbers only; no verdicts.

The model defaults to the quickstart's checkpoint when it exists (a policy with some skill, whose trees branch
where entropies rise), else the tree recipe's randomly initialised tiny model is built in a temporary folder.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path

import torch
from rlvr_gym_agents.config import TrainConfig, load_config
from rlvr_gym_agents.console import Console
from rlvr_gym_agents.credit import assign_credit
from rlvr_gym_agents.policy import TransformersPolicy
from rlvr_gym_agents.rollout import Trajectory
from rlvr_gym_agents.train import build_policy, build_sampler, credit_config, update_config
from rlvr_gym_agents.update.ppo import ppo_update
from rlvr_gym_agents.update.scoring import prefix_tree

from rlvr_gym import load_suite

DEFAULT_MODEL = Path("runs/quickstart-seed0/checkpoint")
RECIPE = Path("agents/recipes/textworld-tree.yaml")


def forward_ids(trajectories: list[Trajectory], min_shared: int | None) -> int:
    """Ids the update's forward passes run for one mini-batch of ``trajectories``: every prefix node once, then
    each row's continuation after its deepest node (``min_shared`` None: prompts shared only)."""
    sequences = {r: t.token_ids for r, t in enumerate(trajectories)}
    prompts = {r: min(max(t.prompt_length, 1), len(t.token_ids)) for r, t in enumerate(trajectories)}
    nodes, paths = prefix_tree(sequences, prompts, min_shared)
    return sum(n.end - n.begin for n in nodes) + sum(len(sequences[r]) - nodes[p[-1]].end for r, p in paths.items())


def timed_update(config: TrainConfig, policy: TransformersPolicy, trajectories: list[Trajectory],
                 advantages: torch.Tensor, min_shared: int | None) -> tuple[float, float, dict[str, torch.Tensor]]:
    """Wall and CPU seconds of one ``ppo_update`` from the policy's weights, and the weights after it."""
    model = copy.deepcopy(policy.model)
    update = update_config(config)
    update.share_tree_prefixes = min_shared is not None
    update.min_shared_tokens = min_shared or 1
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.train.learning_rate)
    began, began_cpu = time.perf_counter(), time.process_time()
    ppo_update(model, optimizer, trajectories, advantages, update, None, policy.pad_token_id)
    return (time.perf_counter() - began, time.process_time() - began_cpu,
            {k: v.detach().clone() for k, v in model.state_dict().items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: the quickstart checkpoint)")
    parser.add_argument("--batches", type=int, default=3, help="rollout batches (seeds)")
    parser.add_argument("--repeats", type=int, default=3, help="updates per variant per batch")
    parser.add_argument("--tasks", type=int, default=None, help="tasks per batch (default: train.tasks_per_step)")
    parser.add_argument("--min-shared", type=int, nargs="+", default=[1, 8, 32], help="min_shared_tokens values")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="recipe overrides")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    path = args.model or (str(DEFAULT_MODEL) if (DEFAULT_MODEL / "config.json").is_file() else None)
    config = load_config(RECIPE, [*([f"model.path_or_id={path}"] if path else []), *args.set])
    suite = load_suite(config.env.train_suite or "textworld/starter-train").tasks
    num_tasks = args.tasks or config.train.tasks_per_step
    variants: dict[str, int | None] = {"per leaf": None, **{f"shared min={m}": m for m in args.min_shared}}
    seconds: dict[str, list[float]] = {name: [] for name in variants}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in variants}
    ids_run: dict[str, list[int]] = {name: [] for name in variants}
    weight_diff = dict.fromkeys(variants, 0.0)
    policy, chat = build_policy(config, Path(tempfile.mkdtemp(prefix="tree-prefix-")), None, [], Console(False))
    for batch_index in range(args.batches):
        policy.generator.manual_seed(batch_index)
        tasks = suite[batch_index * num_tasks: (batch_index + 1) * num_tasks]
        rollout = build_sampler(config, policy, chat).sample_batch(tasks, batch_index)
        advantages = assign_credit(rollout, credit_config(config))
        trajectories = rollout.trajectories
        print(f"batch {batch_index}: {len(trajectories)} leaves, {sum(len(t.token_ids) for t in trajectories)} ids, "
              f"{rollout.tokens_generated / len(trajectories):.1f} generated ids per leaf", flush=True)
        for name, min_shared in variants.items():
            ids_run[name].append(forward_ids(trajectories, min_shared))
        for repeat in range(args.repeats):
            names = list(variants) if repeat % 2 == 0 else list(reversed(variants))
            weights: dict[str, dict[str, torch.Tensor]] = {}
            for name in names:
                elapsed, cpu, weights[name] = timed_update(config, policy, trajectories, advantages, variants[name])
                seconds[name].append(elapsed)
                cpu_seconds[name].append(cpu)
            for name in variants:
                weight_diff[name] = max(weight_diff[name], max(
                    float((weights[name][k] - v).abs().max()) for k, v in weights["per leaf"].items()))
    print(f"\n{args.batches} batches x {args.repeats} repeats, {args.threads} thread(s); seconds per update "
          "(wall, and CPU: the process's own, less sensitive to a loaded machine)")
    print(f"{'variant':<16} {'wall min':>8} {'median':>7} {'max':>7} {'ratio':>6} {'CPU min':>8} {'median':>7} "
          f"{'max':>7} {'ratio':>6} {'ids run':>8} {'ratio':>6} {'max |dw|':>9}")
    for name in variants:
        run = statistics.mean(ids_run[name])
        cells = []
        for table in (seconds, cpu_seconds):
            s = table[name]
            cells.append(f"{min(s):>8.3f} {statistics.median(s):>7.3f} {max(s):>7.3f} "
                         f"{statistics.median(s) / statistics.median(table['per leaf']):>6.2f}")
        print(f"{name:<16} {' '.join(cells)} {run:>8.0f} {run / statistics.mean(ids_run['per leaf']):>6.2f} "
              f"{weight_diff[name]:>9.2e}")

if __name__ == "__main__":
    main()
