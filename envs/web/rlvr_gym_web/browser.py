"""One Chromium per process, shared by the web envs of that process, and a reaper for orphaned browsers.

Chromium is Debian's (``/usr/bin/chromium``; override with ``RLVR_GYM_CHROMIUM``), driven by Playwright's sync
API through ``executable_path`` (``playwright install`` cannot download browsers here). Every env of a
process acquires the same :class:`BrowserHost`; each episode gets a fresh browser *context* (cookies,
storage and cache are per context), with a fixed viewport, locale and timezone, except the envs with
``reuse_page`` (our own apps, which keep nothing in storage): their pages open in one shared context and are
parked between envs. The browser closes when
the last env releases it, so ``env.close()`` leaves no child process; a Ray worker keeps it warm across
episodes because its env stays open between them.

Orphans: Playwright starts Chromium in its own process group and kills it when its driver sees the Python
process go away. If the driver dies too (both killed at once), the browser would outlive them, so every
browser is started with a marker switch ``--rlvr-gym-owner=<pid>`` and :func:`reap_orphan_browsers`, run
before each launch and at interpreter exit, kills the process group of any marked browser whose owner is
dead (or, at exit, is this process).

What it does not isolate: a page can use all the CPU it gets, and Chromium runs with ``--no-sandbox`` as
root (the page's JavaScript is our own apps and MiniWoB's, not untrusted content from the network).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CHROMIUM_CANDIDATES = ("/usr/bin/chromium", "/usr/lib/chromium/chromium", "/usr/bin/chromium-browser")
OWNER_FLAG = "--rlvr-gym-owner="
# Without these flags Chromium keeps trying to reach the network and to update itself (pitfalls.md).
CHROMIUM_ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-crash-reporter",
    "--disable-breakpad",
    "--disable-features=OverlayScrollbars,Translate,MediaRouter",
)
VIEWPORT = {"width": 800, "height": 600}
MAX_PARKED_PAGES = 128
"""Idle pages kept open for the next env with ``reuse_page`` (an RL step's 64 episodes, twice over)."""
LOCALE = "en-US"
TIMEZONE = "UTC"


class BrowserUnavailableError(RuntimeError):
    """No Chromium binary was found, or it failed to start."""


def chromium_path() -> str:
    """The Chromium binary to launch: ``$RLVR_GYM_CHROMIUM`` or the first Debian location that exists.

    Raises:
        BrowserUnavailableError: naming the places looked at and how to install Chromium.
    """
    override = os.environ.get("RLVR_GYM_CHROMIUM")
    candidates = (override,) if override else CHROMIUM_CANDIDATES
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return candidate
    raise BrowserUnavailableError(
        f"no Chromium at {', '.join(c for c in candidates if c)}; `apt-get install chromium` "
        "or set RLVR_GYM_CHROMIUM=/path/to/chromium"
    )


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def _alive(pid: int) -> bool:
    """True when ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def marked_browsers() -> dict[int, int]:
    """Maps the pid of every running browser started by this module to its owner's pid."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            for arg in _cmdline(int(entry.name)):
                if arg.startswith(OWNER_FLAG) and arg[len(OWNER_FLAG):].isdigit():
                    found[int(entry.name)] = int(arg[len(OWNER_FLAG):])
    return found


def reap_orphan_browsers(*, include_own: bool = False) -> list[int]:
    """Kills (SIGKILL) the process group of every marked browser whose owner process is dead.

    Args:
        include_own: also kill the browsers owned by this process (used at interpreter exit).

    Returns:
        The pids of the browsers whose groups were killed.
    """
    reaped = []
    for pid, owner in marked_browsers().items():
        if (include_own and owner == os.getpid()) or not _alive(owner):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            reaped.append(pid)
    return reaped


def chromium_processes() -> list[int]:
    """Pids of every running process whose executable is a Chromium binary (any owner)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            args = _cmdline(int(entry.name))
            if args and Path(args[0]).name in ("chromium", "chrome", "chromium-browser") and _alive(int(entry.name)):
                pids.append(int(entry.name))
    return pids


class BrowserHost:
    """The process's Playwright driver and Chromium, shared by reference count.

    Use :func:`acquire_browser` / :func:`release_browser` rather than building one. Not thread-safe by
    design: Playwright's sync API must stay on the thread that started it.
    """

    def __init__(self) -> None:
        self.refs = 0
        self._playwright: Any = None
        self.browser: Any = None
        self._thread = threading.get_ident()
        self._parked: list[tuple[Any, Any]] = []
        self._shared: Any = None

    def ensure_browser(self) -> Any:
        """Returns a connected browser, (re)launching it if it is not running (e.g. after a crash).

        Raises:
            BrowserUnavailableError: when Chromium cannot be found or started.
        """
        if threading.get_ident() != self._thread:
            raise RuntimeError("Playwright's sync API cannot cross threads; use one web env per thread/process")
        if self.browser is not None and self.browser.is_connected():
            return self.browser
        self.shutdown()
        reap_orphan_browsers()
        from playwright.sync_api import sync_playwright

        self._playwright = sync_playwright().start()
        try:
            self.browser = self._playwright.chromium.launch(
                executable_path=chromium_path(), headless=True, args=[*CHROMIUM_ARGS, f"{OWNER_FLAG}{os.getpid()}"]
            )
        except Exception as error:
            self.shutdown()
            raise BrowserUnavailableError(f"Chromium failed to start: {error}") from error
        return self.browser

    def new_context(self, **options: Any) -> Any:
        """A fresh browser context with the fixed viewport, locale and timezone (overridable)."""
        settings = {"viewport": VIEWPORT, "locale": LOCALE, "timezone_id": TIMEZONE, **options}
        return self.ensure_browser().new_context(**settings)

    def shared_context(self, setup: Callable[[Any], None]) -> Any:
        """The one context of this browser that the envs with ``reuse_page`` open their pages in (a page in an
        open context costs ~0.12 s, a new context ~0.45 s: a renderer process each); ``setup(context)`` runs once
        when it is made (again after a browser relaunch). Its pages share cookies and storage, as the pages of a
        reused page's episodes do."""
        browser = self.ensure_browser()
        if self._shared is None or self._shared.browser is not browser:
            context = browser.new_context(viewport=VIEWPORT, locale=LOCALE, timezone_id=TIMEZONE)
            try:
                setup(context)
            except Exception:
                with contextlib.suppress(Exception):
                    context.close()
                raise
            context.on("close", lambda closed: self._forget_shared(closed))  # closed from anywhere: make another
            self._shared = context
        return self._shared

    def _forget_shared(self, context: Any) -> None:
        if self._shared is context:
            self._shared = None

    def close_page(self, context: Any, page: Any) -> None:
        """Closes ``page`` (when there is one), and ``context`` too unless it is the shared one
        (:meth:`shared_context`), which stays open for the other envs."""
        with contextlib.suppress(Exception):
            if context is not self._shared:
                context.close()
            elif page is not None:
                page.close()

    def park(self, context: Any, page: Any) -> None:
        """Keeps a closed episode's context and page for :meth:`take_parked` (envs with ``reuse_page``, whose
        every episode starts in a page again); beyond :data:`MAX_PARKED_PAGES` the page is closed instead
        (:meth:`close_page`)."""
        if len(self._parked) < MAX_PARKED_PAGES and self.browser is not None and not page.is_closed():
            self._parked.append((context, page))
        else:
            self.close_page(context, page)

    def take_parked(self) -> tuple[Any, Any] | None:
        """The last parked ``(context, page)`` whose page is still open, or None; a parked page that was closed
        meanwhile is not handed out (its context is closed unless shared, :meth:`close_page`)."""
        while self._parked:
            context, page = self._parked.pop()
            if not page.is_closed() and self.browser is not None and self.browser.is_connected():
                return context, page
            self.close_page(context, page)
        return None

    def shutdown(self) -> None:
        """Closes the browser and stops the driver; safe to call at any time."""
        browser, playwright = self.browser, self._playwright
        self.browser, self._playwright, self._parked, self._shared = None, None, [], None
        if browser is not None:
            with contextlib.suppress(Exception):
                browser.close()
        if playwright is not None:
            with contextlib.suppress(Exception):
                playwright.stop()


_HOST: BrowserHost | None = None


def acquire_browser() -> BrowserHost:
    """Counts one more user of this process's browser host and returns it (the browser starts lazily)."""
    global _HOST
    if _HOST is None:
        _HOST = BrowserHost()
    _HOST.refs += 1
    return _HOST


def release_browser(host: BrowserHost) -> None:
    """Counts one user fewer; the last one out closes the browser and its driver."""
    host.refs = max(0, host.refs - 1)
    if host.refs == 0:
        host.shutdown()


@contextlib.contextmanager
def keep_browser_warm() -> Iterator[BrowserHost]:
    """Holds this process's browser open for the duration, so envs made and closed inside reuse it instead
    of relaunching Chromium (about 1 s each). Test suites and benchmarks use it; a pool worker gets the
    same effect by keeping its envs between episodes."""
    host = acquire_browser()
    try:
        yield host
    finally:
        release_browser(host)


@atexit.register
def _close_at_exit() -> None:
    if _HOST is not None:
        _HOST.shutdown()
    reap_orphan_browsers(include_own=True)
