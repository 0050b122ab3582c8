"""Evaluation reports: JSON, Markdown and a PNG of plots (matplotlib, headless).

An :class:`EvalReport` holds the metrics of :func:`rlvr_gym.evaluation.summarize` and the episode records.
``save(dir)`` writes ``report.json`` (metrics, run config and every record), ``report.md`` (tables) and
``report.png`` (success by task type or env, reward histogram, failures by type).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlvr_gym.evaluation import EpisodeRecord

_HEADLINE = ("num_tasks", "num_episodes", "pass@1", "mean_reward", "mean_turns", "truncation_rate",
             "tool_calls_per_episode", "invalid_tool_call_rate", "mean_elapsed_s")


@dataclasses.dataclass
class EvalReport:
    """The result of an evaluation.

    Attributes:
        metrics: see :func:`rlvr_gym.evaluation.summarize`.
        records: one :class:`rlvr_gym.evaluation.EpisodeRecord` per episode.
        config: free JSON describing the run (agent, suite, k, sampling), written into the JSON report.
    """

    metrics: dict[str, Any]
    records: list[EpisodeRecord]
    config: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def k(self) -> int:
        """The k of the pass@k in :attr:`metrics`."""
        return int(self.metrics["k"])

    def to_json(self, path: str | Path) -> Path:
        """Writes ``{"config", "metrics", "records"}`` as JSON and returns the path."""
        payload = {"config": self.config, "metrics": self.metrics, "records": [r.to_dict() for r in self.records]}
        return _write(path, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def from_json(cls, path: str | Path) -> EvalReport:
        """Reads a report written by :meth:`to_json`."""
        from rlvr_gym.evaluation import EpisodeRecord

        payload = json.loads(Path(path).read_text(encoding="utf-8"))
        records = [EpisodeRecord.from_dict(r) for r in payload["records"]]
        return cls(payload["metrics"], records, payload.get("config", {}))

    def to_markdown(self, path: str | Path | None = None) -> str:
        """Renders the metrics as Markdown tables; writes them to ``path`` when given. Returns the text."""
        m, k = self.metrics, self.k
        lines = ["# Evaluation report", ""]
        if self.config:
            lines += [", ".join(f"**{key}**: `{value}`" for key, value in self.config.items()), ""]
        keys = [key for key in _HEADLINE if key in m]
        if k != 1:
            keys.insert(keys.index("pass@1") + 1, f"pass@{k}")
        lines += ["| metric | value |", "|---|---|", *(f"| {key} | {_with_stderr(m, key)} |" for key in keys)]
        note = (f"pass@1 and pass@{k}: the unbiased estimator of Chen et al. 2021, averaged over tasks (± standard "
                "error over tasks); other means are over episodes. Tool metrics count only envs that declare tools.")
        lines += ["", note]
        for title, key in (("Per env", "per_env"), ("Per task type", "per_task_type")):
            if m.get(key):
                lines += ["", f"## {title}", "", *_breakdown_table(m[key], k)]
        if m.get("failures_by_type"):
            lines += ["", "## Failures by type", "", "| kind | failures | episodes ended by it |", "|---|---|---|"]
            ended = m.get("episodes_ended_by", {})
            lines += [f"| {kind} | {count} | {ended.get(kind, 0)} |" for kind, count in m["failures_by_type"].items()]
        text = "\n".join(lines) + "\n"
        if path is not None:
            _write(path, text)
        return text

    def plot(self, path: str | Path) -> Path:
        """Writes a PNG with three panels: success rate by task type (by env when no task types), the
        histogram of episode rewards, and failures by type. Returns the path."""
        import matplotlib

        matplotlib.use("Agg")  # headless; must precede pyplot
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 3, figsize=(15, 4.5))
        groups = self.metrics.get("per_task_type") or self.metrics.get("per_env", {})
        _bar(axes[0], {name: g["pass@1"] for name, g in groups.items()}, "success rate (pass@1)", ylim=(0, 1))
        axes[1].hist([r.reward for r in self.records], bins=20, color="tab:blue")
        axes[1].set(title="episode reward", xlabel="reward", ylabel="episodes")
        _bar(axes[2], self.metrics.get("failures_by_type", {}), "failures by type", color="tab:red")
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path

    def save(self, directory: str | Path) -> dict[str, Path]:
        """Writes ``report.json``, ``report.md`` and ``report.png`` into ``directory``; returns their paths."""
        directory = Path(directory)
        paths = {"json": directory / "report.json", "markdown": directory / "report.md", "png": directory / "report.png"}
        self.to_json(paths["json"])
        self.to_markdown(paths["markdown"])
        self.plot(paths["png"])
        return paths


def format_value(value: Any) -> str:
    """Formats a metric for a table: floats to 3 decimals, None as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _with_stderr(metrics: dict[str, Any], key: str) -> str:
    stderr = metrics.get(f"{key}_stderr")
    return format_value(metrics.get(key)) + (f" ± {stderr:.3f}" if stderr is not None else "")


def _breakdown_table(groups: dict[str, dict[str, Any]], k: int) -> list[str]:
    columns = ["num_episodes", "pass@1", *([f"pass@{k}"] if k != 1 else []), "mean_reward", "mean_turns"]
    rows = ["| name | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for name, metrics in groups.items():
        cells = [str(name).replace("|", "\\|"), *(format_value(metrics.get(c)) for c in columns)]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def _bar(axis: Any, values: dict[str, float], title: str, color: str = "tab:green", ylim: Any = None) -> None:
    axis.set_title(title)
    if not values:
        axis.text(0.5, 0.5, "none", ha="center", va="center", transform=axis.transAxes)
        return
    names = list(values)
    bars = axis.bar(range(len(names)), [values[n] for n in names], color=color)
    axis.bar_label(bars, fmt="%.3g", fontsize=8)
    axis.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    if ylim is not None:
        axis.set_ylim(*ylim)


def _write(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
