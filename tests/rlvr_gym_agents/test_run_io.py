"""The run's metrics log mirrors its scalars to the trackers of rlvr_gym.tracking."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rlvr_gym_agents.config import ConfigError, load_config
from rlvr_gym_agents.run_io import MetricsLogger, read_metrics


def test_metrics_reach_tensorboard_as_phase_slash_key(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = MetricsLogger(tmp_path, ["tensorboard"], config={"seed": 3})
    logger.log({"phase": "rl", "step": 3, "reward_mean": 0.5, "groups_kept": 2, "note": "text is skipped"})
    logger.log({"phase": "eval", "step": 3, "pass@1_sampled": 0.25})
    logger.close()
    assert [json.loads(line)["phase"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == \
        ["rl", "eval"]
    events = EventAccumulator(str(tmp_path / "tensorboard")).Reload()
    tags = set(events.Tags()["scalars"]) | set(events.Tags().get("tensors", []))
    assert {"rl/reward_mean", "rl/groups_kept", "eval/pass@1_sampled"} <= tags
    assert not any("note" in tag for tag in tags)


def _tensorboard_values(directory: Path, tag: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    events = EventAccumulator(str(directory)).Reload()
    return [(e.step, round(float(tensor_util.make_ndarray(e.tensor_proto)), 6)) for e in events.Tensors(tag)]


def test_a_resumed_run_writes_each_step_once_to_tensorboard(tmp_path: Path) -> None:
    """The log cut back to the checkpoint cuts TensorBoard's events too: the steps written again after a resume
    are not shown twice (TensorBoard itself keeps both copies)."""
    logger = MetricsLogger(tmp_path, ["tensorboard"])
    logger.log({"phase": "sft", "step": 0, "loss": 2.0})
    for step in (1, 2, 3):
        logger.log({"phase": "rl", "step": step, "success_rate": step / 10})
    logger.close()
    resumed = MetricsLogger(tmp_path, ["tensorboard"])  # killed after step 3, its checkpoint at step 1
    resumed.truncate(2)
    for step in (2, 3):
        resumed.log({"phase": "rl", "step": step, "success_rate": step / 10 + 0.5})
    resumed.close()
    assert _tensorboard_values(tmp_path / "tensorboard", "rl/success_rate") == [(1, 0.1), (2, 0.7), (3, 0.8)]
    assert _tensorboard_values(tmp_path / "tensorboard", "sft/loss") == [(0, 2.0)]
    assert [r["step"] for r in read_metrics(tmp_path)] == [0, 1, 2, 3]


def test_an_unknown_tracker_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="unknown output.trackers"):
        load_config(None, ["output.trackers=[wandbb]"])


def test_read_metrics_gives_back_what_the_logger_wrote(tmp_path: Path) -> None:
    assert read_metrics(tmp_path) == []  # no log yet
    logger = MetricsLogger(tmp_path, [])
    records = [{"phase": "sft", "step": 0, "elapsed_s": 1.5}, {"phase": "rl", "step": 1, "success_rate": 0.25}]
    for record in records:
        logger.log(record)
    logger.truncate(1)  # as a resumed run cuts its log back to its checkpoint
    assert read_metrics(tmp_path) == records[:1] == logger.read()
