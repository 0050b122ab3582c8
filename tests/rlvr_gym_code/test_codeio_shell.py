"""CodeIO and Shell envs: verifiers on hand-made cases, gold/wrong, conformance."""

from __future__ import annotations

import pytest
from rlvr_gym_code.codeio import codeio_tests, uses_stdlib_only, verify_codeio
from rlvr_gym_code.shell import KINDS, make_shell_task, verify_shell_state

import rlvr_gym
from rlvr_gym import FailureKind, load_suite


def test_codeio_tolerance_and_types() -> None:
    data = {"cases": [[{"x": 2}, {"half": 1.0, "pair": [2, 2]}], [{"x": 3}, {"half": 1.5, "pair": [3, 3]}]]}
    exact = "def main_solution(x):\n    return {'half': x / 2, 'pair': (x, x)}"  # a tuple becomes a list
    close = "def main_solution(x):\n    return {'half': x / 2 + 1e-9, 'pair': [x, x]}"
    far = "def main_solution(x):\n    return {'half': x / 2 + 1e-3, 'pair': [x, x]}"
    wrong_type = "def main_solution(x):\n    return {'half': str(x / 2), 'pair': [x, x]}"
    assert verify_codeio(data, exact)[0].value == 1.0
    assert verify_codeio(data, close)[0].value == 1.0
    reward, report = verify_codeio(data, far)
    assert reward.value == 0.0 and reward.components["cases_passed"] == 0.0 and report.num_asserts == 1
    assert verify_codeio(data, wrong_type)[0].value == 0.0
    assert codeio_tests(data).entry_point == "main_solution"


def test_uses_stdlib_only() -> None:
    assert uses_stdlib_only("import math\nfrom collections import deque")
    assert not uses_stdlib_only("import numpy as np")
    assert not uses_stdlib_only("def broken(:")


def test_codeio_suite_gold_and_wrong() -> None:
    suite = load_suite("code/codeio")
    assert len(suite) >= 48 and {t.split for t in suite} == {"train", "test"}
    env = rlvr_gym.make("code/CodeIO-v0")
    for task in suite.tasks[:3]:
        obs, _ = env.reset(options={"task": task})
        assert "main_solution" in obs and str(task.data["cases"][0][1])[:30] not in obs
        assert env.step(task.gold[0]).reward == 1.0  # type: ignore[index]
        env.reset(options={"task": task})
        assert env.step(task.wrong[0]).reward == 0.0  # type: ignore[index]


def test_shell_verifier_by_hand() -> None:
    data = {"expect": {"a.txt": "x\ny"}, "absent": ["b.tmp"]}
    assert verify_shell_state(data, {"a.txt": b"x\ny\n"}).value == 1.0
    partial = verify_shell_state(data, {"a.txt": b"x\n", "b.tmp": b""})
    assert partial.value == 0.0 and partial.components["checks_passed"] == 0.0
    half = verify_shell_state(data, {"a.txt": b"x\ny"} | {"b.tmp": b""})
    assert half.components["checks_passed"] == 0.5 and "b.tmp should not exist" in half.reason


@pytest.mark.parametrize("kind", KINDS)
def test_shell_gold_and_wrong_each_kind(kind: str) -> None:
    task = make_shell_task(kind, seed=100)
    env = rlvr_gym.make("code/Shell-v0")
    for actions, want in ((task.gold, 1.0), (task.wrong, 0.0)):
        env.reset(options={"task": task})
        results = [env.step(a) for a in actions]  # type: ignore[union-attr]
        assert results[-1].reward == want and results[-1].terminated
    env.close()


def test_shell_episode_observations_fork_and_limits() -> None:
    task = make_shell_task("sort_lines", seed=3)
    env = rlvr_gym.make("code/Shell-v0", timeout_s=1.0)
    obs, _ = env.reset(options={"task": task})
    assert "data/names.txt" in obs
    obs, _reward, terminated, _, info = env.step("```bash\nwc -l data/names.txt && mkdir out\n```")
    assert "data/names.txt" in obs and "[exit code 0]" in obs and not terminated
    clone = env.fork()
    env.step("echo changed > out/only_in_original")
    assert "No such file" in clone.step("cat out/only_in_original").observation
    obs, _, _, _, info = env.step("sleep 5")
    assert "timed out" in obs and info["failure"].kind is FailureKind.TIMEOUT
    assert env.step("").info["failure"].kind is FailureKind.PARSE_ERROR
    assert env.step("x" * 40000).info["failure"].kind is FailureKind.INVALID_ACTION
    workdir = env.workdir  # type: ignore[attr-defined]
    env.close()
    clone.close()
    assert workdir is not None and not workdir.exists()


@pytest.mark.parametrize("env_id", ["code/CodeIO-v0", "code/Shell-v0"])
def test_conformance(env_id: str) -> None:
    from rlvr_gym.testing import check_env

    report = check_env(env_id, num_tasks=1)
    assert all(r.status != "failed" for r in report.results)


def test_shell_work_dir_quota_ends_the_episode() -> None:
    task = make_shell_task("dedupe", seed=0)
    env = rlvr_gym.make("code/Shell-v0", max_workdir_mb=1)
    env.reset(options={"task": task})
    result = env.step("for i in 1 2 3; do head -c 600000 /dev/zero > f$i; done")
    assert result.terminated and result.reward == 0.0
    assert result.info["failure"].kind is FailureKind.BUDGET_EXCEEDED
    env.close()
