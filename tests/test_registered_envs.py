"""Every registered env (all installed families) passes the conformance checker on its default suite.

Browser envs (family ``web``) are marked ``browser``. The default tier checks one task per env; the
``slow`` tier checks three. The gold agent also scores 1.0 on two tasks per env through the evaluation harness.
"""

from __future__ import annotations

import pytest

import rlvr_gym
from rlvr_gym.evaluation import evaluate
from rlvr_gym.testing import GoldAgent, check_env


def _env_params() -> list[pytest.ParameterSet]:
    params = []
    for env_spec in rlvr_gym.list_envs():
        marks = [pytest.mark.browser] if env_spec.family == "web" else []
        params.append(pytest.param(env_spec.id, marks=marks, id=env_spec.id))
    return params


ENV_PARAMS = _env_params()


@pytest.mark.parametrize("env_id", ENV_PARAMS)
def test_env_passes_check_env(env_id: str) -> None:
    report = check_env(env_id, num_tasks=1)
    assert report.passed, str(report)


@pytest.mark.slow
@pytest.mark.parametrize("env_id", ENV_PARAMS)
def test_env_passes_check_env_on_three_tasks(env_id: str) -> None:
    report = check_env(env_id, num_tasks=3)
    assert report.passed, str(report)


@pytest.mark.parametrize("env_id", ENV_PARAMS)
def test_gold_agent_scores_one_through_the_harness(env_id: str) -> None:
    env_spec = rlvr_gym.spec(env_id)
    if env_spec.default_suite is None:
        pytest.skip(f"{env_id} has no default suite")
    tasks = [t for t in rlvr_gym.load_suite(env_spec.default_suite) if t.env_id == env_id and t.gold][:2]
    report = evaluate(GoldAgent(), tasks, progress=False)
    assert report.metrics["pass@1"] == 1.0, [r.failures for r in report.records]
    assert all(r.failure is None and r.terminated for r in report.records)


def test_registry_is_not_empty() -> None:
    assert "testing/Echo-v0" in [s.id for s in rlvr_gym.list_envs()]
