"""Tests of the conformance checker: it passes a correct env and names the broken property of broken ones."""

from __future__ import annotations

import copy
import itertools
import subprocess
from collections.abc import Iterator
from typing import Any, ClassVar

import psutil
import pytest

from rlvr_gym import StepResult, Task
from rlvr_gym.testing import CheckError, EchoEnv, check_env, checks, echo_tasks, temporary_env
from rlvr_gym.testing.checker import ALL_CHECKS

_COUNTER = itertools.count()


class _NonDeterministic(EchoEnv):
    """Says a different word on every step (global counter, not np_random).

    Version History:
        v0: test double.
    """

    def _step(self, action: str) -> StepResult:
        result = super()._step(action)
        return result._replace(observation=f"{result.observation} ({next(_COUNTER)})")


class _LeaksAcrossEpisodes(EchoEnv):
    """Counts episodes in an attribute that reset() never clears, and shows the count.

    Version History:
        v0: test double.
    """

    episodes = 0

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        self.episodes += 1
        observation, info = super()._reset(task)
        return f"{observation} (episode {self.episodes})", info


class _ForkSharesState(EchoEnv):
    """Forks with a shallow copy, so the copy shares the action history list.

    Version History:
        v0: test double.
    """

    max_turns = 5

    def fork(self) -> EchoEnv:
        return copy.copy(self)


class _GoldFails(EchoEnv):
    """Its verifier never rewards anything.

    Version History:
        v0: test double.
    """

    def _step(self, action: str) -> StepResult:
        result = super()._step(action)
        if result.terminated:
            info = {"reward_details": {"value": 0.0, "components": {}, "reason": "bug"}, "success": False}
            return StepResult("Wrong.", 0.0, True, False, info)
        return result


class _WrongScoresMax(EchoEnv):
    """Rewards any ``say``.

    Version History:
        v0: test double.
    """

    def _step(self, action: str) -> StepResult:
        result = super()._step(action)
        if result.terminated:
            return StepResult("Correct.", 1.0, True, False, {"reward_details": {"value": 1.0}, "success": True})
        return result


class _RaisesOnBadAction(EchoEnv):
    """Raises instead of returning an observation on a malformed action.

    Version History:
        v0: test double.
    """

    def _step(self, action: str) -> StepResult:
        if not action.startswith("say "):
            raise ValueError(f"cannot parse {action!r}")
        return super()._step(action)


class _LeaksChild(EchoEnv):
    """Starts a process on reset and never stops it.

    Version History:
        v0: test double.
    """

    started: ClassVar[list[subprocess.Popen[bytes]]] = []

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        type(self).started.append(subprocess.Popen(["sleep", "60"]))
        return super()._reset(task)

    def __deepcopy__(self, memo: dict[int, Any]) -> _LeaksChild:  # Popen objects cannot be deep-copied
        clone = copy.copy(self)
        clone.action_history = list(self.action_history)
        return clone


class _BadInfo(EchoEnv):
    """Lists admissible actions as one string.

    Version History:
        v0: test double.
    """

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        observation, _ = super()._reset(task)
        return observation, {"admissible_actions": "say apple, say bread"}


class _NamelessTool(EchoEnv):
    """Declares a tool without a name.

    Version History:
        v0: test double.
    """

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        observation, _ = super()._reset(task)
        return observation, {"tools": [{"type": "function", "function": {"parameters": {}}}]}


class _CloseTwiceRaises(EchoEnv):
    """``close()`` is not idempotent.

    Version History:
        v0: test double.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.handle: object | None = object()

    def close(self) -> None:
        if self.handle is None:
            raise RuntimeError("already closed")
        self.handle = None


@pytest.fixture
def broken_env(request: pytest.FixtureRequest) -> Iterator[str]:
    env_class = request.param
    with temporary_env(f"testing/Broken{env_class.__name__.lstrip('_')}-v0", env_class, max_turns=3) as env_id:
        yield env_id


def _tasks_for(env_id: str, num_tasks: int = 2) -> list[Task]:
    return [t.model_copy(update={"env_id": env_id}) for t in echo_tasks(num_tasks)]


def test_echo_passes_every_check_on_its_default_suite() -> None:
    report = check_env("testing/Echo-v0")
    assert report.passed and [r.name for r in report.results] == list(ALL_CHECKS)
    assert all(r.status == "passed" for r in report.results), str(report)
    assert report.task_ids == ["echo-test-0", "echo-test-1", "echo-test-2"]
    assert "Gymnasium checks passed" in report.results[0].message


@pytest.mark.parametrize(
    ("broken_env", "failed_check", "problem", "fix"),
    [
        (_NonDeterministic, "seed_determinism", "turn 1:", "self.np_random"),
        (_LeaksAcrossEpisodes, "seed_determinism", "reset observations differ", "global state"),
        (_ForkSharesState, "fork_equivalence", "stepping the fork changed the original", "share mutable state"),
        (_GoldFails, "gold_and_wrong", "gold did not succeed", "fix the verifier"),
        (_WrongScoresMax, "gold_and_wrong", "wrong actions scored 1.0", "less than the maximum"),
        (_RaisesOnBadAction, "malformed_actions", "raised ValueError: cannot parse", "instead of raising"),
        (_CloseTwiceRaises, "close", "a second close() before any reset raised RuntimeError", "idempotent"),
        (_BadInfo, "info_conventions", "admissible_actions is not a list of str", "list of strings"),
        (_NamelessTool, "info_conventions", "a tool schema has no name", "OpenAI function format"),
    ],
    indirect=["broken_env"],
)
def test_broken_env_fails_the_right_check(broken_env: str, failed_check: str, problem: str, fix: str) -> None:
    tasks = _tasks_for(broken_env)
    report = check_env(broken_env, tasks, checks=[failed_check], raise_on_failure=False)
    (result,) = report.results
    assert result.status == "failed" and problem in result.message and fix in result.message, result.message
    with pytest.raises(CheckError, match=rf"{broken_env} failed check '{failed_check}': .*How to fix:"):
        check_env(broken_env, tasks, checks=[failed_check])


@pytest.mark.parametrize("broken_env", [_LeaksChild], indirect=True)
def test_leaked_child_process_is_named(broken_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checks, "CHILD_EXIT_WAIT_S", 0.3)
    try:
        report = check_env(broken_env, _tasks_for(broken_env, 1), checks=["close"], raise_on_failure=False)
    finally:
        for process in _LeaksChild.started:
            process.kill()
            process.wait()
    (result,) = report.results
    assert result.status == "failed" and "child processes still running after close(): pid" in result.message
    assert "sleep 60" in result.message
    assert not [p for p in psutil.Process().children() if p.pid in {q.pid for q in _LeaksChild.started}]


@pytest.mark.parametrize("broken_env", [_RaisesOnBadAction], indirect=True)
def test_full_run_stops_at_first_failure_and_report_lists_all(broken_env: str) -> None:
    tasks = _tasks_for(broken_env)
    with pytest.raises(CheckError) as caught:
        check_env(broken_env, tasks)
    assert caught.value.report.results[-1].status == "failed"
    report = check_env(broken_env, tasks, raise_on_failure=False)
    assert len(report.results) == len(ALL_CHECKS) and not report.passed
    assert {r.name for r in report.failures} >= {"malformed_actions", "gymnasium_api"}
    assert "[ failed] malformed_actions" in str(report)


@pytest.mark.parametrize("broken_env", [EchoEnv], indirect=True)
def test_fork_check_skipped_when_env_cannot_fork(broken_env: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(EchoEnv, "supports_fork", False)
    report = check_env(broken_env, _tasks_for(broken_env), checks=["fork_equivalence"])
    assert report.results[0].status == "skipped" and "supports_fork is False" in report.results[0].message


def test_task_problems_are_clear_errors() -> None:
    with pytest.raises(CheckError, match="none of the checked tasks has gold"):
        no_gold = [t.model_copy(update={"gold": None}) for t in echo_tasks(2)]
        check_env("testing/Echo-v0", no_gold, checks=["gold_and_wrong"])
    with pytest.raises(CheckError, match="none of the 1 given tasks has env_id 'testing/Echo-v0'"):
        check_env("testing/Echo-v0", [Task(id="x", env_id="other/Env-v0")])
    with pytest.raises(ValueError, match="unknown checks \\['nope'\\]"):
        check_env("testing/Echo-v0", checks=["nope"])


@pytest.mark.parametrize("broken_env", [EchoEnv], indirect=True)
def test_missing_default_suite_is_a_clear_error(broken_env: str) -> None:
    with pytest.raises(CheckError, match="has no default_suite.*pass tasks="):
        check_env(broken_env)


def test_missing_suite_file_is_a_check_error() -> None:
    missing = "cannot load its default suite 'testing/does-not-exist'.*How to fix"
    with (temporary_env("testing/NoSuiteFile-v0", EchoEnv, default_suite="testing/does-not-exist") as env_id,
          pytest.raises(CheckError, match=missing)):
        check_env(env_id)


# -- plausible-but-wrong and invalid-Unicode actions ----------------------------------------------------------
class _GuessRaisesOnUnknownNumbers(EchoEnv):
    """``guess N`` looks N up in a table of hints that only holds the gold guesses: ``guess 1`` raises KeyError.

    Version History:
        v0: test double.
    """

    HINTS: ClassVar[dict[int, str]] = {42: "correct", 50: "lower"}

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        return "Guess a number: `guess N`.", {}

    def _step(self, action: str) -> StepResult:
        words = action.split()
        if len(words) != 2 or words[0] != "guess" or not words[1].isdigit():
            return super()._step("not a say")  # a parse error, as EchoEnv reports it
        hint = self.HINTS[int(words[1])]
        ok = hint == "correct"
        info = {"reward_details": {"value": float(ok), "components": {}, "reason": hint}, "success": ok}
        return StepResult(hint, float(ok), ok, False, info if ok else {})


class _ToolRaisesOnWrongTypes(EchoEnv):
    """Declares an ``add(a: int, b: int)`` tool and computes ``a + b`` from the raw JSON without validation.

    Version History:
        v0: test double.
    """

    TOOLS: ClassVar[list[dict[str, Any]]] = [{"type": "function", "function": {"name": "add", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}, "required": ["a", "b"]}}}]

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        observation, info = super()._reset(task)
        return observation, {**info, "tools": self.TOOLS}

    def _step(self, action: str) -> StepResult:
        if action.startswith("<tool_call>") and action.endswith("</tool_call>"):
            import json

            call = json.loads(action.removeprefix("<tool_call>").removesuffix("</tool_call>"))
            return StepResult(str(call["arguments"]["a"] + call["arguments"]["b"]), 0.0, False, False, {})
        return super()._step(action)


class _RaisesOnSurrogates(EchoEnv):
    """Encodes every action as UTF-8, which raises on a lone surrogate: it overrides ``step`` itself, so the base
    class's guard (a lone surrogate is a parse error before ``_step`` sees it) does not shield it.

    Version History:
        v0: test double.
    """

    def step(self, action: str) -> StepResult:  # type: ignore[override]
        action.encode("utf-8")
        return super().step(action)


def _guess_task() -> Task:
    return Task(id="guess-0", env_id="testing/Guess-v0", gold=["guess 50", "guess 42"], split="test")


def test_env_raising_on_a_plausible_guess_fails_naming_the_action() -> None:
    with temporary_env("testing/Guess-v0", _GuessRaisesOnUnknownNumbers, max_turns=4) as env_id:
        report = check_env(env_id, [_guess_task()], raise_on_failure=False)
    failed = {r.name: r.message for r in report.failures}
    assert list(failed) == ["malformed_actions"], str(report)  # the other eight checks pass
    assert "KeyError" in failed["malformed_actions"] and "gold 'guess 50': id" in failed["malformed_actions"]


def test_env_raising_on_wrongly_typed_tool_arguments_fails() -> None:
    with temporary_env("testing/AddTool-v0", _ToolRaisesOnWrongTypes, max_turns=3) as env_id:
        tasks = [t.model_copy(update={"env_id": env_id}) for t in echo_tasks(1)]
        with pytest.raises(CheckError, match=r"malformed_actions.*tool 'add'"):
            check_env(env_id, tasks, checks=["malformed_actions"])


def test_lone_surrogates_fail_a_raising_env_and_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    with temporary_env("testing/Surrogates-v0", _RaisesOnSurrogates, max_turns=3) as env_id:
        tasks = [t.model_copy(update={"env_id": env_id}) for t in echo_tasks(1)]
        with pytest.raises(CheckError, match=r"UnicodeEncodeError.*lone surrogate"):
            check_env(env_id, tasks, checks=["malformed_actions"])
        report = check_env(env_id, tasks, checks=["malformed_actions"], surrogates=False)
        assert report.passed and "lone surrogates not sent" in report.results[0].message
        monkeypatch.setenv("RLVR_GYM_CHECK_SURROGATES", "0")
        assert check_env(env_id, tasks, checks=["malformed_actions"]).passed


def test_plausible_actions_mutate_admissible_gold_and_tools() -> None:
    import numpy as np

    from rlvr_gym.testing import fuzz

    info = {"admissible_actions": ["take apple 1 from fridge 1"], "tools": _ToolRaisesOnWrongTypes.TOOLS}
    actions = fuzz.plausible_actions(info, ["guess 42"], np.random.default_rng(0), limit=100)
    texts = set(actions.values())
    assert {"take apple 999999 from fridge 1", "take apple 1 from fridge zzunknown", "take apple 1 ", "guess 1",
            "guess -1"} <= texts
    assert any("wrong argument types" in key for key in actions) and any("truncated" in key for key in actions)
    assert len(fuzz.plausible_actions(info, ["guess 42"], np.random.default_rng(0), limit=5)) == 5
