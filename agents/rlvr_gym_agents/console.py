"""Console output of a training run: progress bars (tqdm), notes and the before/after table."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rlvr_gym.tracking import progress_bar


class Console:
    """Prints progress to stderr and results to stdout.

    Args:
        progress: show progress bars and status lines (results are always printed).
    """

    def __init__(self, progress: bool = True) -> None:
        self.progress_enabled = progress
        self.began = time.monotonic()

    def note(self, message: str) -> None:
        """Prints a timestamped line to stderr."""
        print(f"[{time.monotonic() - self.began:7.1f}s] {message}", file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def status(self, message: str) -> Iterator[None]:
        """Notes the start and the duration of a stage."""
        began = time.monotonic()
        if self.progress_enabled:
            self.note(f"{message} ...")
        yield
        if self.progress_enabled:
            self.note(f"{message}: done in {time.monotonic() - began:.1f} s")

    @contextlib.contextmanager
    def progress(self, total: int, description: str) -> Iterator[Callable[..., None]]:
        """A bar over ``total`` steps; yields ``advance(**postfix)``."""
        # a redrawn bar in a terminal, a plain line now and then in a log (rlvr_gym.tracking.progress_bar)
        bar = progress_bar(total, desc=description, enabled=self.progress_enabled, file=sys.stderr)

        def advance(**postfix: Any) -> None:
            bar.update(1)
            bar.set_postfix({k: f"{v:.3f}" if isinstance(v, float) else v for k, v in postfix.items()}, refresh=False)

        try:
            yield advance
        finally:
            bar.close()

    def step(self, step: int, num_steps: int, record: dict[str, Any]) -> None:
        """One line per RL step."""
        if self.progress_enabled:
            self.note(f"RL step {step}/{num_steps}: success {record['success_rate']:.2f}, "
                      f"reward {record['reward_mean']:.2f}, groups kept {record['groups_kept']}, "
                      f"turns {record['turns_mean']:.1f}, {record['step_s']:.1f} s")

    def side_by_side(self, before: dict[str, Any], after: dict[str, Any], run_dir: Path) -> None:
        """Prints the held-out evaluations before and after RL in one table (stdout)."""
        k = before["k"]
        rows = [("pass@1 (sampled, T=1.0)", "pass@1_sampled"), (f"pass@{k} (sampled)", f"pass@{k}_sampled"),
                ("pass@1 (greedy)", "pass@1_greedy"), ("mean turns (sampled)", "mean_turns_sampled")]
        print(f"\nHeld-out evaluation: {before['num_tasks']} tasks, k={k}")
        print(f"{'metric':<26}{'SFT warm start':>16}{'after RL':>12}{'delta':>10}")
        for label, key in rows:
            b, a = before.get(key), after.get(key)
            if b is None or a is None:
                continue
            print(f"{label:<26}{b:>16.3f}{a:>12.3f}{a - b:>+10.3f}")
        print(f"run directory: {run_dir} (metrics.jsonl, learning_curve.png, summary.json, checkpoint/)")
