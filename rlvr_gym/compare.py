"""Compare two evaluation reports task by task, with paired bootstrap confidence intervals.

Two runs on the same suite differ in which tasks they solve; most of the spread of a mean over tasks is the
tasks themselves. Pairing by task removes it: for each metric the per-task difference ``B - A`` is averaged,
and the tasks are resampled with replacement (the same resample for A and B) to get a percentile
confidence interval of that mean difference and a two-sided bootstrap p-value (twice the smaller share of
resampled means on either side of 0). Only tasks present in both reports are compared; the others are
counted.

Reference: Efron & Tibshirani 1993, "An Introduction to the Bootstrap", ch. 13 (percentile intervals) and
ch. 16 (bootstrap tests); the paired design as in Koehn 2004, "Statistical Significance Tests for Machine
Translation Evaluation".

Example::

    from rlvr_gym.compare import compare_reports
    result = compare_reports("runs/eval/a/report.json", "runs/eval/b/report.json")
    print(result["metrics"]["pass@1"])   # {"mean_a", "mean_b", "delta", "ci_low", "ci_high", "p_value", ...}
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rlvr_gym.evaluation import NO_VALUE, EpisodeRecord, pass_at_k
from rlvr_gym.reporting import EvalReport, format_value

__all__ = ["compare_markdown", "compare_reports", "paired_bootstrap", "per_task_scores"]


def per_task_scores(records: Sequence[EpisodeRecord], metric: str) -> dict[str, float]:
    """One score per task: ``pass@J`` (the unbiased estimator over the task's samples; J <= samples),
    ``mean_reward``, ``mean_turns`` or ``success_rate`` (the share of successful samples).

    Raises:
        ValueError: on an unknown metric, or ``pass@J`` with more than the samples of some task.
    """
    by_task: dict[str, list[EpisodeRecord]] = collections.defaultdict(list)
    for record in records:
        by_task[record.task_id].append(record)
    if metric.startswith("pass@"):
        k = int(metric.removeprefix("pass@"))
        return {task: pass_at_k(len(group), sum(r.success for r in group), k) for task, group in by_task.items()}
    fields = {"mean_reward": "reward", "mean_turns": "turns", "success_rate": "success"}
    if metric not in fields:
        raise ValueError(f"unknown metric {metric!r}; use pass@J, {', '.join(fields)}")
    return {task: float(np.mean([float(getattr(r, fields[metric])) for r in group])) for task, group in by_task.items()}


def paired_bootstrap(
    a: Sequence[float], b: Sequence[float], *, num_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0
) -> dict[str, float]:
    """Paired bootstrap of the mean difference ``mean(b - a)`` over items (tasks).

    Args:
        a: one score per item for run A. Shape: (N,).
        b: the scores of the same items, in the same order, for run B. Shape: (N,).
        num_resamples: bootstrap resamples (>= 1).
        confidence: the interval's coverage, in (0, 1).
        seed: seeds the resampling.

    Returns:
        ``mean_a``, ``mean_b``, ``delta`` (= mean_b - mean_a), ``ci_low``/``ci_high`` (the percentile
        interval of the resampled deltas), ``p_value`` (two-sided, never below ``1 / num_resamples``; 1.0
        when every difference is 0) and ``num_tasks``.

    Raises:
        ValueError: on empty or unequal-length inputs, or out-of-range arguments.
    """
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.shape != b_arr.shape or a_arr.ndim != 1 or a_arr.size == 0:
        raise ValueError(f"paired_bootstrap needs two equal-length, non-empty 1-D sequences; got {a_arr.shape} "
                         f"and {b_arr.shape}")
    if num_resamples < 1 or not 0.0 < confidence < 1.0:
        raise ValueError(f"num_resamples must be >= 1 and confidence in (0, 1); got {num_resamples}, {confidence}")
    diff = b_arr - a_arr
    rng = np.random.default_rng(seed)
    indices = rng.integers(0, diff.size, size=(num_resamples, diff.size))
    resampled = diff[indices].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(resampled, [alpha, 1.0 - alpha])
    if np.all(diff == 0):
        p_value = 1.0
    else:
        below, above = float(np.mean(resampled <= 0.0)), float(np.mean(resampled >= 0.0))
        p_value = min(1.0, max(2.0 * min(below, above), 1.0 / num_resamples))
    return {"mean_a": float(a_arr.mean()), "mean_b": float(b_arr.mean()), "delta": float(diff.mean()),
            "ci_low": float(low), "ci_high": float(high), "p_value": p_value, "num_tasks": int(diff.size)}


def compare_reports(
    a: EvalReport | str | Path, b: EvalReport | str | Path, *, metrics: Sequence[str] | None = None,
    by: str | None = None, num_resamples: int = 10_000, confidence: float = 0.95, seed: int = 0,
) -> dict[str, Any]:
    """Compares report B with report A over the tasks both evaluated.

    Args:
        a: the baseline: an :class:`EvalReport`, a ``report.json`` or the folder holding it.
        b: the candidate, the same way.
        metrics: per-task metrics (see :func:`per_task_scores`); default ``pass@1``, ``pass@K`` (K = the
            smaller k of the two reports, when > 1) and ``mean_reward``.
        by: a task metadata key (or ``env_id`` / ``task_type``): also compare within each of its values.
        num_resamples, confidence, seed: see :func:`paired_bootstrap`.

    Returns:
        ``{"a": name, "b": name, "num_common_tasks", "only_in_a", "only_in_b" (counts), "metrics": {metric:
        paired_bootstrap(...)}, "by": {key: {value: {metric: ...}}}}`` (``by`` empty without ``by``).

    Raises:
        ValueError: when the reports share no task.
        FileNotFoundError: when a path holds no report.
    """
    report_a, report_b = _load(a), _load(b)
    k = min(report_a.k, report_b.k)
    chosen = list(metrics or ["pass@1", *([f"pass@{k}"] if k > 1 else []), "mean_reward"])
    tasks_a, tasks_b = {r.task_id for r in report_a.records}, {r.task_id for r in report_b.records}
    common = sorted(tasks_a & tasks_b)
    if not common:
        raise ValueError("the two reports share no task id; compare reports of the same suite")
    options = {"num_resamples": num_resamples, "confidence": confidence, "seed": seed}
    result: dict[str, Any] = {
        "a": _name(a, report_a), "b": _name(b, report_b), "num_common_tasks": len(common),
        "only_in_a": len(tasks_a - tasks_b), "only_in_b": len(tasks_b - tasks_a), "confidence": confidence,
        "metrics": _compare(report_a.records, report_b.records, common, chosen, options), "by": {},
    }
    if by is not None:
        groups = _task_groups(report_a.records, by)
        result["by"][by] = {value: _compare(report_a.records, report_b.records, [t for t in common if t in tasks],
                                            chosen, options)
                            for value, tasks in groups.items() if any(t in tasks for t in common)}
    return result


def compare_markdown(result: dict[str, Any]) -> str:
    """Renders :func:`compare_reports`' result as Markdown tables."""
    level = f"{100 * result['confidence']:.0f}%"
    lines = ["# Comparison", "", (f"A: `{result['a']}`, B: `{result['b']}`; {result['num_common_tasks']} tasks in both "
             f"({result['only_in_a']} only in A, {result['only_in_b']} only in B). Delta = B - A, averaged over "
             f"tasks; {level} paired bootstrap interval over tasks."), ""]
    lines += _table(result["metrics"], level)
    for key, groups in result["by"].items():
        for value, metrics in groups.items():
            lines += ["", f"## {key} = {value}", "", *_table(metrics, level)]
    return "\n".join(lines) + "\n"


def _table(metrics: dict[str, dict[str, float]], level: str) -> list[str]:
    rows = [f"| metric | A | B | delta | {level} CI | p | tasks |", "|---|---|---|---|---|---|---|"]
    for name, m in metrics.items():
        rows.append(f"| {name} | {format_value(m['mean_a'])} | {format_value(m['mean_b'])} | {m['delta']:+.3f} | "
                    f"[{m['ci_low']:+.3f}, {m['ci_high']:+.3f}] | {m['p_value']:.3g} | {m['num_tasks']} |")
    return rows


def _compare(records_a: Sequence[EpisodeRecord], records_b: Sequence[EpisodeRecord], tasks: Sequence[str],
             metrics: Sequence[str], options: dict[str, Any]) -> dict[str, dict[str, float]]:
    out = {}
    for metric in metrics:
        scores_a, scores_b = per_task_scores(records_a, metric), per_task_scores(records_b, metric)
        out[metric] = paired_bootstrap([scores_a[t] for t in tasks], [scores_b[t] for t in tasks], **options)
    return out


def _task_groups(records: Sequence[EpisodeRecord], key: str) -> dict[str, set[str]]:
    groups: dict[str, set[str]] = collections.defaultdict(set)
    for record in records:
        value = record.metadata.get(key, getattr(record, key, None) if key in ("env_id", "task_type") else None)
        groups[NO_VALUE if value is None else str(value)].add(record.task_id)
    return dict(sorted(groups.items()))


def _load(report: EvalReport | str | Path) -> EvalReport:
    if isinstance(report, EvalReport):
        return report
    path = Path(report)
    if path.is_dir():
        path = path / "report.json"
    if not path.is_file():
        raise FileNotFoundError(f"no report at {path}; pass a report.json or the folder `rlvr-gym eval --out` wrote")
    return EvalReport.from_json(path)


def _name(given: EvalReport | str | Path, report: EvalReport) -> str:
    if isinstance(given, EvalReport):
        return str(report.config.get("agent", "A"))
    return str(given)
