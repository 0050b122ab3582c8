"""Tests of the evaluation harness: pass@k, summarize, evaluate, reports."""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest

import rlvr_gym
from rlvr_gym import Failure, FailureKind, StepResult, Task
from rlvr_gym.core import Env
from rlvr_gym.evaluation import AGENT_ERROR, EpisodeRecord, evaluate, pass_at_k, summarize
from rlvr_gym.reporting import EvalReport
from rlvr_gym.testing import EchoEnv, echo_tasks
from rlvr_gym.testing.registration import temporary_env


# -- pass@k -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("n", "c", "k", "expected"),
    [
        (5, 2, 1, 0.4),  # c/n
        (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
        (5, 0, 3, 0.0),
        (5, 3, 3, 1.0),  # n - c = 2 < k = 3
        (10, 1, 5, 0.5),  # 1 - C(9,5)/C(10,5) = 1 - 126/252
        (4, 4, 1, 1.0),
    ],
)
def test_pass_at_k_hand_computed(n: int, c: int, k: int, expected: float) -> None:
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_matches_binomial_formula_for_large_n() -> None:
    n, c, k = 200, 7, 10
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_out_of_range(n: int, c: int, k: int) -> None:
    with pytest.raises(ValueError, match="pass_at_k needs"):
        pass_at_k(n, c, k)


# -- summarize ----------------------------------------------------------------------------------------------
def _record(task: str, sample: int, success: bool, **fields: Any) -> EpisodeRecord:
    return EpisodeRecord(task, sample, fields.pop("env_id", "fam/A-v0"), success=success,
                         reward=float(success), **fields)


def test_summarize_hand_made_records() -> None:
    records = [
        # task t1: 1 of 2 correct -> pass@1 0.5, pass@2 1.0
        _record("t1", 0, True, turns=2, task_type="pick"),
        _record("t1", 1, False, turns=4, task_type="pick", truncated=True, failure="turn_limit",
                failures=[{"kind": "parse_error"}, {"kind": "turn_limit"}]),
        # task t2: 0 of 2 -> 0, 0 ; tools declared: 3 calls, 1 invalid over the two episodes
        _record("t2", 0, False, env_id="fam/B-v0", turns=3, tools_declared=True, tool_calls=2, invalid_tool_calls=1,
                failures=[{"kind": "parse_error"}]),
        _record("t2", 1, False, env_id="fam/B-v0", turns=1, tools_declared=True, tool_calls=1),
    ]
    m = summarize(records, k=2)
    assert m["num_tasks"] == 2 and m["num_episodes"] == 4 and m["k"] == 2
    assert m["pass@1"] == pytest.approx(0.25)
    assert m["pass@2"] == pytest.approx(0.5)
    # per-task pass@1 = [0.5, 0.0]: sample std = sqrt(2 * 0.25**2 / 1) = 0.3536, / sqrt(2) = 0.25
    assert m["pass@1_stderr"] == pytest.approx(0.25)
    assert m["pass@2_stderr"] == pytest.approx(0.5)  # per-task pass@2 = [1, 0]
    assert m["mean_reward"] == pytest.approx(0.25)
    assert m["mean_turns"] == pytest.approx(2.5)
    assert m["truncation_rate"] == pytest.approx(0.25)
    assert m["tool_calls_per_episode"] == pytest.approx(1.5)  # only the two tool episodes count
    assert m["invalid_tool_call_rate"] == pytest.approx(1 / 3)
    assert m["failures_by_type"] == {"parse_error": 2, "turn_limit": 1}
    assert m["episodes_ended_by"] == {"turn_limit": 1}
    assert set(m["per_env"]) == {"fam/A-v0", "fam/B-v0"}
    assert m["per_env"]["fam/A-v0"]["pass@1"] == pytest.approx(0.5)
    assert m["per_env"]["fam/A-v0"]["tool_calls_per_episode"] is None
    assert m["per_env"]["fam/A-v0"]["pass@1_stderr"] is None  # one task
    assert m["per_task_type"] == {"pick": m["per_env"]["fam/A-v0"]}


def test_summarize_pass_at_1_weighs_tasks_equally() -> None:
    records = [_record("a", 0, True)] + [_record("b", i, False) for i in range(3)]
    assert summarize(records)["pass@1"] == pytest.approx(0.5)  # not 1/4


def test_summarize_errors() -> None:
    with pytest.raises(ValueError, match="at least one"):
        summarize([])
    with pytest.raises(ValueError, match=r"pass@3 needs >= 3 samples"):
        summarize([_record("a", 0, True)], k=3)


# -- evaluate -----------------------------------------------------------------------------------------------
def _gold_agent(observation: str, info: dict[str, Any]) -> str:
    return "say " + observation.rsplit(" ", 1)[-1]


class _EchoBatchAgent:
    """Says the shown word on odd samples and a wrong word on even ones; records calls."""

    def __init__(self) -> None:
        self.batch_sizes: list[int] = []
        self.ended: list[str] = []

    def act_batch(self, keys: list[str], observations: list[str], infos: list[dict[str, Any]]) -> list[str]:
        self.batch_sizes.append(len(keys))
        words = [obs.rsplit(" ", 1)[-1] for obs in observations]
        return [f"say {w}" if int(key.split("#")[1]) % 2 else "say nothing" for key, w in zip(keys, words)]

    def end_episodes(self, keys: list[str]) -> None:
        self.ended.extend(keys)


def test_evaluate_gold_callable_solves_everything() -> None:
    report = evaluate(_gold_agent, echo_tasks(4), k=2, progress=False)
    assert report.metrics["pass@1"] == 1.0 and report.metrics["pass@2"] == 1.0
    assert [(r.task_id, r.sample) for r in report.records][:3] == [("echo-train-0", 0), ("echo-train-0", 1),
                                                                  ("echo-train-1", 0)]
    assert all(r.turns == 1 and r.terminated and not r.truncated and r.failure is None for r in report.records)
    assert report.records[0].actions == ["say apple"]


def test_evaluate_agent_with_reset_and_turn_limit() -> None:
    class Stubborn:
        def __init__(self) -> None:
            self.tasks: list[str] = []

        def reset(self, task: Task) -> None:
            self.tasks.append(task.id)

        def act(self, observation: str, info: dict[str, Any]) -> str:
            return "hello"

    agent = Stubborn()
    report = evaluate(agent, echo_tasks(2), k=1, progress=False)
    assert agent.tasks == ["echo-train-0", "echo-train-1"]
    record = report.records[0]
    assert record.turns == 3 and record.truncated and not record.success and record.failure == "turn_limit"
    assert [f["kind"] for f in record.failures] == ["parse_error", "parse_error", "turn_limit"]
    assert report.metrics["failures_by_type"] == {"parse_error": 4, "turn_limit": 2}


def test_evaluate_batch_agent_runs_in_lockstep() -> None:
    agent = _EchoBatchAgent()
    report = evaluate(agent, echo_tasks(3), k=4, max_parallel=5, progress=False)
    assert report.metrics["pass@1"] == pytest.approx(0.5)
    assert report.metrics["pass@4"] == pytest.approx(1.0)
    assert max(agent.batch_sizes) == 5 and sum(agent.batch_sizes) == 12
    assert sorted(agent.ended) == sorted(f"echo-train-{t}#{s}" for t in range(3) for s in range(4))


def test_evaluate_crashing_agent_is_recorded() -> None:
    def crash(observation: str, info: dict[str, Any]) -> str:
        raise RuntimeError("policy exploded")

    report = evaluate(crash, echo_tasks(2), progress=False)
    assert all(r.failure == AGENT_ERROR and not r.success for r in report.records)
    assert "policy exploded" in report.records[0].failures[0]["message"]

    class BadBatch:
        def act_batch(self, keys: list[str], observations: list[str], infos: list[dict[str, Any]]) -> list[str]:
            return ["say apple"]  # wrong length when more than one episode is live

    report = evaluate(BadBatch(), echo_tasks(2), progress=False)
    assert report.metrics["episodes_ended_by"] == {AGENT_ERROR: 2}


class _CrashEnv(Env):
    """Raises on its second step, or on reset when the task says so.

    Version History:
        v0: test double.
    """

    closed = 0

    def _reset(self, task: Any) -> tuple[str, dict[str, Any]]:
        if task is not None and task.data.get("crash_on_reset"):
            raise OSError("backend did not start")
        return "Say the word: apple", {}

    def _step(self, action: str) -> StepResult:
        if self.turn >= 2:
            raise RuntimeError("simulator died")
        return StepResult("again", 0.0, False, False, {"failure": Failure(FailureKind.TOOL_ERROR, "meh")})

    def close(self) -> None:
        type(self).closed += 1


@pytest.fixture
def crash_env_id() -> Iterator[str]:
    with temporary_env("testing/CrashForEval-v0", _CrashEnv, max_turns=5) as env_id:
        yield env_id


@pytest.mark.usefixtures("crash_env_id")
@pytest.mark.parametrize("batch", [False, True])
def test_evaluate_crashing_env_is_an_env_crash_record(batch: bool) -> None:
    _CrashEnv.closed = 0
    tasks = [Task(id="c0", env_id="testing/CrashForEval-v0"),
             Task(id="c1", env_id="testing/CrashForEval-v0", data={"crash_on_reset": True}),
             *echo_tasks(1)]
    agent = _EchoBatchAgent() if batch else _gold_agent
    report = evaluate(agent, tasks, k=1, progress=False)
    step_crash, reset_crash, echo = report.records
    assert step_crash.failure == "env_crash" and step_crash.turns == 2
    assert [f["kind"] for f in step_crash.failures] == ["tool_error", "env_crash"]
    assert "simulator died" in step_crash.failures[-1]["message"]
    assert reset_crash.failure == "env_crash" and reset_crash.turns == 0
    assert "backend did not start" in reset_crash.failures[0]["message"]
    assert echo.failure is None
    assert _CrashEnv.closed == 2  # close() even after a crash


def test_evaluate_unknown_env_id_raises_clearly() -> None:
    with pytest.raises(rlvr_gym.UnknownEnvError, match="Closest registered ids: testing/Echo-v0"):
        evaluate(_gold_agent, [Task(id="x", env_id="testing/Echo-v1")], progress=False)


def test_evaluate_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="k and max_parallel"):
        evaluate(_gold_agent, echo_tasks(1), k=0)
    with pytest.raises(ValueError, match="no tasks"):
        evaluate(_gold_agent, [])
    with pytest.raises(TypeError, match="act\\(\\), act_batch\\(\\)"):
        evaluate(object(), echo_tasks(1), progress=False)  # type: ignore[arg-type]


# -- reports ------------------------------------------------------------------------------------------------
def test_report_save_writes_json_markdown_png(tmp_path: Any) -> None:
    tasks = [t.model_copy(update={"metadata": {"task_type": "even" if i % 2 == 0 else "odd"}})
             for i, t in enumerate(echo_tasks(4))]
    report = evaluate(_EchoBatchAgent(), tasks, k=2, progress=False)
    report.config = {"agent": "test", "k": 2}
    paths = report.save(tmp_path / "out")
    payload = json.loads(paths["json"].read_text())
    assert payload["metrics"]["pass@2"] == 1.0 and len(payload["records"]) == 8
    assert EvalReport.from_json(paths["json"]).records == report.records
    markdown = paths["markdown"].read_text()
    assert "| pass@2 | 1.000 ± 0.000 |" in markdown and "## Per task type" in markdown and "| even |" in markdown
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths["png"].stat().st_size > 5000


def test_agent_error_traceback_logged_once_per_run(caplog: pytest.LogCaptureFixture) -> None:
    def crash(observation: str, info: dict[str, Any]) -> str:
        raise RuntimeError("policy exploded")

    with caplog.at_level("ERROR", logger="rlvr_gym.evaluation"):
        evaluate(crash, echo_tasks(3), progress=False)
    assert [r.message for r in caplog.records] == ["the agent raised; its episodes are recorded as 'agent_error' failures"]


class _DictFailureEnv(EchoEnv):
    """Reports failures as dicts, as an env behind a process boundary does.

    Version History:
        v0: test double.
    """

    def _step(self, action: str) -> StepResult:
        info = {"failure": {"kind": "timeout", "message": "page took too long", "details": {}},
                "tool_calls": 2, "invalid_tool_calls": 1}
        return StepResult("slow", 0.0, False, True, info)

    def _reset(self, task: Any) -> tuple[str, dict[str, Any]]:
        observation, info = super()._reset(task)
        return observation, {**info, "tools": [{"type": "function", "function": {"name": "wait"}}]}


def test_custom_env_factory_dict_failures_and_tool_counts() -> None:
    built: list[str] = []

    def factory(env_id: str) -> Env:
        built.append(env_id)
        return _DictFailureEnv()

    report = evaluate(_gold_agent, echo_tasks(2), env_factory=factory, progress=False)
    assert built == ["testing/Echo-v0"] * 2
    record = report.records[0]
    assert record.failure == "timeout" and record.truncated and record.tools_declared
    assert (record.tool_calls, record.invalid_tool_calls) == (2, 1)
    assert report.metrics["invalid_tool_call_rate"] == pytest.approx(0.5)
    assert report.metrics["tool_calls_per_episode"] == pytest.approx(2.0)


class _ThreadRecordingEnv(EchoEnv):
    """Records the thread of every reset and step.

    Version History:
        v0: test double.
    """

    threads: ClassVar[list[int]] = []

    def _reset(self, task: Any) -> tuple[str, dict[str, Any]]:
        type(self).threads.append(threading.get_ident())
        return super()._reset(task)

    def _step(self, action: str) -> StepResult:
        type(self).threads.append(threading.get_ident())
        return super()._step(action)


@pytest.mark.parametrize("env_threads", [False, True])
def test_env_threads_only_when_asked(env_threads: bool) -> None:
    _ThreadRecordingEnv.threads = []
    report = evaluate(_EchoBatchAgent(), echo_tasks(4), k=2, env_factory=lambda env_id: _ThreadRecordingEnv(),
                      max_parallel=4, env_threads=env_threads, progress=False)
    assert report.metrics["pass@1"] == pytest.approx(0.5) and len(_ThreadRecordingEnv.threads) == 16
    off_main = {t for t in _ThreadRecordingEnv.threads if t != threading.get_ident()}
    assert bool(off_main) is env_threads  # in-process envs bound to a thread (Playwright) need False


class _ConcurrentRecordingEnv(_ThreadRecordingEnv):
    concurrent_steps = True


@pytest.mark.parametrize("concurrent", [False, True])
def test_env_threads_by_default_only_for_envs_that_declare_concurrent_steps(concurrent: bool) -> None:
    env_class = _ConcurrentRecordingEnv if concurrent else _ThreadRecordingEnv
    with temporary_env("testing/ThreadRecording-v0", env_class) as env_id:
        assert rlvr_gym.spec(env_id).concurrent_steps is concurrent
        _ThreadRecordingEnv.threads = []
        tasks = [t.model_copy(update={"env_id": env_id}) for t in echo_tasks(4)]
        report = evaluate(_EchoBatchAgent(), tasks, k=2, max_parallel=4, progress=False)
        assert report.metrics["pass@1"] == pytest.approx(0.5) and len(_ThreadRecordingEnv.threads) == 16
        assert bool({t for t in _ThreadRecordingEnv.threads if t != threading.get_ident()}) is concurrent
        _ThreadRecordingEnv.threads = []  # another factory: threads only when asked
        evaluate(_EchoBatchAgent(), tasks, k=1, env_factory=lambda env_id: env_class(), max_parallel=4, progress=False)
        assert {t for t in _ThreadRecordingEnv.threads if t != threading.get_ident()} == set()


def test_sandboxed_families_declare_concurrent_steps_and_in_memory_ones_do_not() -> None:
    assert rlvr_gym.spec("code/HumanEval-v0").concurrent_steps
    assert rlvr_gym.spec("rtl/VerilogEval-v0").concurrent_steps
    assert not rlvr_gym.spec("testing/Echo-v0").concurrent_steps
