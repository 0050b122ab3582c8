"""``rlvr_gym.testing.check_env`` on every web env id (one task each in the browser tier, three in slow)."""

from __future__ import annotations

import pytest
from rlvr_gym_web import DESKTOP_APPS
from rlvr_gym_web.browser import BrowserHost

from rlvr_gym.testing import check_env
from rlvr_gym.testing.checker import ALL_CHECKS

WEB_ENV_IDS = ["web/MiniWoB-v0"] + [f"web/{name}-v0" for name in DESKTOP_APPS]
# The close check must see the env start and stop its own browser, so it runs without the warm browser.
WARM_CHECKS = [name for name in ALL_CHECKS if name != "close"]


@pytest.mark.browser
@pytest.mark.parametrize("env_id", WEB_ENV_IDS)
def test_check_env_passes(env_id: str, warm_browser: BrowserHost) -> None:
    report = check_env(env_id, num_tasks=1, checks=WARM_CHECKS)
    assert report.passed, report.failures


@pytest.mark.slow  # not marked browser, so that `-m browser` (the CI browser tier) leaves it out
@pytest.mark.parametrize("env_id", WEB_ENV_IDS)
def test_check_env_passes_on_three_tasks(env_id: str) -> None:
    assert check_env(env_id, num_tasks=3).passed
