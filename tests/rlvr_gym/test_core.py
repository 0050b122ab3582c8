"""Tests of the env contract, registry and tasks."""

from __future__ import annotations

import pytest

import rlvr_gym
from rlvr_gym import FailureKind, StepResult, Task, TaskFileError, TaskSuite, TextSpace, UnknownEnvError
from rlvr_gym.testing import echo_tasks


def test_text_space_accepts_any_str() -> None:
    space = TextSpace(max_length=20)
    assert space.contains("go to desk 1: ✓")
    assert not space.contains(b"bytes")
    assert not space.contains("x" * 21)
    assert space.contains(space.sample())


def test_step_result_unpacks_like_gymnasium() -> None:
    obs, reward, terminated, truncated, info = StepResult("o", 1.0, True, False, {"k": 1})
    assert (obs, reward, terminated, truncated, info) == ("o", 1.0, True, False, {"k": 1})


def test_echo_episode_gold_and_malformed_action() -> None:
    env = rlvr_gym.make("testing/Echo-v0")
    task = echo_tasks(1)[0]
    obs, info = env.reset(options={"task": task})
    assert "apple" in obs and info["task_id"] == task.id and info["turn"] == 0
    bad = env.step("hello")
    assert not bad.terminated and bad.info["failure"].kind is FailureKind.PARSE_ERROR
    assert "say <word>" in bad.observation
    good = env.step("say apple")
    assert good.terminated and good.reward == 1.0 and good.info["turn"] == 2


def test_turn_limit_truncates_with_typed_failure() -> None:
    env = rlvr_gym.make("testing/Echo-v0", max_turns=2)
    env.reset(options={"task": echo_tasks(1)[0]})
    env.step("x")
    result = env.step("y")
    assert result.truncated and not result.terminated
    assert result.info["failure"].kind is FailureKind.TURN_LIMIT
    with pytest.raises(RuntimeError, match="episode ended"):
        env.step("say apple")


def test_fork_is_independent() -> None:
    env = rlvr_gym.make("testing/Echo-v0")
    env.reset(options={"task": echo_tasks(1)[0]})
    child = env.fork()
    assert child.step("say apple").reward == 1.0
    assert env.step("say bread").reward == 0.0
    replayed = env.fork_by_replay()
    assert replayed.action_history == env.action_history


def test_unknown_env_names_closest_ids() -> None:
    with pytest.raises(UnknownEnvError, match=r"testing/Echo-v0"):
        rlvr_gym.make("testing/Ecco-v0")


def test_register_rejects_bad_id() -> None:
    with pytest.raises(ValueError, match="family/Name-v0"):
        rlvr_gym.register("NoFamily-v0", "x:y")


def test_suite_round_trip_and_bad_line(tmp_path) -> None:
    suite = TaskSuite("echo", echo_tasks(3))
    path = suite.save(tmp_path / "echo.jsonl")
    assert [t.id for t in TaskSuite.load(path)] == [t.id for t in suite]
    lines = path.read_text().splitlines()
    lines.insert(1, '{"id": "x", "env_id": "not an id"}')
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(TaskFileError, match=r"echo.jsonl:2: invalid task \(env_id"):
        TaskSuite.load(path)
    path.write_text('{"id": "x",\n')
    with pytest.raises(TaskFileError, match=r"echo.jsonl:1: not valid JSON"):
        TaskSuite.load(path)


def test_task_seed_drives_reset() -> None:
    task = Task(id="t", env_id="testing/Echo-v0", options={"seed": 5})
    a, b = rlvr_gym.make("testing/Echo-v0"), rlvr_gym.make("testing/Echo-v0")
    assert a.reset(options={"task": task})[0] == b.reset(options={"task": task})[0]


def test_load_suite_searches_user_folders_beside_shipped_ones(tmp_path, monkeypatch) -> None:
    from rlvr_gym import load_suite

    TaskSuite("mine", echo_tasks(2)).save(tmp_path / "mygames" / "mine.jsonl")
    monkeypatch.setenv("RLVR_GYM_TASKS", str(tmp_path))
    assert len(load_suite("mygames/mine")) == 2
    assert len(load_suite("testing/echo")) == 8  # shipped suites are still found
    with pytest.raises(FileNotFoundError, match=r"suites of 'mygames': mygames/mine"):
        load_suite("mygames/other")
    with pytest.raises(FileNotFoundError, match=r"suite file .*nope.jsonl not found"):
        load_suite(tmp_path / "nope.jsonl")
    (tmp_path / "notjson.txt").write_text("x\n")
    with pytest.raises(TaskFileError, match=r"notjson.txt:1: not valid JSON"):
        load_suite(tmp_path / "notjson.txt")
