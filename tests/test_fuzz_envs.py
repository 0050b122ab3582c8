"""Fuzzing every registered env: malformed actions are observations (typed failures), never exceptions.

Each env gets the fixed corpus of :mod:`rlvr_gym.testing.fuzzer` (truncated JSON, unbalanced brackets, two
calls per turn, unknown tools, wrong types, megabyte strings, NULs, control characters, lone surrogates raw
and as escapes), mutations of its tasks' gold actions, and actions drawn by ``hypothesis``: at least 100
inputs per env. Afterwards no child process of the env may be left. Web envs are in the ``browser`` tier.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rlvr_gym
from rlvr_gym import FailureKind
from rlvr_gym.testing.fuzzer import FIXED_ACTIONS, EnvFuzzer, action_strategy, child_processes, fuzz_env

MIN_INPUTS_PER_ENV = 100


def _env_params() -> list[pytest.ParameterSet]:
    return [pytest.param(s.id, marks=[pytest.mark.browser] if s.family == "web" else [], id=s.id)
            for s in rlvr_gym.list_envs()]


def _wait_for_no_children(before: set[int], timeout_s: float = 3.0) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while (left := child_processes() - before) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.parametrize("env_id", _env_params())
def test_fuzz_finds_no_exception_and_leaves_no_process(env_id: str) -> None:
    before = child_processes()
    drawn: list[str] = []

    @settings(max_examples=12, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(action_strategy(), min_size=1, max_size=4))
    def draw(actions: list[str]) -> None:
        drawn.extend(actions)

    draw()
    # A browser step takes ~0.5 s on a loaded 2-core machine: one task's gold mutations keep it near 100 inputs.
    report = fuzz_env(env_id, extra_actions=drawn, num_tasks=1 if env_id.startswith("web/") else 3)
    assert not report.errors, "\n".join(report.errors)
    assert report.num_actions >= MIN_INPUTS_PER_ENV, report
    assert report.failure_kinds.get("parse_error", 0) > 0, report.failure_kinds
    assert not _wait_for_no_children(before), f"{env_id} left child processes after close()"


@pytest.mark.parametrize("action", ["\ud800", "ok \udfff", "\udc80" * 3])
def test_a_lone_surrogate_is_a_typed_parse_error_that_costs_a_turn(action: str) -> None:
    fuzzer = EnvFuzzer("testing/Echo-v0")
    env = fuzzer.env
    env.reset(options={"task": fuzzer.tasks[0]})
    observation, reward, terminated, _, info = env.step(action)
    fuzzer.close()
    assert info["failure"].kind == FailureKind.PARSE_ERROR
    assert "surrogate" in info["failure"].message and "UTF-8" in info["failure"].message
    assert observation.startswith("Invalid action") and reward == 0.0 and not terminated
    assert env.turn == 1


def test_the_corpus_holds_every_kind_of_input_the_issue_names() -> None:
    corpus = "".join(FIXED_ACTIONS)
    assert "\ud800" in corpus and "\\ud800" in corpus and "\x00" in corpus and "\x1b" in corpus
    assert max(len(a) for a in FIXED_ACTIONS) >= 1_000_000


class _RaisesOnNul(rlvr_gym.Env):
    """A broken env: it raises on a NUL, as the web parser did on a lone surrogate."""

    def _reset(self, task: object) -> tuple[str, dict[str, object]]:
        return "say anything", {}

    def _step(self, action: str) -> rlvr_gym.StepResult:
        if "\x00" in action:
            raise ValueError("source code string cannot contain null bytes")
        return rlvr_gym.StepResult("ok", 0.0, False, False, {})


def test_the_fuzzer_reports_an_env_that_raises() -> None:
    from rlvr_gym.testing import temporary_env

    with temporary_env("testing/RaisesOnNul-v0", _RaisesOnNul) as env_id:
        report = fuzz_env(env_id)
    assert report.errors and all("ValueError" in e for e in report.errors)
    assert any("\\x00" in e for e in report.errors)
