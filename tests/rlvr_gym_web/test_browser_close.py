"""Clean-up with a cold browser: no other test's warm browser is held in this module."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from rlvr_gym_web.browser import marked_browsers
from rlvr_gym_web.desktop.env import DesktopEnv

import rlvr_gym
from rlvr_gym import load_suite
from rlvr_gym.testing import check_env

pytestmark = pytest.mark.browser


def own_browsers() -> list[int]:
    return [pid for pid, owner in marked_browsers().items() if owner == os.getpid()]


def wait_for_no_own_browser(timeout_s: float = 5.0) -> None:
    """Waits until this process has no browser running (closing is asynchronous), failing after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while own_browsers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert own_browsers() == []


def test_no_warm_browser_is_held_here() -> None:
    assert own_browsers() == []


def test_close_leaves_no_browser_running() -> None:
    task = load_suite("web/miniwob")[0]
    env = rlvr_gym.make("web/MiniWoB-v0")
    env.reset(options={"task": task})
    assert own_browsers()
    env.close()
    env.close()
    wait_for_no_own_browser()


def test_close_check_passes_with_a_cold_browser() -> None:
    assert check_env("web/Mail-v0", num_tasks=1, checks=["close"]).passed


def _episode_browser(env_id: str, seed: int) -> list[int]:
    """Runs one reset in a fresh env, closes it and returns the browsers this process had open meanwhile."""
    env = rlvr_gym.make(env_id)
    try:
        env.reset(seed=seed)
        return own_browsers()
    finally:
        env.close()


def test_held_resources_keep_one_browser_across_envs() -> None:
    with rlvr_gym.spec("web/Widgets-v0").hold_shared_resources():
        first = _episode_browser("web/Widgets-v0", 1)
        assert own_browsers() == first  # closing the env did not close the browser
        second = _episode_browser("web/Widgets-v0", 2)
    assert len(first) == 1 and second == first  # the second env used the first env's Chromium
    wait_for_no_own_browser()  # leaving the block closed it


def test_training_runs_hold_the_browser_for_the_whole_run() -> None:
    from rlvr_gym_agents.config import load_config
    from rlvr_gym_agents.train import env_factory_of

    config = load_config(Path(__file__).resolve().parents[2] / "agents" / "recipes" / "web-tiny.yaml")
    with env_factory_of(config) as make:
        env = make("web/Widgets-v0")  # in this process (no env pool), with the recipe's env kwargs
        assert isinstance(env.unwrapped, DesktopEnv) and env.unwrapped.name_targets
        env.close()
        first = _episode_browser("web/Widgets-v0", 3)
        assert own_browsers() == first
    wait_for_no_own_browser()


def test_evaluate_keeps_one_browser_for_all_its_episodes() -> None:
    from rlvr_gym.evaluation import evaluate

    seen: list[tuple[int, ...]] = []

    def agent(observation: str, info: dict) -> str:
        seen.append(tuple(own_browsers()))
        return "finish"  # not an action of the page: an invalid-action observation, until the turn limit

    report = evaluate(agent, load_suite("web/widgets-test")[:2], k=2, progress=False)
    assert len(report.records) == 4
    assert len(set(seen)) == 1 and len(seen[0]) == 1  # one Chromium served the four episodes
