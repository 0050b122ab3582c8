"""The shared conformance checker on every text-world id, on default-suite tasks of all task types."""

from __future__ import annotations

import pytest

from rlvr_gym.tasks import load_suite
from rlvr_gym.testing import check_env

CASES = [
    ("textworld/ALFWorld-Easy-v0", "textworld/easy-test"),
    ("textworld/ALFWorld-v0", "textworld/medium-test"),
    ("textworld/ALFWorld-Hard-v0", "textworld/hard-test"),
]


@pytest.mark.parametrize(("env_id", "suite"), CASES)
def test_check_env_passes(env_id: str, suite: str) -> None:
    tasks = load_suite(suite).tasks[:12]  # 12 = two of each of the six types, both seen and held-out layouts
    report = check_env(env_id, tasks, num_tasks=len(tasks), raise_on_failure=False)
    assert report.passed, str(report)
