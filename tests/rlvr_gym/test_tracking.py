"""Trackers write what the real back-ends read back; progress bars stay quiet in logs."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest

from rlvr_gym.tracking import JsonlTracker, Tracker, make_tracker, progress_bar

CONFIG = {"seed": 3, "algorithm": {"loss": "ppo_clip"}}


def _log_three_steps(tracker: Tracker) -> None:
    for step in range(3):
        tracker.log({"eval/pass@1": 0.25 * step, "note": "text is skipped by scalar back-ends"}, step=step)


def test_jsonl_tracker(tmp_path: Path) -> None:
    tracker = make_tracker(["jsonl"], tmp_path, config=CONFIG)
    _log_three_steps(tracker)
    tracker.close()
    tracker.close()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [line["eval/pass@1"] for line in lines] == [0.0, 0.25, 0.5] and lines[0]["note"].startswith("text")
    assert json.loads((tmp_path / "config.json").read_text()) == CONFIG
    assert isinstance(JsonlTracker(tmp_path / "x"), Tracker)


def test_tensorboard_tracker_is_read_back_by_tensorboard(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tracker = make_tracker(["tensorboard"], tmp_path, config=CONFIG)
    _log_three_steps(tracker)
    tracker.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    tags = events.Tags()
    scalars = events.Tensors("eval/pass@1") if "eval/pass@1" in tags.get("tensors", []) else None
    assert scalars is not None, tags
    from tensorboard.util import tensor_util

    assert [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in scalars] == [(0, 0.0), (1, 0.25),
                                                                                              (2, 0.5)]
    assert "note" not in tags.get("tensors", [])


def test_mlflow_tracker_is_read_back_by_mlflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    tracker = make_tracker(["mlflow"], tmp_path, project="tests", config=CONFIG)
    mlflow_tracker = tracker.trackers[0]
    run_id, client = mlflow_tracker.run_id, mlflow_tracker.client  # type: ignore[attr-defined]
    _log_three_steps(tracker)
    tracker.close()
    history = client.get_metric_history(run_id, "eval/pass_at_1")
    assert [(m.step, m.value) for m in history] == [(0, 0.0), (1, 0.25), (2, 0.5)]
    run = client.get_run(run_id)
    assert run.data.params == {"seed": "3", "algorithm.loss": "ppo_clip"} and run.info.status == "FINISHED"


def test_wandb_tracker_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    tracker = make_tracker(["wandb"], tmp_path, project="tests", config=CONFIG)
    run = tracker.trackers[0].run  # type: ignore[attr-defined]
    _log_three_steps(tracker)
    assert run.config["seed"] == 3 and run.summary["eval/pass@1"] == 0.5 and "note" not in list(run.summary.keys())
    tracker.close()
    wandb.teardown()  # stops the wandb-core service, which would outlive the test as a child of pytest
    assert list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))


def test_unknown_tracker_names_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="jsonl, tensorboard, wandb, mlflow"):
        make_tracker(["neptune"], tmp_path)


def test_progress_bar_in_a_log_prints_few_whole_lines() -> None:
    log = io.StringIO()
    with progress_bar(2000, desc="episodes", unit="ep", file=log, log_interval_s=0.05) as bar:
        for _ in range(2000):
            bar.update(1)
            time.sleep(0.0002)
    text = log.getvalue()
    assert "\r" not in text and text.endswith("\n")
    lines = text.splitlines()
    assert 2 <= len(lines) <= 30 and lines[-1].startswith("episodes: 2000/2000 (100%)")


def test_progress_bar_disabled_is_silent() -> None:
    log = io.StringIO()
    with progress_bar(5, file=log, enabled=False) as bar:
        bar.update(5)
    assert log.getvalue() == ""
