"""Held-out success against generated tokens: flat GRPO, flat GiGPO and tree rollouts with turn-level credit, each
trained from one warm start until it has generated the same number of tokens; and rollout entropy per loss.

Usage::

    .venv/bin/python benchmarks/tree_vs_flat_learning.py [--family textworld|tools|code|rtl] [--seeds 0,1,2]
        [--token-budget 150000] [--eval-every-tokens 25000] [--tree-credits gigpo,treerl,soft]
        [--flat-credits soft,gigpo] [--eval-tasks N] [--eval-seed 1234] [--tasks-per-step N] [--group-size N]
        [--max-steps 2000] [--threads 2] [--set key=value ...] [--tree-set key=value ...] [--out DIR]
    .venv/bin/python benchmarks/tree_vs_flat_learning.py --entropy-losses ppo_clip,aepo,clip_cov,kl_cov [same flags]

**Arms.** ``--family`` picks the recipe read at run time (never copied): ``textworld`` the quickstart
(``agents/recipes/quickstart.yaml``) with, for tree arms, the ``rollout.tree`` section of ``textworld-tree.yaml``;
``rtl`` ``rtl-tiny.yaml`` (the family's CPU recipe) with the ``rollout.tree`` section of ``rtl-tree.yaml``;
``tools`` / ``code`` ``tools-tree.yaml`` / ``code-tiny.yaml`` with their own tree section. Each flat credit of ``--flat-credits`` is an arm ``rollout.sampler=flat algorithm.credit=C`` (``soft`` is
flat GRPO, named ``flat-grpo``: the reference, always required; ``gigpo``: ``flat-gigpo``), each credit of
``--tree-credits`` an arm ``rollout.sampler=tree algorithm.credit=C`` (``tree-C``) with ``--tree-set`` on top.
Every arm has the recipe's tasks per step and ``group_size`` episodes (= leaves per tree) per task, the recipe's
invalid-action penalty turned off (plain GRPO on the env's reward; ``--set algorithm.invalid_action_penalty=0.1``
gives it back to every arm) and ``--set`` on top.

**Equal tokens.** For each seed the flat recipe's SFT runs once (``train.num_steps=0``) into ``OUT/warm-seed<s>``
and every arm loads its ``sft_model``. Each arm is one in-process :func:`rlvr_gym_agents.train.train` with
``train.max_generated_tokens=--token-budget`` (RL stops after the first step at which the steps'
``tokens_generated`` summed reach the budget: ids the policy generated, a tree's shared prefixes counted once) and
``eval.every_generated_tokens=--eval-every-tokens`` (held-out evaluation after the first step at or past each
multiple), so an arm's last evaluation is the first at or over the budget. Every evaluation of every arm runs the
first ``--eval-tasks`` held-out tasks with the same sampling seed (``eval.seed=--eval-seed``): sampled pass@1 over
``eval.k`` samples, and greedy pass@1. ``--max-steps`` only guards against an arm that generates nothing.

**Tokens to reach flat GRPO's final success** (:func:`tokens_to_reach`). The target is flat GRPO's success at the
budget; an arm reaches it at the first evaluation after step 0 at or above it. When the evaluation before was below
the target, the tokens are interpolated linearly between the two evaluations (the crossing); when it was not (only
possible when the warm start already scores the target: flat GRPO gained nothing, noted below the table), the
evaluation's own tokens count. Never reached: "not reached". Ratio = tokens to reach / the budget. Per seed, on each run's own
evaluations, against that seed's flat GRPO final; for the mean, on the mean curves: each seed's curve interpolated
linearly onto the grid 0, E, 2E, ..., budget (E = ``--eval-every-tokens``), averaged over seeds (min-max band).

**Analysis per arm** (means over the RL steps of every seed): mixed-outcome groups kept per 1,000 generated tokens
(``groups_kept`` over ``tokens_generated``: the groups an update learns from), training success, rollout entropy;
for tree arms the siblings' advantage variance per branch point and the share of branch points whose siblings got
different advantages (``tree/sibling_adv_var``, ``tree/branch_points_informative``), and the success of leaves that
continue a global sample vs branched leaves (``tree/leaf_success/*``), with the mean branch depth.

**Entropy per loss** (``--entropy-losses``): one flat GRPO run per loss (``algorithm.loss.name``; the recipe's own
loss reuses the ``flat-grpo`` run), same warm start and budget; ``rollout_entropy`` (mean nats per generated token
of the step's rollouts) per RL step into ``entropy_per_loss.png`` / ``.json``. With one epoch of one mini-batch
(the quickstart) every token's ratio is ~1 in the update, so ppo_clip and aepo take the same step, and clip_cov /
kl_cov differ from it only on their ``clip_cov_ratio`` / ``kl_cov_ratio`` share of the tokens (at least one per
update: 2e-4 of a few thousand tokens); the script says so.

Writes ``OUT/tree_vs_flat_learning.png`` (sampled pass@1 against generated tokens, mean line and min-max band per
arm; greedy on the right) and ``OUT/tree_vs_flat_learning.json`` (every evaluation point of every arm and seed, the
grid curves, the rows and the analysis). A run directory holding ``summary.json`` is reused, not retrained (one with
other settings is an error); an interrupted one resumes from its checkpoint; so seeds can run as separate processes
into the same ``--out`` and a last call with every seed only reads them. Numbers only.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import yaml
from rlvr_gym_agents.config import TrainConfig, load_config, to_dict
from rlvr_gym_agents.credit import CREDIT
from rlvr_gym_agents.train import train
from rlvr_gym_agents.update.losses import LOSSES

RECIPES = Path(__file__).resolve().parents[1] / "agents" / "recipes"
FAMILIES = {"textworld": ("quickstart.yaml", "textworld-tree.yaml"), "tools": ("tools-tree.yaml", None),
            "code": ("code-tiny.yaml", None), "rtl": ("rtl-tiny.yaml", "rtl-tree.yaml")}
"""family -> (recipe of every arm, recipe whose ``rollout.tree`` section the tree arms take; None: the recipe's)."""
METRICS = {"sampled": "pass@1_sampled", "greedy": "pass@1_greedy"}
REFERENCE = "flat-grpo"
TREE_KEYS = ("tree/sibling_adv_var", "tree/branch_points_informative", "tree/leaf_success/global",
             "tree/leaf_success/branched", "tree/branch_depth_mean")


class Arm(NamedTuple):
    """One way of training: its name (run directories are ``<name>-seed<s>``) and its recipe overrides."""

    name: str
    overrides: tuple[str, ...]


def _names(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", choices=sorted(FAMILIES), default="textworld")
    parser.add_argument("--seeds", type=lambda s: [int(x) for x in _names(s)], default=[0, 1, 2], help="e.g. 0,1,2")
    parser.add_argument("--token-budget", type=int, default=150_000, help="generated tokens per arm")
    parser.add_argument("--eval-every-tokens", type=int, default=25_000, help="held-out evaluation every N tokens")
    parser.add_argument("--flat-credits", type=_names, default=["soft", "gigpo"],
                        help="flat arms' credits (soft = flat GRPO, the reference; gigpo = flat GiGPO)")
    parser.add_argument("--tree-credits", type=_names, default=["gigpo", "treerl", "soft"], help="tree arms' credits")
    parser.add_argument("--entropy-losses", type=_names, default=None,
                        help="instead of the arms: one flat GRPO run per loss, e.g. ppo_clip,aepo,clip_cov,kl_cov")
    parser.add_argument("--tasks-per-step", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--group-size", type=int, default=None, help="episodes (leaves) per task; default the recipe's")
    parser.add_argument("--eval-tasks", type=int, default=None, help="held-out tasks; default the recipe's")
    parser.add_argument("--eval-seed", type=int, default=1234, help="sampling seed of every evaluation (eval.seed)")
    parser.add_argument("--max-steps", type=int, default=2000, help="RL steps at most per arm (a guard)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads per run (model.num_threads)")
    parser.add_argument("--set", dest="overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="recipe overrides for every run (warm start included), e.g. eval.k=2")
    parser.add_argument("--tree-set", dest="tree_overrides", nargs="*", default=[], metavar="KEY=VALUE",
                        help="overrides for the tree arms only, e.g. rollout.tree.global_samples=2")
    parser.add_argument("--progress", action="store_true", help="show the trainer's progress bars")
    parser.add_argument("--out", type=Path, default=None, help="default runs/bench-tree-vs-flat-<family>")
    args = parser.parse_args(argv)
    _check_args(parser, args)
    args.out = args.out or Path(f"runs/bench-tree-vs-flat-{args.family}")
    return args


def _check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if min(args.token_budget, args.eval_every_tokens, args.max_steps) < 1 or not args.seeds:
        parser.error("--token-budget, --eval-every-tokens and --max-steps must be >= 1 and --seeds non-empty")
    flat_ok = sorted(n for n, m in CREDIT.items() if not m.needs_tree)
    if "soft" not in args.flat_credits or not set(args.flat_credits) <= set(flat_ok):
        parser.error(f"--flat-credits must include soft (flat GRPO, the reference) and be among {flat_ok}; "
                     f"got {args.flat_credits}")
    if not set(args.tree_credits) <= set(CREDIT):
        parser.error(f"--tree-credits must be among {sorted(CREDIT)}; got {args.tree_credits}")
    if args.entropy_losses is not None and (not args.entropy_losses or not set(args.entropy_losses) <= set(LOSSES)):
        parser.error(f"--entropy-losses must be among {sorted(LOSSES)}; got {args.entropy_losses}")


def recipe(args: argparse.Namespace) -> Path:
    return RECIPES / FAMILIES[args.family][0]


def arms(args: argparse.Namespace) -> list[Arm]:
    """The flat arms, then the tree arms, in command-line order."""
    flat = [Arm("flat-grpo" if c == "soft" else f"flat-{c}", ("rollout.sampler=flat", f"algorithm.credit={c}"))
            for c in args.flat_credits]
    tree = [Arm(f"tree-{c}", (*tree_overrides(args.family), f"algorithm.credit={c}", *args.tree_overrides))
            for c in args.tree_credits]
    return flat + tree


def entropy_arms(args: argparse.Namespace) -> list[Arm]:
    """One flat GRPO arm per loss; the recipe's own loss is the ``flat-grpo`` arm itself."""
    reference = arms(args)[0]
    own = load_config(recipe(args), list(args.overrides)).algorithm.loss.name
    return [reference if loss == own else Arm(f"loss-{loss}", (*reference.overrides, f"algorithm.loss.name={loss}"))
            for loss in args.entropy_losses]


def tree_overrides(family: str) -> list[str]:
    """``rollout.sampler=tree`` and, where the family's tree settings live in another recipe, its ``rollout.tree``."""
    source = FAMILIES[family][1]
    if source is None:
        return ["rollout.sampler=tree"]
    section = yaml.safe_load((RECIPES / source).read_text(encoding="utf-8"))["rollout"]["tree"]
    return ["rollout.sampler=tree", *_flatten(section, "rollout.tree.")]


def _flatten(section: dict[str, Any], prefix: str) -> list[str]:
    out: list[str] = []
    for key, value in section.items():
        if isinstance(value, dict):
            out += _flatten(value, f"{prefix}{key}.")
        else:
            out.append(f"{prefix}{key}={json.dumps(value)}")
    return out


def common_overrides(args: argparse.Namespace, seed: int) -> list[str]:
    """Overrides of every run of a seed, the warm start included."""
    overrides = ["algorithm.invalid_action_penalty=0", f"seed={seed}", f"model.num_threads={args.threads}",
                 f"output.progress={str(args.progress).lower()}", "output.tensorboard=false",
                 f"eval.seed={args.eval_seed}"]
    for key, value in (("train.tasks_per_step", args.tasks_per_step), ("train.group_size", args.group_size),
                       ("eval.num_tasks", args.eval_tasks)):
        if value is not None:
            overrides.append(f"{key}={value}")
    return overrides + list(args.overrides)


def warm_start_dir(args: argparse.Namespace, seed: int) -> Path:
    """The ``sft_model`` of the recipe's SFT (no RL steps) for this seed, trained once into ``OUT/warm-seed<s>``."""
    run_dir = args.out / f"warm-seed{seed}"
    if not (run_dir / "sft_model" / "config.json").is_file():
        # the tiny tokenizer's vocabulary is built from the held-out tasks too: keep eval.num_tasks as the arms'
        # no time cap: the warm start is its recipe's sft.max_steps whatever the machine's load
        overrides = [*common_overrides(args, seed), "train.num_steps=0", "eval.k=1", "eval.greedy=false",
                     "train.max_generated_tokens=null", "sft.max_time_s=1000000", f"output.dir={run_dir}"]
        print(f"seed {seed}: warm start ({recipe(args).name} SFT) into {run_dir}", flush=True)
        _train_quietly(load_config(recipe(args), overrides))
    return run_dir / "sft_model"


def arm_config(args: argparse.Namespace, seed: int, arm: Arm, warm: Path) -> TrainConfig:
    """The arm's recipe: RL from ``warm`` until ``--token-budget`` generated tokens, evaluated every
    ``--eval-every-tokens``."""
    overrides = [*common_overrides(args, seed), f"model.path_or_id={warm}", "sft.enabled=false",
                 f"train.num_steps={args.max_steps}", f"train.max_generated_tokens={args.token_budget}",
                 f"eval.every_generated_tokens={args.eval_every_tokens}", "eval.every_steps=0",
                 "train.max_time_s=null", "train.run_budget_s=null", f"output.dir={args.out / f'{arm.name}-seed{seed}'}",
                 *arm.overrides]
    return load_config(recipe(args), overrides)


def run_arm(args: argparse.Namespace, seed: int, arm: Arm, warm: Path) -> Path:
    """Trains one arm for one seed (unless its run directory holds a finished run) and returns the run directory.

    Raises:
        SystemExit: the run directory holds a run with other settings.
    """
    config = arm_config(args, seed, arm, warm)
    run_dir = Path(config.output.dir)
    saved = run_dir / "config.json"
    if saved.is_file() and effective_settings(json.loads(saved.read_text(encoding="utf-8"))) != effective_settings(
            json.loads(json.dumps(to_dict(config)))):
        raise SystemExit(f"{run_dir} holds a run with other settings than these; delete it or pass another --out")
    if (run_dir / "summary.json").is_file():
        print(f"seed {seed} {arm.name}: reusing the finished run in {run_dir}", flush=True)
        return run_dir
    summary = _train_quietly(config)
    print(f"seed {seed} {arm.name}: {summary['elapsed_s']:.0f} s wall, {run_dir}", flush=True)
    return run_dir


def effective_settings(config: dict[str, Any]) -> dict[str, Any]:
    """A saved run config without what cannot change an RL run from a given warm start: the ``sft`` section
    (disabled here), the sizes of a tiny model that is loaded, not built, ``output`` and a flat run's
    ``rollout.tree`` section."""
    kept = {key: value for key, value in config.items() if key not in ("sft", "output")}
    if config["rollout"].get("sampler") == "flat":
        kept["rollout"] = {key: value for key, value in config["rollout"].items() if key != "tree"}
    kept["model"] = {key: value for key, value in config["model"].items()
                     if key not in ("hidden_size", "num_layers", "num_heads", "intermediate_size", "corpus_episodes")}
    return kept


def _train_quietly(config: TrainConfig) -> dict[str, Any]:
    """Runs :func:`train`; the trainer's result tables go to stderr with its notes."""
    with contextlib.redirect_stdout(sys.stderr):
        return train(config)


# -- reading the runs -----------------------------------------------------------------------------------------


def step_records(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """The run's ``metrics.jsonl`` by (phase, step); a resumed run may log a step twice: the last record counts."""
    records: dict[tuple[str, int], dict[str, Any]] = {}
    for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            records[(record["phase"], record["step"])] = record
    return records


def rl_records(run_dir: Path) -> list[dict[str, Any]]:
    """The run's RL step records in step order."""
    return [r for (phase, _), r in sorted(step_records(run_dir).items(), key=lambda i: i[0][1]) if phase == "rl"]


def learning_curve(run_dir: Path) -> list[dict[str, Any]]:
    """``[{step, tokens, sampled, greedy}]`` per evaluation: cumulative generated tokens of RL steps <= step."""
    records = step_records(run_dir)
    tokens = {step: r["tokens_generated"] for (phase, step), r in records.items() if phase == "rl"}
    return [{"step": step, "tokens": int(sum(n for s, n in tokens.items() if s <= step)),
             **{name: r.get(key) for name, key in METRICS.items()}}
            for (phase, step), r in sorted(records.items(), key=lambda item: item[0][1]) if phase == "eval"]


def arm_analysis(run_dirs: list[Path]) -> dict[str, Any]:
    """What the issue's analysis needs, over every RL step of the given runs (one per seed): steps, tokens,
    ``mixed_groups_per_1k_tokens``, mean training success and rollout entropy, and the means of
    :data:`TREE_KEYS` over the steps that log them (tree arms; absent keys are left out)."""
    steps = [r for d in run_dirs for r in rl_records(d)]
    tokens = sum(r["tokens_generated"] for r in steps)
    out: dict[str, Any] = {"steps": len(steps), "tokens": tokens,
                           "mixed_groups_per_1k_tokens": 1000.0 * sum(r["groups_kept"] for r in steps) / max(tokens, 1),
                           "training_success": _mean_of(steps, "success_rate"),
                           "rollout_entropy": _mean_of(steps, "rollout_entropy")}
    out.update({key: _mean_of(steps, key) for key in TREE_KEYS if any(key in r for r in steps)})
    return out


def _mean_of(records: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in records if r.get(key) is not None]
    return float(np.mean(values)) if values else None


# -- the comparison -------------------------------------------------------------------------------------------


def tokens_to_reach(curve: list[dict[str, Any]], target: float | None, metric: str = "sampled") -> float | None:
    """Generated tokens at which ``curve`` first reaches ``target`` after step 0 (rule in the module docstring):
    linear interpolation between the evaluation below the target and the first one at or above it, or that
    evaluation's tokens when the one before was not below it; None when never reached (or no target)."""
    if target is None:
        return None
    for before, point in itertools.pairwise(curve):
        value = point[metric]
        if value is None or value < target:
            continue
        low = before[metric]
        if low is None or low >= target:
            return float(point["tokens"])
        return before["tokens"] + (target - low) / (value - low) * (point["tokens"] - before["tokens"])
    return None


def on_grid(curve: list[dict[str, Any]], grid: list[float], metric: str) -> list[float | None]:
    """``curve``'s ``metric`` linearly interpolated at each grid token count (None past its last evaluation)."""
    points = [(p["tokens"], p[metric]) for p in curve if p[metric] is not None]
    xs, ys = [x for x, _ in points], [y for _, y in points]
    return [float(np.interp(g, xs, ys)) if xs and g <= xs[-1] else None for g in grid]


def token_grid(args: argparse.Namespace) -> list[float]:
    """0, E, 2E, ... up to the budget (the budget included)."""
    grid = list(np.arange(0, args.token_budget, args.eval_every_tokens, dtype=float))
    return [float(g) for g in grid] + [float(args.token_budget)]


def band(curves: list[list[dict[str, Any]]], grid: list[float], metric: str) -> dict[str, list[float | None]]:
    """Mean, min and max over seeds at each grid point (None where a seed's curve stops short)."""
    rows = [on_grid(c, grid, metric) for c in curves]
    columns = [[row[i] for row in rows] for i in range(len(grid))]
    full = [None if any(v is None for v in col) else col for col in columns]
    return {"tokens": grid, "mean": [None if c is None else float(np.mean(c)) for c in full],
            "min": [None if c is None else float(min(c)) for c in full],
            "max": [None if c is None else float(max(c)) for c in full]}


def comparison_rows(curves: dict[str, dict[int, list[dict[str, Any]]]], bands: dict[str, dict[str, Any]],
                    budget: int, metric: str) -> list[dict[str, Any]]:
    """Per arm: final success (mean curve at the budget; per seed the last evaluation), the tokens at which the mean
    curve reaches flat GRPO's final mean and per seed its seed's final, and those over the budget."""
    ref_final = bands[REFERENCE][metric]["mean"][-1]
    ref_gain = _diff(ref_final, bands[REFERENCE][metric]["mean"][0])
    rows = []
    for arm, by_seed in curves.items():
        mean_curve = [{"step": i, "tokens": t, metric: m} for i, (t, m) in
                      enumerate(zip(bands[arm][metric]["tokens"], bands[arm][metric]["mean"]))]
        reach = tokens_to_reach(mean_curve, ref_final, metric)
        per_seed = {seed: tokens_to_reach(c, curves[REFERENCE][seed][-1][metric], metric) for seed, c in by_seed.items()}
        rows.append({"arm": arm, "metric": metric, "final": bands[arm][metric]["mean"][-1],
                     "final_per_seed": {s: c[-1][metric] for s, c in by_seed.items()},
                     "reference_final": ref_final, "reference_gain": ref_gain, "reach_tokens": reach,
                     "ratio": None if reach is None else reach / budget,
                     "ratio_per_seed": {s: None if r is None else r / budget for s, r in per_seed.items()}})
    return rows


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_comparison(rows: list[dict[str, Any]]) -> None:
    header = (f"{'arm':<14}{'metric':<9}{'final (mean)':>13}{'per seed':>22}{'tokens to flat-grpo final':>27}"
              f"{'ratio':>8}{'ratio per seed':>22}")
    print(header)
    print("-" * len(header))
    for r in rows:
        reach = "not reached" if r["reach_tokens"] is None else f"{r['reach_tokens']:,.0f}"
        seeds = " ".join(_fmt(v, ".3f") for v in r["final_per_seed"].values())
        ratios = " ".join("n/r" if v is None else f"{v:.2f}" for v in r["ratio_per_seed"].values())
        print(f"{r['arm']:<14}{r['metric']:<9}{_fmt(r['final'], '.3f'):>13}{seeds:>22}{reach:>27}"
              f"{_fmt(r['ratio'], '.2f'):>8}{ratios:>22}")
    for metric in dict.fromkeys(r["metric"] for r in rows if (r["reference_gain"] or 0.0) <= 0):
        print(f"note ({metric}): flat GRPO's final success is no better than the shared warm start's, so reaching it "
              "says nothing about learning")


def print_analysis(analysis: dict[str, dict[str, Any]], walls: dict[str, list[float]]) -> None:
    header = (f"{'arm':<14}{'steps':>7}{'tokens':>11}{'wall s':>9}{'mixed/1k tok':>13}{'train succ':>11}"
              f"{'entropy':>9}{'sib adv var':>12}{'informative':>12}{'leaf succ glob/branched':>25}{'depth':>7}")
    print(header)
    print("-" * len(header))
    for arm, a in analysis.items():
        leaf = f"{_fmt(a.get('tree/leaf_success/global'), '.3f')} / {_fmt(a.get('tree/leaf_success/branched'), '.3f')}"
        print(f"{arm:<14}{a['steps']:>7}{a['tokens']:>11,}{sum(walls[arm]):>9.0f}"
              f"{a['mixed_groups_per_1k_tokens']:>13.2f}{_fmt(a['training_success'], '.3f'):>11}"
              f"{_fmt(a['rollout_entropy'], '.3f'):>9}{_fmt(a.get('tree/sibling_adv_var'), '.4f'):>12}"
              f"{_fmt(a.get('tree/branch_points_informative'), '.2f'):>12}{leaf:>25}"
              f"{_fmt(a.get('tree/branch_depth_mean'), '.2f'):>7}")


def wall_s(run_dir: Path) -> float:
    """Wall seconds of the run's ``train()`` call (its ``summary.json``)."""
    return float(json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["elapsed_s"])


# -- plots ------------------------------------------------------------------------------------------------------


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_learning(bands: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    """Held-out pass@1 (sampled; greedy on the right) against generated tokens: mean line and min-max band per arm."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharex=True)
    for ax, metric in zip(axes, METRICS):
        for index, (arm, by_metric) in enumerate(bands.items()):
            _band(ax, by_metric[metric]["tokens"], by_metric[metric], f"C{index}", arm)
        final = bands[REFERENCE][metric]["mean"][-1]
        if final is not None:
            ax.axhline(final, color="C0", linestyle="--", linewidth=1, label=f"{REFERENCE} final (mean)")
        ax.set_ylim(bottom=0.0, top=max(0.05, ax.get_ylim()[1]))
        ax.set_xlabel("generated tokens (RL rollouts, cumulative)")
        ax.set_ylabel(f"held-out pass@1 ({metric})")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _band(ax: Any, xs: list[float], values: dict[str, list[float | None]], colour: str, label: str) -> None:
    keep = [i for i, m in enumerate(values["mean"]) if m is not None]
    x = [xs[i] for i in keep]
    ax.plot(x, [values["mean"][i] for i in keep], color=colour, linewidth=2, marker="o", markersize=3, label=label)
    ax.fill_between(x, [values["min"][i] for i in keep], [values["max"][i] for i in keep], color=colour, alpha=0.2)


def entropy_bands(runs: dict[str, dict[int, Path]]) -> dict[str, dict[str, list[float | None]]]:
    """Per loss: ``rollout_entropy`` per RL step, mean/min/max over seeds at the steps every seed ran."""
    out = {}
    for loss, by_seed in runs.items():
        per_seed = [{r["step"]: r["rollout_entropy"] for r in rl_records(d)} for d in by_seed.values()]
        steps = sorted(set.intersection(*(set(p) for p in per_seed)))
        columns = [[p[s] for p in per_seed] for s in steps]
        out[loss] = {"steps": steps, "mean": [float(np.mean(c)) for c in columns],
                     "min": [float(min(c)) for c in columns], "max": [float(max(c)) for c in columns]}
    return out


def plot_entropy(bands: dict[str, dict[str, list[Any]]], path: Path, title: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for index, (loss, values) in enumerate(bands.items()):
        _band(ax, values["steps"], values, f"C{index}", loss)
    ax.set_xlabel("RL step")
    ax.set_ylabel("rollout entropy (nats per generated token)")
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# -- the two modes --------------------------------------------------------------------------------------------


def run_all(args: argparse.Namespace, chosen: list[Arm]) -> dict[str, dict[int, Path]]:
    """Every arm for every seed (warm start first); {arm: {seed: run directory}}."""
    runs: dict[str, dict[int, Path]] = {arm.name: {} for arm in chosen}
    for seed in args.seeds:
        warm = warm_start_dir(args, seed)
        for arm in chosen:
            runs[arm.name][seed] = run_arm(args, seed, arm, warm)
    return runs


def compare_arms(args: argparse.Namespace) -> dict[str, Any]:
    """The equal-token comparison: runs, prints, plots and writes the JSON; returns what it wrote."""
    runs = run_all(args, arms(args))
    curves = {arm: {seed: learning_curve(d) for seed, d in by_seed.items()} for arm, by_seed in runs.items()}
    grid = token_grid(args)
    bands = {arm: {m: band(list(c.values()), grid, m) for m in METRICS} for arm, c in curves.items()}
    rows = [row for m in METRICS for row in comparison_rows(curves, bands, args.token_budget, m)]
    analysis = {arm: arm_analysis(list(by_seed.values())) for arm, by_seed in runs.items()}
    walls = {arm: [wall_s(d) for d in by_seed.values()] for arm, by_seed in runs.items()}
    print(f"\n{args.family}: held-out pass@1 at equal generated tokens ({args.token_budget:,} per arm, seeds "
          f"{args.seeds}; issue 25's target: a tree arm reaches flat GRPO's final success at ratio <= 0.6)")
    print_comparison(rows)
    print("\nper arm, over every RL step of every seed:")
    print_analysis(analysis, walls)
    title = f"{args.family}: {args.token_budget:,} generated tokens per arm, seeds {args.seeds}"
    plot_learning(bands, args.out / "tree_vs_flat_learning.png", title)
    result = {"args": _jsonable(args), "arms": {a.name: list(a.overrides) for a in arms(args)}, "curves": curves,
              "bands": bands, "rows": rows, "analysis": analysis, "wall_s": walls}
    (args.out / "tree_vs_flat_learning.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out / 'tree_vs_flat_learning.png'} and {args.out / 'tree_vs_flat_learning.json'}")
    return result


def compare_losses(args: argparse.Namespace) -> dict[str, Any]:
    """Rollout entropy per RL step, one flat GRPO run per loss: runs, prints, plots and writes the JSON."""
    chosen = entropy_arms(args)
    runs = run_all(args, chosen)
    by_loss = {loss: runs[arm.name] for loss, arm in zip(args.entropy_losses, chosen)}
    bands = entropy_bands(by_loss)
    config = arm_config(args, args.seeds[0], chosen[0], Path("unused"))
    print(f"\n{args.family}: rollout entropy per RL step by loss ({args.token_budget:,} generated tokens per run)")
    print(f"{'loss':<10}{'first step':>11}{'last step':>11}{'steps':>7}{'final sampled pass@1 per seed':>32}")
    for loss, values in bands.items():
        finals = " ".join(_fmt(learning_curve(d)[-1]["sampled"], ".3f") for d in by_loss[loss].values())
        print(f"{loss:<10}{_fmt(values['mean'][0] if values['mean'] else None, '.3f'):>11}"
              f"{_fmt(values['mean'][-1] if values['mean'] else None, '.3f'):>11}{len(values['steps']):>7}{finals:>32}")
    if config.algorithm.epochs * config.algorithm.num_minibatches == 1:
        loss = config.algorithm.loss
        print(f"note: one epoch of one mini-batch: every ratio is ~1 in the update, so ppo_clip and aepo take the same "
              f"step; clip_cov / kl_cov differ from it on {loss.clip_cov_ratio:g} / {loss.kl_cov_ratio:g} of the tokens "
              "(at least one per update); algorithm.epochs / num_minibatches > 1 or the ratios tell them apart")
    plot_entropy(bands, args.out / "entropy_per_loss.png", f"{args.family}: seeds {args.seeds}, mean and min-max")
    result = {"args": _jsonable(args), "runs": {loss: {s: str(d) for s, d in r.items()} for loss, r in by_loss.items()},
              "entropy": bands}
    (args.out / "entropy_per_loss.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out / 'entropy_per_loss.png'} and {args.out / 'entropy_per_loss.json'}")
    return result


def _jsonable(args: argparse.Namespace) -> dict[str, Any]:
    return {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    return compare_losses(args) if args.entropy_losses is not None else compare_arms(args)


if __name__ == "__main__":
    main()
