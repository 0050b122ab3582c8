"""Skips the code family's tests cleanly where bubblewrap cannot run."""

from __future__ import annotations

import pytest

from rlvr_gym.sandbox import SandboxUnavailableError, get_sandbox


@pytest.fixture(scope="session", autouse=True)
def _require_bwrap() -> None:
    try:
        get_sandbox("bwrap")
    except SandboxUnavailableError as error:
        pytest.skip(f"bubblewrap sandbox unavailable: {error}")
