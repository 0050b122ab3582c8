"""Evaluation reports: JSON, Markdown, transcripts and a PNG of plots (matplotlib, headless).

An :class:`EvalReport` holds the metrics of :func:`rlvr_gym.evaluation.summarize` and the episode records.
``save(dir)`` writes ``report.json`` (metrics, run config and every record with its transcript: observations,
actions, step rewards, failures), ``report.md`` (tables: headline metrics, the pass@k curve, per env / task
type / ``--by`` key, failures), ``transcripts.md`` (a readable sample of episodes) and ``report.png`` (the
pass@k curve, pass@1 by group, the reward histogram, failures per turn and what ended episodes; error bars
are one standard error over tasks).
"""

from __future__ import annotations

import dataclasses
import itertools
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
        curve, curve_stderr = m.get("pass@k_curve") or {}, m.get("pass@k_curve_stderr") or {}
        if len(curve) > 1:
            lines += ["", "## pass@k curve", "", "| k | pass@k |", "|---|---|"]
            lines += [f"| {j} | {format_value(v)}{_pm(curve_stderr.get(j))} |" for j, v in curve.items()]
        groups = [("Per env", m.get("per_env")), ("Per task type", m.get("per_task_type"))]
        groups += [(f"By {key}", split) for key, split in (m.get("by") or {}).items()]
        for title, split in groups:
            if split:
                lines += ["", f"## {title}", "", *_breakdown_table(split, k)]
        if m.get("failures_by_type") or m.get("episodes_ended_by"):
            lines += ["", "## Failures", "", ("Failures on any turn (an episode can have many), and the failure of the "
                      "last step, which ended the episode (at most one per episode)."), "",
                      "| kind | failures on any turn | episodes ended by it |", "|---|---|---|"]
            ended = m.get("episodes_ended_by", {})
            kinds = list(dict.fromkeys([*m.get("failures_by_type", {}), *ended]))
            lines += [f"| {kind} | {m.get('failures_by_type', {}).get(kind, 0)} | {ended.get(kind, 0)} |"
                      for kind in kinds]
        text = "\n".join(lines) + "\n"
        if path is not None:
            _write(path, text)
        return text

    def plot(self, path: str | Path) -> Path:
        """Writes a PNG with five panels: the pass@k curve (k = 1..K), pass@1 by task type (by env when no
        task types), the histogram of episode rewards, failures on any turn by kind, and what ended the
        episodes. Error bars: one standard error over tasks. Returns the path."""
        import matplotlib

        matplotlib.use("Agg")  # headless; must precede pyplot
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 5, figsize=(25, 4.8))
        _curve(axes[0], self.metrics)
        groups = self.metrics.get("per_task_type") or self.metrics.get("per_env", {})
        _bar(axes[1], {name: g["pass@1"] for name, g in groups.items()}, "pass@1 by group (± s.e. over tasks)",
             ylim=(0, 1), errors={name: g.get("pass@1_stderr") for name, g in groups.items()})
        axes[2].hist([r.reward for r in self.records], bins=20, color="tab:blue")
        axes[2].set(title="episode reward", xlabel="reward", ylabel="episodes")
        _bar(axes[3], self.metrics.get("failures_by_type", {}), "failures on any turn (count)", color="tab:orange")
        ended = dict(self.metrics.get("episodes_ended_by", {}))
        ended = {"success": sum(r.success for r in self.records), **ended}
        _bar(axes[4], ended, "what ended each episode (episodes)", color="tab:red")
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path

    def to_transcripts(self, path: str | Path | None = None, num_episodes: int = 20) -> str:
        """Renders a sample of episodes as Markdown: per turn the observation, the action, the reward and any
        failure. The sample takes failed and successful episodes in turn (in record order), at most
        ``num_episodes``. Writes to ``path`` when given; returns the text."""
        failed = [r for r in self.records if not r.success]
        passed = [r for r in self.records if r.success]
        sample = [r for pair in itertools.zip_longest(failed, passed) for r in pair if r is not None][:num_episodes]
        lines = ["# Transcripts", "", (f"{len(sample)} of {len(self.records)} episodes ({len(failed)} failed, "
                 f"{len(passed)} succeeded), failed and successful in turn."), ""]
        for record in sample:
            lines += _transcript(record)
        text = "\n".join(lines) + "\n"
        if path is not None:
            _write(path, text)
        return text

    def save(self, directory: str | Path, num_transcripts: int = 20) -> dict[str, Path]:
        """Writes ``report.json``, ``report.md``, ``transcripts.md`` (``num_transcripts`` episodes; 0 skips it)
        and ``report.png`` into ``directory``; returns their paths."""
        directory = Path(directory)
        paths = {"json": directory / "report.json", "markdown": directory / "report.md", "png": directory / "report.png"}
        self.to_json(paths["json"])
        self.to_markdown(paths["markdown"])
        if num_transcripts > 0:
            paths["transcripts"] = directory / "transcripts.md"
            self.to_transcripts(paths["transcripts"], num_transcripts)
        self.plot(paths["png"])
        return paths


def format_value(value: Any) -> str:
    """Formats a metric for a table: floats to 3 decimals, None as ``-``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _pm(stderr: float | None) -> str:
    return "" if stderr is None else f" ± {stderr:.3f}"


def _transcript(record: EpisodeRecord) -> list[str]:
    outcome = "success" if record.success else f"failed ({record.failure or 'no success'})"
    lines = [(f"## {record.task_id} #{record.sample} ({record.env_id}): {outcome}, reward {record.reward:g}, "
             f"{record.turns} turn(s)"), ""]
    for turn, action in enumerate(record.actions):
        if turn < len(record.observations):
            lines += [f"**observation {turn}**", "", _fence(record.observations[turn]), ""]
        notes = [f"reward {record.step_rewards[turn]:g}"] if turn < len(record.step_rewards) else []
        if turn < len(record.step_failures) and record.step_failures[turn]:
            notes.append(f"failure {record.step_failures[turn]}")
        lines += [f"**action {turn + 1}**" + (f" ({', '.join(notes)})" if notes else ""), "", _fence(action), ""]
    if len(record.observations) > len(record.actions):
        lines += [f"**observation {len(record.actions)}** (last)", "", _fence(record.observations[-1]), ""]
    if record.failures:
        lines += ["**failures**: " + "; ".join(f"{f.get('kind')}: {str(f.get('message', ''))[:200]}"
                                                for f in record.failures), ""]
    return lines


def _fence(text: str) -> str:
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}text\n{text}\n{fence}"


def _curve(axis: Any, metrics: dict[str, Any]) -> None:
    curve = metrics.get("pass@k_curve") or {"1": metrics.get("pass@1", 0.0)}
    stderr = metrics.get("pass@k_curve_stderr") or {}
    ks = [int(j) for j in curve]
    errors = [stderr.get(str(j)) or 0.0 for j in ks]
    axis.errorbar(ks, [curve[str(j)] for j in ks], yerr=errors, marker="o", capsize=3, color="tab:green")
    axis.set(title="pass@k (± s.e. over tasks)", xlabel="k", ylabel="pass@k", ylim=(0, 1.02))
    axis.set_xticks(ks)


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


def _bar(axis: Any, values: dict[str, float], title: str, color: str = "tab:green", ylim: Any = None,
         errors: dict[str, float | None] | None = None) -> None:
    axis.set_title(title)
    if not values:
        axis.text(0.5, 0.5, "none", ha="center", va="center", transform=axis.transAxes)
        return
    names = list(values)
    yerr = [(errors or {}).get(n) or 0.0 for n in names] if errors else None
    bars = axis.bar(range(len(names)), [values[n] for n in names], color=color, yerr=yerr, capsize=3)
    axis.bar_label(bars, fmt="%.3g", fontsize=8)
    axis.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    if ylim is not None:
        axis.set_ylim(*ylim)


def _write(path: str | Path, text: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
