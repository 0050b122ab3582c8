"""Clean-up with a cold browser: no other test's warm browser is held in this module."""

from __future__ import annotations

import os
import time

import pytest
from rlvr_gym_web.browser import marked_browsers

import rlvr_gym
from rlvr_gym import load_suite
from rlvr_gym.testing import check_env

pytestmark = pytest.mark.browser


def own_browsers() -> list[int]:
    return [pid for pid, owner in marked_browsers().items() if owner == os.getpid()]


def test_no_warm_browser_is_held_here() -> None:
    assert own_browsers() == []


def test_close_leaves_no_browser_running() -> None:
    task = load_suite("web/miniwob")[0]
    env = rlvr_gym.make("web/MiniWoB-v0")
    env.reset(options={"task": task})
    assert own_browsers()
    env.close()
    env.close()
    deadline = time.monotonic() + 5
    while own_browsers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert own_browsers() == []


def test_close_check_passes_with_a_cold_browser() -> None:
    assert check_env("web/Mail-v0", num_tasks=1, checks=["close"]).passed
