"""Atomic checkpoints: a run killed anywhere (during RL, or inside ``save_checkpoint``) and rerun in the same
``output.dir`` resumes from its last complete checkpoint, with no manual clean-up, and its ``metrics.jsonl`` holds
every RL step exactly once.

The kills inside a save are simulated in-process at each point of :func:`save_checkpoint` (an exception raised where
the process would die leaves the same files), and done for real with SIGKILL on a training subprocess stalled at two
of those points by a test-side wrapper script.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from rlvr_gym_agents import run_io
from rlvr_gym_agents.cli import train_main
from rlvr_gym_agents.policy import TransformersPolicy
from rlvr_gym_agents.run_io import MetricsLogger, load_checkpoint, recover_checkpoint, save_checkpoint

from rlvr_gym import TaskSuite
from rlvr_gym.testing.toy import echo_tasks

NUM_STEPS = 6

# Runs the CLI with one point of save_checkpoint stalled (a marker file says when), so the test can SIGKILL it there.
STALLING_CLI = '''
import pathlib, sys, time
from rlvr_gym_agents import cli, run_io

point, nth, marker = sys.argv[1], int(sys.argv[2]), pathlib.Path(sys.argv[3])
seen = {"count": 0}


def stall_on_nth():
    seen["count"] += 1
    if seen["count"] == nth:
        marker.write_text(point)
        time.sleep(600)


if point == "model":  # the new checkpoint's model files are written, its trainer_state.pt not yet
    save_model_dir = run_io.save_model_dir

    def stalling_save_model_dir(path, model, tokenizer):
        save_model_dir(path, model, tokenizer)
        if path.name == "checkpoint.tmp":
            stall_on_nth()

    run_io.save_model_dir = stalling_save_model_dir
elif point == "swap":  # the previous checkpoint is renamed to checkpoint.old, checkpoint.tmp not yet renamed
    rename = pathlib.Path.rename

    def stalling_rename(self, target):
        result = rename(self, target)
        if self.name == "checkpoint" and pathlib.Path(target).name == "checkpoint.old":
            stall_on_nth()
        return result

    pathlib.Path.rename = stalling_rename
raise SystemExit(cli.train_main(sys.argv[4:]))
'''


def _overrides(tiny_model_dir: Path, tmp_path: Path) -> list[str]:
    """A flat-sampler Echo run of ``NUM_STEPS`` RL steps with a checkpoint every 2 (about a second a step)."""
    TaskSuite("train", echo_tasks(8, "train")).save(tmp_path / "train.jsonl")
    TaskSuite("test", echo_tasks(4, "test")).save(tmp_path / "test.jsonl")
    (tmp_path / "recipe.yaml").write_text("seed: 3\n", encoding="utf-8")
    return [str(tmp_path / "recipe.yaml"), f"model.path_or_id={tiny_model_dir}", "env.env_id=testing/Echo-v0",
            f"env.train_suite={tmp_path / 'train.jsonl'}", f"env.test_suite={tmp_path / 'test.jsonl'}",
            "sft.enabled=false", "rollout.max_new_tokens=4", "train.tasks_per_step=2", "train.group_size=4",
            "algorithm.drop_zero_variance_groups=false", f"train.num_steps={NUM_STEPS}", "train.checkpoint_every=2",
            "eval.num_tasks=2", "eval.k=1", "eval.greedy=false", f"output.dir={tmp_path / 'run'}",
            "output.progress=false", "output.tensorboard=false", "model.num_threads=1"]


def _records(run: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def _rl_lines(run: Path) -> int:
    path = run / "metrics.jsonl"
    return path.read_text(encoding="utf-8").count('"phase": "rl"') if path.is_file() else 0


def _start(argv: list[str], tmp_path: Path) -> subprocess.Popen[bytes]:
    log = (tmp_path / "killed_run.log").open("wb")
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)


def _kill_when(process: subprocess.Popen[bytes], ready: Callable[[], bool], tmp_path: Path, what: str) -> None:
    """SIGKILLs ``process`` once ``ready()``; fails if it ended (or took over 5 minutes) before that."""
    deadline = time.monotonic() + 300
    while not ready():
        log = (tmp_path / "killed_run.log").read_text(errors="replace")[-3000:]
        assert process.poll() is None, f"the run ended before {what}:\n{log}"
        assert time.monotonic() < deadline, f"no {what} after 5 minutes:\n{log}"
        time.sleep(0.05)
    os.kill(process.pid, signal.SIGKILL)
    assert process.wait(timeout=60) == -signal.SIGKILL


def _assert_resumed_and_complete(run: Path, output: str, resumed_at: int) -> None:
    """The rerun resumed at ``resumed_at`` (not from 0), left no temporary checkpoint, and logged each step once."""
    assert f"resumed from {run / 'checkpoint'} at RL step {resumed_at}" in output
    records = _records(run)
    assert [r["step"] for r in records if r["phase"] == "rl"] == list(range(1, NUM_STEPS + 1))
    assert [r["step"] for r in records if r["phase"] == "eval"] == [0, NUM_STEPS]  # before RL once, after once
    assert sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint")) == ["checkpoint"]
    assert torch.load(run / "checkpoint" / "trainer_state.pt", weights_only=False)["step"] == NUM_STEPS


def test_a_run_killed_during_rl_resumes_without_losing_or_repeating_a_step(
        tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = _overrides(tiny_model_dir, tmp_path)
    run = tmp_path / "run"
    killed = _start([sys.executable, "-m", "rlvr_gym_agents.cli", *argv], tmp_path)
    _kill_when(killed, lambda: _rl_lines(run) >= 3, tmp_path, "3 RL steps")
    assert train_main(argv) == 0
    output = capsys.readouterr().err  # the console's notes
    # killed in step 4 (the step-2 checkpoint is the last) or, on a slow poll, later (the step-4 one)
    note = next(line for line in output.splitlines() if "resumed from" in line)
    resumed_at = int(note.rsplit(" ", 1)[1])
    assert resumed_at in (2, 4)
    _assert_resumed_and_complete(run, output, resumed_at)


@pytest.mark.slow  # two training runs each (~15 s on an idle 2-core machine, ~45 s under load); in-process below
@pytest.mark.parametrize(("point", "resumed_at"), [("model", 2), ("swap", 4)])
def test_a_run_killed_inside_save_checkpoint_resumes_from_the_last_complete_one(
        tiny_model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], point: str, resumed_at: int) -> None:
    """SIGKILL while the step-4 checkpoint is saved: with its files half written ("model") the step-2 checkpoint is
    the last complete one; with the step-2 one already renamed to checkpoint.old ("swap") the step-4 one is."""
    argv = _overrides(tiny_model_dir, tmp_path)
    run, marker = tmp_path / "run", tmp_path / "in_save"
    (tmp_path / "stalling_cli.py").write_text(STALLING_CLI, encoding="utf-8")
    nth = 3 if point == "model" else 2  # saves: step 0, 2, 4; the step-0 save has no previous one to rename
    killed = _start([sys.executable, str(tmp_path / "stalling_cli.py"), point, str(nth), str(marker), *argv],
                    tmp_path)
    _kill_when(killed, marker.is_file, tmp_path, f"a stall at {point!r}")
    leftovers = sorted(p.name for p in run.iterdir() if p.name.startswith("checkpoint"))
    assert leftovers == (["checkpoint", "checkpoint.tmp"] if point == "model" else ["checkpoint.old", "checkpoint.tmp"])
    assert train_main(argv) == 0
    _assert_resumed_and_complete(run, capsys.readouterr().err, resumed_at)


# -- each point of save_checkpoint, in-process --------------------------------------------------------------------


class SimulatedKill(BaseException):
    """Raised where the process would die (a BaseException, so no ``except Exception`` of the code under test
    catches it)."""


def _save(policy: TransformersPolicy, optimizer: torch.optim.Optimizer, path: Path, step: int) -> None:
    save_checkpoint(path, policy.model, policy.tokenizer, optimizer, step, policy.generator, {"metrics_lines": step})


def _kill_at(point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes the next ``save_checkpoint`` die at ``point``."""
    if point == "model files":
        save_model_dir = run_io.save_model_dir

        def half_save(path: Path, model: torch.nn.Module, tokenizer: object) -> None:
            save_model_dir(path, model, tokenizer)
            (path / "model.safetensors").write_bytes(b"\0" * 10)  # a weights file cut short
            raise SimulatedKill

        monkeypatch.setattr(run_io, "save_model_dir", half_save)
        return
    if point == "checkpoint.old removal":
        remove_tree = run_io._remove_tree

        def die_removing(path: Path) -> None:
            if path.name == "checkpoint.old" and path.is_dir():
                (path / "config.json").unlink()  # part of it is gone
                raise SimulatedKill
            remove_tree(path)

        monkeypatch.setattr(run_io, "_remove_tree", die_removing)
        return
    renames = ["trainer_state.pt.part", "checkpoint", "checkpoint.tmp"]  # the source of each rename, in order
    rename = Path.rename

    def die_before(self: Path, target: str | Path) -> Path:
        if self.name == renames[["trainer_state rename", "old rename", "tmp rename"].index(point)]:
            raise SimulatedKill
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", die_before)


@pytest.mark.parametrize(("point", "resumed_at"), [
    ("model files", 2),  # checkpoint.tmp half written
    ("trainer_state rename", 2),  # checkpoint.tmp complete but trainer_state.pt still .part
    ("old rename", 2),  # checkpoint.tmp complete, checkpoint the previous one
    ("tmp rename", 4),  # checkpoint gone, checkpoint.old the previous, checkpoint.tmp complete
    ("checkpoint.old removal", 4),  # the new checkpoint in place, checkpoint.old half removed
])
def test_a_save_killed_at_each_point_leaves_a_complete_checkpoint(
        tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, point: str, resumed_at: int) -> None:
    policy = TransformersPolicy.from_pretrained(str(tiny_model_dir), seed=0)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-3)
    path = tmp_path / "checkpoint"
    _save(policy, optimizer, path, 2)
    with monkeypatch.context() as patch:
        _kill_at(point, patch)
        with pytest.raises(SimulatedKill):
            _save(policy, optimizer, path, 4)
    fresh = TransformersPolicy.from_pretrained(str(tiny_model_dir), seed=1)
    fresh_optimizer = torch.optim.AdamW(fresh.model.parameters(), lr=1e-3)
    assert load_checkpoint(path, fresh.model, fresh_optimizer, fresh.generator) == (resumed_at,
                                                                                   {"metrics_lines": resumed_at})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    _save(policy, optimizer, path, 6)  # the next save neither crashes (Errno 39) nor starts over
    assert torch.load(path / "trainer_state.pt", weights_only=False)["step"] == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert TransformersPolicy.from_pretrained(str(path)).model.config.model_type == "qwen2"


def test_a_leftover_checkpoint_old_alone_is_used(tiny_model_dir: Path, tmp_path: Path) -> None:
    """The state of the issue (a kill left only checkpoint.old): it is the last complete checkpoint, not a blocker."""
    policy = TransformersPolicy.from_pretrained(str(tiny_model_dir), seed=0)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-3)
    _save(policy, optimizer, tmp_path / "checkpoint", 2)
    (tmp_path / "checkpoint").rename(tmp_path / "checkpoint.old")
    (tmp_path / "checkpoint.tmp").mkdir()  # and an empty, incomplete new one
    recover_checkpoint(tmp_path / "checkpoint")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
    assert torch.load(tmp_path / "checkpoint" / "trainer_state.pt", weights_only=False)["step"] == 2
    _save(policy, optimizer, tmp_path / "checkpoint", 4)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]


def test_a_checkpoints_files_are_on_disk_before_it_is_renamed_into_place(
        tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every file and directory of checkpoint.tmp is fsynced before the renames publish it, the parent after."""
    policy = TransformersPolicy.from_pretrained(str(tiny_model_dir), seed=0)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-3)
    _save(policy, optimizer, tmp_path / "checkpoint", 2)
    events: list[tuple[str, str]] = []
    fsync, rename, open_ = os.fsync, Path.rename, os.open
    names: dict[int, str] = {}

    def recording_open(path: str | Path, flags: int, *args: int) -> int:
        fd = open_(path, flags, *args)
        names[fd] = str(Path(path).relative_to(tmp_path))
        return fd

    def recording_fsync(fd: int) -> None:
        events.append(("fsync", names.get(fd, "?")))
        fsync(fd)

    def recording_rename(self: Path, target: str | Path) -> Path:
        events.append(("rename", str(self.relative_to(tmp_path))))
        return rename(self, target)

    monkeypatch.setattr(os, "open", recording_open)
    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(Path, "rename", recording_rename)
    _save(policy, optimizer, tmp_path / "checkpoint", 4)
    monkeypatch.undo()
    synced = [name for kind, name in events if kind == "fsync"]
    first_publish = events.index(("rename", "checkpoint"))  # the old checkpoint steps aside
    files = {str(p.relative_to(tmp_path)).replace("checkpoint/", "checkpoint.tmp/", 1)
             for p in (tmp_path / "checkpoint").rglob("*") if p.is_file()}
    files.discard("checkpoint.tmp/trainer_state.pt")
    before = {name for kind, name in events[:first_publish] if kind == "fsync"}
    assert files | {"checkpoint.tmp/trainer_state.pt.part", "checkpoint.tmp"} <= before
    assert synced[-1] == "." and events[-1] == ("fsync", ".")  # the parent, after the renames
    assert torch.load(tmp_path / "checkpoint" / "trainer_state.pt", weights_only=False)["step"] == 4


def test_truncating_the_log_keeps_the_first_records(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path, trackers=())
    for step in range(5):
        logger.log({"phase": "rl", "step": step})
    with (tmp_path / "metrics.jsonl").open("a", encoding="utf-8") as handle:
        handle.write('{"phase": "rl", "st')  # a line cut short by a kill
    logger.truncate(3)
    assert [r["step"] for r in logger.read()] == [0, 1, 2] and logger.num_lines() == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl"]


def test_a_float16_run_keeps_its_loss_scale_across_a_resume(tiny_model_dir: Path, tmp_path: Path) -> None:
    """``model.dtype=float16`` (fp32 master weights, float16 autocast): the checkpoint holds the loss scaler's state
    and a resumed run continues it (its count of overflow-free steps goes on from the checkpoint's instead of
    restarting at 0, as a fresh scaler's would)."""
    argv = [*_overrides(tiny_model_dir, tmp_path), "model.dtype=float16"]
    assert train_main(argv) == 0

    def scaler_state() -> dict[str, float]:
        state = torch.load(tmp_path / "run" / "checkpoint" / "trainer_state.pt", weights_only=False)
        return dict(state["extra"]["loss_scaler"])

    first = scaler_state()
    assert first["scale"] == 2.0**16
    per_step, rest = divmod(int(first["_growth_tracker"]), NUM_STEPS)  # optimizer steps per RL step, none skipped
    assert per_step >= 1 and rest == 0
    assert train_main([*argv, f"train.num_steps={NUM_STEPS + 2}"]) == 0
    assert scaler_state()["_growth_tracker"] == per_step * (NUM_STEPS + 2)
