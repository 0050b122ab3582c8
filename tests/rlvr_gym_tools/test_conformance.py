"""Every tools env passes the conformance checker on its default suite and on other shipped suites."""

from __future__ import annotations

import pytest

from rlvr_gym import load_suite
from rlvr_gym.testing import check_env

ENV_IDS = ["tools/MultiHopQA-v0", "tools/Math-v0", "tools/BFCL-v0", "tools/BFCLMultiTurn-v0"]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_check_env_default_suite(env_id: str) -> None:
    report = check_env(env_id)
    assert report.passed, str(report)


@pytest.mark.parametrize(
    ("env_id", "suite"),
    [
        ("tools/BFCL-v0", "tools/bfcl_irrelevance"),
        ("tools/BFCL-v0", "tools/bfcl_parallel_multiple"),
        ("tools/BFCL-v0", "tools/bfcl_live_multiple"),
        ("tools/BFCLMultiTurn-v0", "tools/bfcl_multi_turn_miss_func"),
        ("tools/BFCLMultiTurn-v0", "tools/bfcl_multi_turn_long_context"),
        ("tools/MultiHopQA-v0", "tools/multihop_train"),
    ],
)
def test_check_env_other_suites(env_id: str, suite: str) -> None:
    report = check_env(env_id, tasks=list(load_suite(suite))[:2])
    assert report.passed, str(report)
