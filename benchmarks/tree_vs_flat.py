"""Tree rollouts vs flat sampling at an equal number of leaves: generated tokens and wall time per leaf.

Usage::

    .venv/bin/python benchmarks/tree_vs_flat.py [--model runs/quickstart-seed0/checkpoint] [--tasks 8]
        [--leaves 8] [--seeds 3] [--global-samples 1 2 4] [--alphas 0.5 0.2] [--suite textworld/starter-train]
        [--max-new-tokens 10] [--no-pre-monitoring] [--tree-set fallback=surprisal branch.alpha=0 ...]
        [--recipe-also branch.at_boundary=false branch.pace=false,branch.alpha=0.2 ...]

For each seed, the same tasks (``--suite``, default the quickstart's training suite) are rolled out
``--leaves`` times per task twice, in alternating order so a loaded machine slows both alike: flat
(:func:`rlvr_gym_agents.rollout.run_episodes`, KV cache reused across turns, the baseline) and as trees
(:class:`rlvr_gym_agents.rollout.tree_sampler.TreeSampler`, entropy-balanced branching with ``m`` global samples per
task, one line per ``--global-samples`` value, and AEPO pre-monitoring; and the tree settings of
``agents/recipes/textworld-tree.yaml``, unless ``--no-recipe-tree``, and that recipe's tree with other settings,
one variant per ``--recipe-also`` argument). Prints, per configuration: generated
tokens per leaf, wall seconds per leaf, CPU seconds per leaf (the process's own: with ``--threads 1`` the work,
which a loaded machine disturbs less than the wall time), success rate per leaf, distinct successful action sequences per task,
turns per leaf, the share of tasks whose leaves do not all succeed or all fail ("mixed": the groups a
success-reward update learns from) and that share per 1,000 generated tokens, and the tree/flat ratios
(target: <= 0.6x tokens per leaf); for trees also the success rate of the leaves that continue a global sample
and of the branched ones, and the mean depth (turns) of the branch points; then, per batch, the model's forward
passes, their mean rows, the row-slots fed per leaf (context ids and left padding: the work) and the CPU milliseconds
of a decode pass. ``--tree-set`` sets any :class:`TreeSamplerConfig` field for every tree variant
(``branch.<field>`` for :class:`BranchConfig`). Numbers only; no verdicts.

The model defaults to the quickstart's checkpoint when it exists (a policy with some skill: entropies that
differ between turns), else the quickstart's randomly initialised tiny model is built in a temporary folder.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import yaml
from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.console import Console
from rlvr_gym_agents.credit.estimators import nonzero_variance_groups
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout import Trajectory, run_episodes
from rlvr_gym_agents.rollout.branching import BranchConfig
from rlvr_gym_agents.rollout.tree_sampler import TreeSampler, TreeSamplerConfig
from rlvr_gym_agents.train import build_policy

from rlvr_gym import load_suite

DEFAULT_MODEL = Path("runs/quickstart-seed0/checkpoint")
RECIPE = Path("agents/recipes/quickstart.yaml")
TREE_RECIPE = Path("agents/recipes/textworld-tree.yaml")


def load_policy(model: str | None, seed: int) -> tuple[TransformersPolicy, ChatFormat]:
    """The quickstart checkpoint (or ``model``), or a fresh tiny quickstart model when there is none."""
    config = load_config(RECIPE, [f"seed={seed}"])
    path = model or (str(DEFAULT_MODEL) if (DEFAULT_MODEL / "config.json").is_file() else None)
    if path is not None:
        config.model.path_or_id = path
        return build_policy(config, Path(tempfile.mkdtemp()), None, [], Console(False))
    return build_policy(config, Path(tempfile.mkdtemp(prefix="tree-bench-")), None, [], Console(False))


def flat_stats(trajectories: list[Trajectory], seconds: float, cpu_seconds: float = float("nan")) -> dict[str, float]:
    leaves = len(trajectories)
    wins: dict[str, set[tuple[str, ...]]] = {}
    for t in trajectories:
        if t.success:
            wins.setdefault(t.task_id, set()).add(tuple(turn.action for turn in t.turns))
    return {
        "tokens_per_leaf": sum(t.num_generated_tokens for t in trajectories) / leaves,
        "seconds_per_leaf": seconds / leaves,
        "cpu_seconds_per_leaf": cpu_seconds / leaves,
        "success": sum(t.success for t in trajectories) / leaves,
        "distinct_successful": sum(len(v) for v in wins.values()) / len({t.task_id for t in trajectories}),
        "turns_per_leaf": sum(len(t.turns) for t in trajectories) / leaves,
        "mixed_tasks": mixed_share(trajectories),
    }


def mixed_share(trajectories: list[Trajectory]) -> float:
    """Share of tasks whose episodes do not all succeed or all fail: the groups that carry a gradient (the
    trainer's filter, :func:`~rlvr_gym_agents.credit.estimators.nonzero_variance_groups`, on success)."""
    if not trajectories:
        return 0.0
    task_index = {task: i for i, task in enumerate(dict.fromkeys(t.task_id for t in trajectories))}
    groups = torch.tensor([task_index[t.task_id] for t in trajectories])
    keep = nonzero_variance_groups(torch.tensor([float(t.success) for t in trajectories]), groups)
    return len(set(groups[keep].tolist())) / len(task_index)


def tree_overrides(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` settings of :class:`TreeSamplerConfig` (``branch.KEY`` for :class:`BranchConfig`)."""
    settings: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--tree-set takes KEY=VALUE, got {pair!r}")
        settings[key] = yaml.safe_load(value)
    return settings


def tree_config(leaves: int, settings: dict[str, Any], **fields: Any) -> TreeSamplerConfig:
    branch = {k.removeprefix("branch."): v for k, v in settings.items() if k.startswith("branch.")}
    fields["branch"] = BranchConfig(**{**dataclasses.asdict(fields.get("branch", BranchConfig())), **branch})
    top = {k: v for k, v in settings.items() if not k.startswith("branch.")}
    return TreeSamplerConfig(num_leaves=leaves, **{**fields, **top})


def recipe_tree_config(leaves: int, settings: dict[str, Any], recipe: Path = TREE_RECIPE) -> TreeSamplerConfig:
    """The ``rollout.tree`` section of a tree recipe (default ``textworld-tree.yaml``) with ``leaves`` leaves and the
    ``--tree-set`` settings applied."""
    tree = load_config(recipe).rollout.tree
    fields = {f.name: getattr(tree, f.name) for f in dataclasses.fields(tree) if f.name != "num_leaves"}
    return tree_config(leaves, settings, **fields)


@contextlib.contextmanager
def model_calls(model: torch.nn.Module) -> Iterator[list[tuple[int, int, float]]]:
    """Records each forward pass of ``model`` while open: (rows, ids fed per row including left padding, process
    CPU seconds of the pass)."""
    calls: list[tuple[int, int, float]] = []
    began: list[float] = []

    def before(module: torch.nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        began.append(time.process_time())

    def after(module: torch.nn.Module, args: Any, kwargs: dict[str, Any], output: Any) -> None:
        rows, width = kwargs["input_ids"].shape
        calls.append((int(rows), int(width), time.process_time() - began.pop()))

    handles = [model.register_forward_pre_hook(before, with_kwargs=True),
               model.register_forward_hook(after, with_kwargs=True)]
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def call_stats(calls: list[tuple[int, int, float]], leaves: int) -> dict[str, float]:
    """Per batch: forward passes, their mean rows, the row-slots they fed per leaf (ids and left padding), and the
    CPU milliseconds of a one-id-per-row (decode) pass."""
    decode = [c for c in calls if c[1] == 1]
    return {
        "forward_calls": len(calls),
        "rows_per_call": statistics.mean(c[0] for c in calls) if calls else 0.0,
        "fed_slots_per_leaf": sum(c[0] * c[1] for c in calls) / leaves,
        "decode_ms_per_call": 1000 * statistics.mean(c[2] for c in decode) if decode else float("nan"),
    }


def run_flat(
    policy: TransformersPolicy, chat: ChatFormat, tasks: list[Any], leaves: int, sampling: SamplingParams
) -> dict[str, float]:
    with model_calls(policy.model) as calls:
        began, began_cpu = time.perf_counter(), time.process_time()
        trajectories = run_episodes(policy, chat, [t for t in tasks for _ in range(leaves)], sampling)
        seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - began_cpu
    return {**flat_stats(trajectories, seconds, cpu_seconds), **call_stats(calls, len(trajectories))}


def run_tree(
    policy: TransformersPolicy, chat: ChatFormat, tasks: list[Any], config: TreeSamplerConfig, sampling: SamplingParams
) -> dict[str, float]:
    with model_calls(policy.model) as calls:
        began, began_cpu = time.perf_counter(), time.process_time()
        rollout = TreeSampler(policy, chat, config).sample(tasks, sampling)
        seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - began_cpu
    trajectories = [t for tree in rollout.trees for t in tree.trajectories()]
    stats = {**flat_stats(trajectories, seconds, cpu_seconds), **call_stats(calls, len(trajectories))}
    stats["tokens_per_leaf"] = rollout.metrics["tokens_per_leaf"]  # shared prefixes counted once
    stats["branches_per_task"] = rollout.metrics["branches"] / len(tasks)
    stats["branch_depth"] = rollout.metrics["branch_depth_mean"]
    for kind in ("global", "branched"):  # NaN when no leaf of that kind
        stats[f"success_{kind}"] = rollout.metrics["leaf_success"].get(kind, float("nan"))
    return stats


def build_variants(args: argparse.Namespace) -> dict[str, TreeSamplerConfig | None]:
    """The variants to compare, by name: ``flat`` (None), the recipe's tree, one per ``--recipe-also`` argument (the
    recipe's tree with those settings on top of ``--tree-set``), one per (alpha, m) and per alpha with
    pre-monitoring."""
    variants: dict[str, TreeSamplerConfig | None] = {"flat": None}
    settings = tree_overrides(args.tree_set)
    if args.recipe_tree:
        variants["tree (recipe)"] = recipe_tree_config(args.leaves, settings)
    for extra in args.recipe_also:
        variants[f"recipe {extra}"] = recipe_tree_config(args.leaves, {**settings, **tree_overrides(extra.split(","))})
    for alpha in args.alphas:
        branch = BranchConfig(alpha=alpha)
        for m in args.global_samples:
            variants[f"tree a={alpha} m={m}"] = tree_config(args.leaves, settings, global_samples=m, branch=branch)
        if args.pre_monitoring:
            variants[f"tree a={alpha} pre-mon"] = tree_config(args.leaves, settings, pre_monitoring=True,
                                                              branch=branch)
    return variants


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=None, help="model directory (default: the quickstart checkpoint)")
    parser.add_argument("--tasks", type=int, default=8, help="tasks per seed")
    parser.add_argument("--leaves", type=int, default=8, help="leaves (episodes) per task")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--global-samples", type=int, nargs="+", default=[1, 2, 4], help="m values to try")
    parser.add_argument("--alphas", type=float, nargs="*", default=[0.5, 0.2],
                        help="base branch probabilities (none: only flat and the recipe's tree variants)")
    parser.add_argument("--suite", default=None, help="task suite (default: the quickstart's env.train_suite)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the quickstart's (10)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--pre-monitoring", action=argparse.BooleanOptionalAction, default=True,
                        help="also try AEPO pre-monitoring per alpha")
    parser.add_argument("--recipe-tree", action=argparse.BooleanOptionalAction, default=True,
                        help=f"also run the tree settings of {TREE_RECIPE} (the shipped tree recipe)")
    parser.add_argument("--tree-set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="tree settings for every tree variant, e.g. fallback=surprisal branch.entropy_weight=0")
    parser.add_argument("--recipe-also", nargs="*", default=[], metavar="KEY=VALUE[,KEY=VALUE]",
                        help="more variants of the recipe's tree, one per argument, with these settings on top, run "
                             "in the same alternation (e.g. branch.at_boundary=false)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    recipe = load_config(RECIPE)
    suite = load_suite(args.suite or recipe.env.train_suite or "textworld/starter-train").tasks
    sampling = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens or recipe.rollout.max_new_tokens)
    variants = build_variants(args)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    for seed in range(args.seeds):
        policy, chat = load_policy(args.model, seed)
        tasks = suite[seed * args.tasks : (seed + 1) * args.tasks]
        names = list(variants) if seed % 2 == 0 else list(reversed(variants))  # alternate the order
        for name in names:
            policy.generator.manual_seed(seed)
            config = variants[name]
            if config is None:
                stats = run_flat(policy, chat, tasks, args.leaves, sampling)
            else:
                config.seed = seed
                stats = run_tree(policy, chat, tasks, config, sampling)
            results[name].append(stats)
            print(f"seed {seed} {name:<24} " + " ".join(f"{k}={v:.3f}" for k, v in stats.items()), flush=True)
    report(results, args.leaves)


def report(results: dict[str, list[dict[str, float]]], leaves: int) -> None:
    means = {name: {k: statistics.mean(s[k] for s in runs) for k in runs[0]} for name, runs in results.items()}
    base = means["flat"]
    width = max(24, *(len(name) for name in results))
    print("\nmeans over seeds (ratio = tree / flat)")
    header = (
        f"{'variant':<{width}} {'tokens/leaf':>12} {'ratio':>6} {'s/leaf':>8} {'ratio':>6} {'cpu s/leaf':>10} {'ratio':>6} "
        f"{'success':>8} "
        f"{'distinct wins/task':>18} {'turns/leaf':>10} {'mixed tasks':>11} {'per 1k tok':>10} "
        f"{'success global/branched':>24} {'branch depth':>12}"
    )
    print(header)
    for name, mean in means.items():
        print(
            f"{name:<{width}} {mean['tokens_per_leaf']:>12.1f} {mean['tokens_per_leaf'] / base['tokens_per_leaf']:>6.2f} "
            f"{mean['seconds_per_leaf']:>8.3f} {mean['seconds_per_leaf'] / base['seconds_per_leaf']:>6.2f} "
            f"{mean['cpu_seconds_per_leaf']:>10.3f} "
            f"{mean['cpu_seconds_per_leaf'] / base['cpu_seconds_per_leaf']:>6.2f} "
            f"{mean['success']:>8.3f} {mean['distinct_successful']:>18.2f} {mean['turns_per_leaf']:>10.2f} "
            f"{mean['mixed_tasks']:>11.3f} {1000 * mean['mixed_tasks'] / (leaves * mean['tokens_per_leaf']):>10.3f} "
            + (f"{mean['success_global']:>13.3f} / {mean['success_branched']:<8.3f} {mean['branch_depth']:>12.2f}"
               if "branch_depth" in mean else "")
        )
    print("\nmodel forward passes per batch (what the time follows: a pass costs a fixed overhead plus its rows' work)")
    print(f"{'variant':<{width}} {'passes':>7} {'ratio':>6} {'rows/pass':>9} {'fed slots/leaf':>14} {'ratio':>6} "
          f"{'ms/decode pass':>14}")
    for name, mean in means.items():
        print(f"{name:<{width}} {mean['forward_calls']:>7.1f} {mean['forward_calls'] / base['forward_calls']:>6.2f} "
              f"{mean['rows_per_call']:>9.1f} {mean['fed_slots_per_leaf']:>14.1f} "
              f"{mean['fed_slots_per_leaf'] / base['fed_slots_per_leaf']:>6.2f} {mean['decode_ms_per_call']:>14.2f}")


if __name__ == "__main__":
    main()
