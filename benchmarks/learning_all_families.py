"""Issue 24's learning bar for every environment family: each family's CPU recipe, warm start against after RL.

Usage::

    .venv/bin/python benchmarks/learning_all_families.py [--families textworld,tools,code,rtl,web]
        [--seeds 0,1,2] [--recipe FAMILY=PATH ...] [--override KEY=VALUE ...]
        [--out benchmarks/results/learning_all_families] [--resume] [--dry-run] [--timeout-s 3600]

For every family and seed, one run after another (each recipe uses both cores), the benchmark runs what a user
runs, ``python -m rlvr_gym.cli train RECIPE [--override ...] seed=S output.dir=OUT/runs/FAMILY-seedS``, as a
subprocess, and times its wall clock. The run's output goes to ``benchmark.log`` in its run directory and the
benchmark's own record (command, exit status, wall seconds) to ``benchmark_run.json`` beside it. The numbers are
read back from the run's own files: ``summary.json`` (the held-out evaluations before and after RL, as
:func:`rlvr_gym_agents.train.train` writes them) and ``metrics.jsonl`` (:func:`rlvr_gym_agents.run_io.read_metrics`:
the SFT record's ``elapsed_s``, one record per RL step with ``success_rate`` and ``step_s``, the evaluations).

The baseline is each run's own warm start: the SFT policy evaluated on the held-out tasks before RL. Issue 24's bar
for a run (:func:`bar_verdict`): held-out sampled pass@1 at least +0.10 over the warm start, greedy pass@1 not
lower, and at most 900 s of wall clock for the whole command, which must exit with status 0.

Writes into ``--out``: ``table.md`` (also printed: per run warm start and after-RL sampled pass@1, greedy pass@1
and pass@k, the gains, RL steps done, wall seconds of SFT, RL and the whole command, and the bar; per family the
mean over its finished seeds and how many seeds met the bar), ``results.json`` (all of it, with every run's
training success per RL step and its held-out evaluations) and ``learning_curves.png`` (a panel per family:
training success against RL step, one line per seed, held-out pass@1 before and after RL as points).

A run that fails (exit status not 0, or no ``summary.json``) is a row with its exit status and the last lines of
its log, and the benchmark goes on. Without ``--resume`` a run directory left by an earlier call is deleted first,
so every wall time is a whole run's; with ``--resume`` a run whose directory holds ``summary.json`` is read, not
rerun, and an unfinished one is rerun with the same command, which resumes from its checkpoint (its wall time is
then the sum of the recorded attempts, marked ``*`` in the table); a run directory whose ``config.json`` is not
what the command would run now (an edited recipe, other overrides) stops the benchmark with the setting that
differs. Numbers only; the measured tables are in
``benchmarks/results/learning_all_families/table.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from rlvr_gym_agents.config import ConfigError, load_config, to_dict
from rlvr_gym_agents.run_io import read_metrics

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "agents" / "recipes"
FAMILY_RECIPES: dict[str, Path] = {
    "textworld": RECIPES / "quickstart.yaml",
    "tools": RECIPES / "tools-tiny.yaml",
    "code": RECIPES / "code-tiny.yaml",
    "rtl": RECIPES / "rtl-tiny.yaml",
    "web": RECIPES / "web-tiny.yaml",
}
"""Each family's CPU recipe (``--recipe FAMILY=PATH`` replaces one)."""
DEFAULT_OUT = REPO / "benchmarks" / "results" / "learning_all_families"
MIN_SAMPLED_GAIN = 0.10
"""Issue 24: held-out sampled pass@1 after RL at least this much over the run's own warm start."""
MAX_WALL_S = 900.0
"""Issue 24: the whole run (``rlvr-gym train``, from start to exit) within 15 minutes of wall clock."""
TOLERANCE = 1e-9
"""Pass rates are means over tasks: a gain of exactly 0.10 (or 0 for greedy) passes despite float rounding."""
TIMEOUT_EXIT = 124
"""The exit status recorded for a run killed by ``--timeout-s`` (as coreutils ``timeout``)."""
LOG_TAIL_LINES = 20
RESERVED_KEYS = ("seed", "output.dir")


class RunSpec(NamedTuple):
    """One run of the benchmark: a family's recipe with one seed, in its own run directory, and its command."""

    family: str
    seed: int
    recipe: Path
    run_dir: Path
    argv: list[str]
    overrides: tuple[str, ...] = ()
    """The recipe overrides of ``argv`` (``--override`` ones, then ``seed`` and ``output.dir``)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILY_RECIPES),
                        help=f"comma-separated families, in run order (default: {','.join(FAMILY_RECIPES)})")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: 0,1,2)")
    parser.add_argument("--recipe", action="append", default=[], metavar="FAMILY=PATH",
                        help="use this recipe for a family (repeatable)")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a dotted recipe override passed to every run, as `rlvr-gym train` takes it (repeatable)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the runs, table, JSON and PNG go")
    parser.add_argument("--resume", action="store_true",
                        help="read runs whose directory holds summary.json instead of rerunning them")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and exit")
    parser.add_argument("--timeout-s", type=float, default=3600.0,
                        help="kill a run (its whole process group) after this many seconds (default 3600)")
    args = parser.parse_args(argv)
    try:
        args.families = _families(args.families)
        args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    except ValueError as error:
        parser.error(str(error))
    if not args.seeds:
        parser.error("--seeds is empty; pass e.g. --seeds 0,1,2")
    args.recipes = dict(FAMILY_RECIPES)
    for item in args.recipe:
        family, _, path = item.partition("=")
        if family not in FAMILY_RECIPES or not path:
            parser.error(f"--recipe {item!r}: expected FAMILY=PATH with FAMILY one of {', '.join(FAMILY_RECIPES)}")
        if not Path(path).is_file():
            parser.error(f"--recipe {item!r}: no file {path}")
        args.recipes[family] = Path(path).resolve()
    for item in args.override:
        key, equals, _ = item.partition("=")
        if not equals or not key:
            parser.error(f"--override {item!r}: expected KEY=VALUE, e.g. train.num_steps=10")
        if key in RESERVED_KEYS:
            parser.error(f"--override {item!r}: the benchmark sets {' and '.join(RESERVED_KEYS)} itself; "
                         "use --seeds and --out")
    if args.timeout_s <= 0:
        parser.error(f"--timeout-s must be > 0, got {args.timeout_s}")
    args.out = args.out.resolve()
    return args


def _families(text: str) -> list[str]:
    families = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in families if f not in FAMILY_RECIPES]
    if unknown or not families:
        raise ValueError(f"--families {text!r}: unknown {unknown}; known: {', '.join(FAMILY_RECIPES)}")
    return families


def run_specs(args: argparse.Namespace) -> list[RunSpec]:
    """Every (family, seed) run, families in ``--families`` order, seeds inside each."""
    specs = []
    for family in args.families:
        for seed in args.seeds:
            run_dir = args.out / "runs" / f"{family}-seed{seed}"
            recipe = args.recipes[family]
            overrides = (*args.override, f"seed={seed}", f"output.dir={run_dir}")
            argv = [sys.executable, "-m", "rlvr_gym.cli", "train", str(recipe), *overrides]
            specs.append(RunSpec(family, seed, recipe, run_dir, argv, overrides))
    return specs


def is_finished(run_dir: Path) -> bool:
    """A run directory holds a finished run: the trainer wrote ``summary.json`` as its last act."""
    return (run_dir / "summary.json").is_file()


def execute(spec: RunSpec, resume: bool, timeout_s: float) -> None:
    """Runs ``spec`` (unless ``resume`` and it is finished) and writes ``benchmark_run.json`` into its run dir:
    ``{"command", "exit_code", "wall_s", "attempts": [{"exit_code", "wall_s", "resumed"}]}``."""
    record_file = spec.run_dir / "benchmark_run.json"
    if resume and (spec.run_dir / "config.json").is_file():
        check_same_settings(spec)
    if resume and is_finished(spec.run_dir):
        return
    attempts: list[dict[str, Any]] = []
    if resume and record_file.is_file():
        attempts = json.loads(record_file.read_text(encoding="utf-8")).get("attempts", [])
    elif spec.run_dir.exists():
        shutil.rmtree(spec.run_dir)  # a fresh run: a rerun in the same output.dir would resume its checkpoint
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    resumed = (spec.run_dir / "checkpoint" / "trainer_state.pt").is_file()
    if not resumed:
        attempts = []  # the trainer starts over: earlier attempts' time is not part of this run
    exit_code, wall_s = _run_logged(spec.argv, spec.run_dir / "benchmark.log", timeout_s)
    attempts.append({"exit_code": exit_code, "wall_s": wall_s, "resumed": resumed})
    record = {"command": spec.argv, "exit_code": exit_code, "wall_s": sum(a["wall_s"] for a in attempts),
              "attempts": attempts}
    record_file.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


def check_same_settings(spec: RunSpec) -> None:
    """Stops ``--resume`` from reading or continuing a run made with other settings than ``spec``'s command (an
    edited recipe, other overrides): the run directory's ``config.json`` must be the config the command loads,
    except ``output.dir`` (runs of several ``--out`` folders may be linked into one to be tabled together); a setting
    the saved config lacks (written before the setting existed) counts as its default.

    Raises:
        SystemExit: naming the run directory and the first setting that differs.
    """
    try:
        expected = json.loads(json.dumps(to_dict(load_config(spec.recipe, list(spec.overrides)))))
    except (ConfigError, FileNotFoundError, ValueError):
        return  # the command fails by itself and its log says why
    saved = _with_defaults(json.loads((spec.run_dir / "config.json").read_text(encoding="utf-8")),
                           json.loads(json.dumps(to_dict(load_config(None, [])))))
    for config in (saved, expected):  # where the run was written is not a setting: a run may be moved or linked
        config.get("output", {}).pop("dir", None)
    difference = _first_difference(saved, expected)
    if difference is not None:
        key, was, now = difference
        raise SystemExit(f"{spec.run_dir} holds a run with other settings than `{shlex.join(spec.argv)}` ({key}: "
                         f"{was!r} there, {now!r} now); delete it, or run without --resume to start it over")


def _with_defaults(saved: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``saved`` with the settings it lacks taken from ``defaults``: a run written before a setting existed ran as its
    default does (a new setting's default keeps the old behaviour), so it is not a run with other settings."""
    merged = dict(saved)
    for key, value in defaults.items():
        if key not in merged:
            merged[key] = value
        elif isinstance(merged[key], dict) and isinstance(value, dict):
            merged[key] = _with_defaults(merged[key], value)
    return merged


def _first_difference(a: Any, b: Any, prefix: str = "") -> tuple[str, Any, Any] | None:
    """The first dotted key whose values differ between two nested dicts, with both values; None when equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            found = _first_difference(a.get(key), b.get(key), f"{prefix}{key}.")
            if found is not None:
                return found
        return None
    return None if a == b else (prefix.rstrip("."), a, b)


def _run_logged(argv: list[str], log_file: Path, timeout_s: float) -> tuple[int, float]:
    """``(exit status, wall seconds)`` of ``argv`` with stdout and stderr in ``log_file``. The run gets its own
    process group, killed whole on timeout (status :data:`TIMEOUT_EXIT`) or Ctrl-C, with every process it started
    that did not leave the group (a daemon that starts a session of its own would outlive it)."""
    began = time.monotonic()
    with log_file.open("wb") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            exit_code = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            exit_code = TIMEOUT_EXIT
            log.write(f"\nbenchmark: killed after --timeout-s {timeout_s:.0f} s\n".encode())
        except BaseException:
            _kill_group(process)
            raise
    return exit_code, time.monotonic() - began


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def read_run(spec: RunSpec) -> dict[str, Any]:
    """One row of the table from the run's own files (see the module docstring); metrics are None when the run
    did not finish. ``bar`` is :func:`bar_verdict`'s ``{"met", "why"}``."""
    record_file = spec.run_dir / "benchmark_run.json"
    record = json.loads(record_file.read_text(encoding="utf-8")) if record_file.is_file() else {}
    finished = is_finished(spec.run_dir)
    exit_code = record.get("exit_code", 0 if finished else None)
    row: dict[str, Any] = {
        "family": spec.family, "seed": spec.seed, "recipe": _display(spec.recipe), "run_dir": _display(spec.run_dir),
        "command": shlex.join(record.get("command", spec.argv)), "exit_code": exit_code,
        "finished": finished and exit_code == 0, "log_tail": None, "k": None, "before": None, "after": None,
        "gain_sampled": None, "gain_greedy": None, "rl_steps": None, "sft_s": None, "rl_s": None, "eval_s": None,
        "wall_s": record.get("wall_s"), "train_elapsed_s": None,
        "resumed": any(a.get("resumed") for a in record.get("attempts", [])), "curve": None,
    }
    if row["finished"]:
        row.update(run_metrics(spec.run_dir))
        if row["wall_s"] is None:  # finished before the benchmark looked (no record): the trainer's own time
            row["wall_s"] = row["train_elapsed_s"]
    else:
        row["log_tail"] = log_tail(spec.run_dir / "benchmark.log")
    row["bar"] = bar_verdict(row)
    return row


def run_metrics(run_dir: Path) -> dict[str, Any]:
    """Evaluations, gains, RL steps, phase times and the training curve of a finished run directory."""
    summary = json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))
    records = latest_records(run_dir)
    k = int(summary["before"]["k"])
    before, after = (_evaluation(summary[key], k) for key in ("before", "after"))
    rl = [r for (phase, _), r in sorted(records.items(), key=lambda item: item[0][1]) if phase == "rl"]
    evals = [r for (phase, _), r in sorted(records.items(), key=lambda item: item[0][1]) if phase == "eval"]
    sft = records.get(("sft", 0))
    return {
        "k": k, "before": before, "after": after,
        "gain_sampled": _diff(after["sampled"], before["sampled"]), "gain_greedy": _diff(after["greedy"], before["greedy"]),
        "rl_steps": max((r["step"] for r in rl), default=0),
        "sft_s": sft["elapsed_s"] if sft else None,
        "rl_s": float(sum(r["step_s"] for r in rl)),
        "eval_s": float(sum(r.get("elapsed_s", 0.0) for r in evals)),
        "train_elapsed_s": float(summary["elapsed_s"]),
        "curve": {"steps": [r["step"] for r in rl], "success": [r["success_rate"] for r in rl],
                  "evals": [{"step": r["step"], "sampled": r.get("pass@1_sampled"), "greedy": r.get("pass@1_greedy")}
                            for r in evals]},
    }


def latest_records(run_dir: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """``metrics.jsonl`` by ``(phase, step)``: the last record of each counts (the evaluation after RL, when RL
    stopped at a step that also had a periodic evaluation)."""
    return {(r["phase"], int(r["step"])): r for r in read_metrics(run_dir)}


def _evaluation(result: dict[str, Any], k: int) -> dict[str, float | None]:
    return {"sampled": result.get("pass@1_sampled"), "greedy": result.get("pass@1_greedy"),
            "pass@k": result.get(f"pass@{k}_sampled")}


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def log_tail(log_file: Path, num_lines: int = LOG_TAIL_LINES) -> str:
    """The last ``num_lines`` non-empty lines of a run's log (progress bars' carriage returns as line breaks)."""
    if not log_file.is_file():
        return "(no log: the run did not start)"
    text = log_file.read_text(encoding="utf-8", errors="replace").replace("\r", "\n")
    return "\n".join([line for line in text.splitlines() if line.strip()][-num_lines:])


def bar_verdict(row: dict[str, Any]) -> dict[str, Any]:
    """Issue 24's bar for one run: ``{"met": bool, "why": [what failed, ...]}``.

    Met when the run exited with status 0 and finished, its held-out sampled pass@1 gained at least
    :data:`MIN_SAMPLED_GAIN` over its warm start, its greedy pass@1 did not drop (a run without a greedy
    evaluation cannot show that), and its wall time was at most :data:`MAX_WALL_S`.
    """
    why = []
    if not row["finished"]:
        why.append(f"did not finish (exit status {row['exit_code']})")
    else:
        gain, greedy = row["gain_sampled"], row["gain_greedy"]
        if gain is None or gain < MIN_SAMPLED_GAIN - TOLERANCE:
            why.append(f"sampled gain {_fmt(gain, '+.3f')} < +{MIN_SAMPLED_GAIN:.2f}")
        if greedy is None:
            why.append("no greedy evaluation")
        elif greedy < -TOLERANCE:
            why.append(f"greedy gain {greedy:+.3f} < 0")
    if row["wall_s"] is None or row["wall_s"] > MAX_WALL_S:
        why.append(f"wall {_fmt(row['wall_s'], '.0f')} s > {MAX_WALL_S:.0f} s")
    return {"met": not why, "why": why}


MEAN_KEYS = ("gain_sampled", "gain_greedy", "rl_steps", "sft_s", "rl_s", "eval_s", "wall_s")


def family_mean(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean over a family's finished runs of every number in a row; ``seeds_met`` of ``seeds`` met the bar.

    A value missing in any finished run (greedy evaluation off) is None; all None when no run finished.
    """
    done = [r for r in rows if r["finished"]]
    mean: dict[str, Any] = {"family": rows[0]["family"], "seeds": [r["seed"] for r in rows],
                            "seeds_finished": [r["seed"] for r in done],
                            "seeds_met": [r["seed"] for r in rows if r["bar"]["met"]],
                            "k": done[0]["k"] if done and len({r["k"] for r in done}) == 1 else None}
    for key in MEAN_KEYS:
        mean[key] = _mean([r[key] for r in done])
    for phase in ("before", "after"):
        mean[phase] = {m: _mean([r[phase][m] for r in done]) for m in ("sampled", "greedy", "pass@k")}
    return mean


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return float(np.mean(present)) if present and len(present) == len(values) else None


COLUMNS = ("family", "seed", "k", "warm sampled", "warm greedy", "warm pass@k", "RL sampled", "RL greedy",
           "RL pass@k", "gain sampled", "gain greedy", "RL steps", "SFT s", "RL s", "total s", "bar")


def markdown_table(rows: list[dict[str, Any]], means: dict[str, dict[str, Any]]) -> str:
    """Per family its seeds' rows then its mean row, as one Markdown table; failed runs' log tails follow."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for family, mean in means.items():
        for row in (r for r in rows if r["family"] == family):
            bar = "met" if row["bar"]["met"] else "not met: " + "; ".join(row["bar"]["why"])
            lines.append(_cells(family, str(row["seed"]), row, bar, "*" if row["resumed"] else ""))
        label = f"mean of {len(mean['seeds_finished'])}"
        lines.append(_cells(family, label, mean, f"{len(mean['seeds_met'])}/{len(mean['seeds'])} seeds met", ""))
    failed = [r for r in rows if not r["finished"]]
    for row in failed:
        lines += ["", (f"{row['family']} seed {row['seed']}: exit status {row['exit_code']}; `{row['command']}`; "
                       "the last lines of its log:"), "", "```text", row["log_tail"] or "", "```"]
    if any(r["resumed"] for r in rows):
        lines += ["", "\\* resumed from a checkpoint: the wall time is the sum of the recorded attempts"]
    return "\n".join(lines) + "\n"


def _cells(family: str, seed: str, row: dict[str, Any], bar: str, mark: str) -> str:
    before, after = row["before"] or {}, row["after"] or {}
    cells = [family, seed, _fmt(row["k"], "d")]
    cells += [_fmt(phase.get(m), ".3f") for phase in (before, after) for m in ("sampled", "greedy", "pass@k")]
    cells += [_fmt(row["gain_sampled"], "+.3f"), _fmt(row["gain_greedy"], "+.3f"), _fmt(row["rl_steps"], ".4g"),
              _fmt(row["sft_s"], ".0f"), _fmt(row["rl_s"], ".0f"), _fmt(row["wall_s"], ".0f") + mark, bar]
    return "| " + " | ".join(cells) + " |"


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def plot_curves(rows: list[dict[str, Any]], path: Path) -> None:
    """A panel per family: training success per RL step, one line per seed (the seed's colour in every panel);
    held-out sampled pass@1 as circles and greedy as squares at each evaluation (before RL at step 0, after RL at
    the last step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = list(dict.fromkeys(r["family"] for r in rows))
    seeds = sorted({r["seed"] for r in rows})
    colours = {seed: plt.get_cmap("tab10")(i % 10) for i, seed in enumerate(seeds)}
    ncols = min(3, len(families))
    nrows = -(-len(families) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(5.2 * ncols, 3.8 * nrows), squeeze=False)
    for ax, family in zip(axes.flat, families):
        for row in (r for r in rows if r["family"] == family):
            colour, curve = colours[row["seed"]], row["curve"]
            if curve is None:
                ax.plot([], [], color=colour, label=f"seed {row['seed']}: failed (exit {row['exit_code']})")
                continue
            ax.plot(curve["steps"], curve["success"], color=colour, linewidth=1.2, label=f"seed {row['seed']}")
            for metric, marker in (("sampled", "o"), ("greedy", "s")):
                points = [(e["step"], e[metric]) for e in curve["evals"] if e[metric] is not None]
                if points:
                    ax.plot(*zip(*points), linestyle="none", marker=marker, color=colour, markersize=6,
                            markerfacecolor="none" if metric == "greedy" else colour)
        ax.set_title(family)
        ax.set_xlabel("RL step")
        ax.set_ylabel("success rate")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    for ax in list(axes.flat)[len(families):]:
        ax.axis("off")
    fig.suptitle("line: training success per RL step; o: held-out pass@1 sampled, \u25a1: greedy "
                 "(step 0 = warm start, last = after RL)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _display(path: Path) -> str:
    """``path`` relative to the repository when inside it (the tables are committed), else absolute."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What the results depend on besides the seeds: recipes, overrides, commit, cores, bar."""
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip() or None
    return {"families": args.families, "seeds": args.seeds,
            "recipes": {f: _display(args.recipes[f]) for f in args.families}, "overrides": args.override,
            "commit": commit, "cpu_count": os.cpu_count(), "timeout_s": args.timeout_s,
            "bar": {"min_sampled_gain": MIN_SAMPLED_GAIN, "greedy_not_lower": True, "max_wall_s": MAX_WALL_S}}


def report(args: argparse.Namespace, rows: list[dict[str, Any]]) -> str:
    """Writes ``table.md``, ``results.json`` and ``learning_curves.png`` into ``--out``; returns the table text."""
    means = {family: family_mean([r for r in rows if r["family"] == family]) for family in args.families}
    meta = settings(args)
    overrides = " ".join(f"`{o}`" for o in args.override) or "none"
    header = (f"# Learning on every family (issue 24)\n\n"
              f"Written by `benchmarks/learning_all_families.py` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
              f", commit {meta['commit'] or 'unknown'}, {meta['cpu_count']} CPU cores. Recipes: "
              + ", ".join(f"{f} `{p}`" for f, p in meta["recipes"].items()) + f". Overrides: {overrides}.\n\n"
              f"Held-out pass@1 (sampled at the recipe's temperature over k samples, and greedy) and pass@k of the "
              f"SFT warm start and after RL. Bar: sampled gain >= +{MIN_SAMPLED_GAIN:.2f}, greedy gain >= 0, "
              f"wall <= {MAX_WALL_S:.0f} s for the whole `rlvr-gym train` command. Times in seconds: SFT, the RL "
              f"steps (evaluations not included), the whole command. Means are over the finished seeds.\n\n")
    table = header + markdown_table(rows, means)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "table.md").write_text(table, encoding="utf-8")
    result = {"settings": meta, "runs": rows, "families": means}
    (args.out / "results.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    plot_curves(rows, args.out / "learning_curves.png")
    return table


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; returns 0 (whether or not the runs met the bar: numbers, not verdicts)."""
    args = parse_args(argv)
    specs = run_specs(args)
    if args.dry_run:
        for spec in specs:
            skip = "  # finished: --resume reads it" if args.resume and is_finished(spec.run_dir) else ""
            print(shlex.join(spec.argv) + skip)
        return 0
    rows = []
    for i, spec in enumerate(specs, 1):
        finished_before = args.resume and is_finished(spec.run_dir)
        print(f"[{i}/{len(specs)}] {spec.family} seed {spec.seed}: "
              + ("finished, reading it" if finished_before else f"running (log: {spec.run_dir / 'benchmark.log'})"),
              flush=True)
        execute(spec, args.resume, args.timeout_s)
        row = read_run(spec)
        rows.append(row)
        print(f"    exit {row['exit_code']}, {_fmt(row['wall_s'], '.0f')} s; sampled "
              f"{_fmt((row['before'] or {}).get('sampled'), '.3f')} -> {_fmt((row['after'] or {}).get('sampled'), '.3f')}"
              f"; bar {'met' if row['bar']['met'] else 'not met: ' + '; '.join(row['bar']['why'])}", flush=True)
    print("\n" + report(args, rows))
    print(f"wrote {args.out / 'table.md'}, {args.out / 'results.json'} and {args.out / 'learning_curves.png'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
