"""The orphan reaper, on stand-in processes carrying the browser marker (no browser needed)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from rlvr_gym_web.browser import OWNER_FLAG, _alive, marked_browsers, reap_orphan_browsers


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _marked_sleeper(owner: int) -> subprocess.Popen[bytes]:
    # A stand-in for a browser: its own process group (as Playwright starts Chromium) and the owner marker.
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); time.sleep(60)"
    return subprocess.Popen([sys.executable, "-c", code, f"{OWNER_FLAG}{owner}"], start_new_session=True)


def _gone(proc: subprocess.Popen[bytes]) -> bool:
    for _ in range(50):
        if proc.poll() is not None:
            return True
        time.sleep(0.05)
    return False


def test_reaper_kills_the_group_of_a_browser_whose_owner_died() -> None:
    orphan = _marked_sleeper(_dead_pid())
    kept = _marked_sleeper(os.getpid())  # owned by a live process: left alone
    try:
        time.sleep(0.3)
        group = os.getpgid(orphan.pid)
        assert marked_browsers()[orphan.pid] != os.getpid()
        reaped = reap_orphan_browsers()
        assert orphan.pid in reaped and kept.pid not in reaped
        assert _gone(orphan) and kept.poll() is None
        time.sleep(0.2)
        survivors = [p for p in os.listdir("/proc") if p.isdigit() and _pgid(int(p)) == group and _alive(int(p))]
        assert survivors == []  # the grandchild in the same group died too (zombies aside)
        assert kept.pid in reap_orphan_browsers(include_own=True)
        assert _gone(kept)
    finally:
        for proc in (orphan, kept):
            if proc.poll() is None:
                proc.kill()


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None
