"""Fixtures of the web tests: browser-tier tests skip cleanly when Chromium or Playwright is missing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from rlvr_gym_web.browser import BrowserHost, BrowserUnavailableError, chromium_path


def _browser_missing() -> str | None:
    try:
        chromium_path()
        import playwright  # noqa: F401
    except (BrowserUnavailableError, ModuleNotFoundError) as error:
        return str(error)
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = _browser_missing()
    if reason:
        for item in items:
            if "browser" in item.keywords or "slow" in item.keywords:  # every slow test here drives Chromium
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="module")
def warm_browser() -> Iterator[BrowserHost]:
    """This process's browser, kept open for the module so envs do not relaunch Chromium each time."""
    from rlvr_gym_web.browser import keep_browser_warm

    with keep_browser_warm() as host:
        yield host
