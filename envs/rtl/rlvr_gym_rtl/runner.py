"""The judge's sandbox runs: one shell script per judgement, in a sandbox started ahead of time.

Starting a bubblewrap sandbox (namespaces, mounts, the launcher processes) takes 10-30 ms on a 2-core
machine, about as long as compiling a VerilogEval problem. :class:`ScriptRunner` therefore keeps one *spare*
sandbox started ahead of time: a shell in a fresh sandbox (its own namespaces, work dir and, as root, host
uid) that runs nothing but ``read`` until the judge has written the run's files into the work dir and sends
the name of the script to run. A spare serves exactly one run, so a run is isolated exactly as by a fresh
``Sandbox.run``, and its wall-clock limit starts at the go-ahead
(:meth:`rlvr_gym.sandbox.SandboxSession.restart_clock`). The next spare is launched right after the
go-ahead (a vfork and an exec here, ~1-3 ms, while the run compiles in the sandbox); the sandbox then sets
itself up while the run goes on and until the next judgement, off its critical path. The CPU time of a
sandbox start is not saved, only moved; one idle spare (three small processes and an empty work dir)
stays up between judgements until :meth:`ScriptRunner.close`.

Spares are launched by the thread that calls :meth:`ScriptRunner.start`, never by a helper thread, and a
spare whose launching thread has ended is never used: bubblewrap's ``--die-with-parent`` kills a sandbox
when the *thread* that launched it exits. Callers from long-lived threads (the main thread, a thread pool,
a Ray actor) get warm spares; a new thread per call gets a sandbox started on the spot.

Back-ends without ``spawn`` (Docker), or ``warm=False``, run each script with one plain ``Sandbox.run``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import threading
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlvr_gym.sandbox import Sandbox, SandboxLimits, SandboxResult, SandboxSession
from rlvr_gym.sandbox.base import check_relative_path

_BAD_SCRIPT = 125
"""Exit status of a spare that was sent no script name, or an unknown one."""


@dataclasses.dataclass
class StartedRun:
    """A run handed to :meth:`ScriptRunner.start`: going (``session``) or still to run (no spare)."""

    script: str
    session: SandboxSession | None = None
    files: Mapping[str, str | bytes] = dataclasses.field(default_factory=dict)


class ScriptRunner:
    """Runs one of a fixed set of shell scripts per call in a sandbox, keeping a spare sandbox warm.

    Args:
        sandbox: the back-end; a spare is kept only when it has ``spawn`` (bwrap, subprocess).
        limits: the limits of every run (the wall-clock limit counts from the go-ahead).
        scripts: script name -> POSIX shell script, run in the work dir (names: letters, digits, ``_``).
        warm: keep a spare sandbox started ahead of time (when the back-end can).

    Raises:
        ValueError: on a script name that is not a plain word.
    """

    def __init__(self, sandbox: Sandbox, limits: SandboxLimits, scripts: Mapping[str, str], warm: bool = True) -> None:
        bad = [name for name in scripts if not name.replace("_", "").isalnum()]
        if bad:
            raise ValueError(f"script names must be letters, digits and '_', got {bad}")
        self.sandbox, self.limits, self.scripts = sandbox, limits, dict(scripts)
        self.warm = warm and callable(getattr(sandbox, "spawn", None))
        self._spare_argv = ["sh", "-c", _dispatch_script(self.scripts)]
        self._reset_spare()

    def _reset_spare(self) -> None:
        self._slot: list[tuple[int, threading.Thread, SandboxSession]] = []  # at most one (pid, launcher, spare)
        self._lock = threading.Lock()
        weakref.finalize(self, _close_all, self._slot, self._lock)

    def __getstate__(self) -> dict[str, object]:
        """Pickles the configuration only: a copy in another process starts its own spare."""
        return {k: v for k, v in self.__dict__.items() if k not in ("_slot", "_lock")}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._reset_spare()

    def start(self, script: str, files: Mapping[str, str | bytes]) -> StartedRun:
        """Writes ``files`` into a spare sandbox and gives it the go-ahead to run ``script``; then launches
        the next spare.

        Raises:
            KeyError: on an unknown script name.
            ValueError: on a file path that leaves the work dir.
        """
        if script not in self.scripts:
            raise KeyError(f"unknown script {script!r}; known: {', '.join(self.scripts)}")
        session = self._take_spare() if self.warm else None
        if session is None:
            return StartedRun(script, None, dict(files))
        try:
            _write_files(session.workdir, files)
        except BaseException:
            session.close()
            raise
        session.restart_clock()
        if not session.write(f"{script}\n".encode()):  # the spare died while waiting: run without one
            session.close()
            return StartedRun(script, None, dict(files))
        assert session.proc.stdin is not None, "spawn() gives the session a stdin pipe"
        session.proc.stdin.close()  # nothing in the run may read more
        self._refill()
        return StartedRun(script, session)

    def finish(self, run: StartedRun, collect: Sequence[str] = ()) -> SandboxResult:
        """Waits for a started run (or runs it now, without a spare) and returns its result."""
        if run.session is None:
            return self.sandbox.run(["sh", "-c", self.scripts[run.script]], files=run.files, limits=self.limits,
                                    collect=collect)
        return _wait(run.session, self.limits.output_limit_bytes, collect)

    def cancel(self, run: StartedRun) -> None:
        """Stops a started run at once (its process tree is killed, its work dir deleted)."""
        if run.session is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(run.session.proc.pid, signal.SIGKILL)  # close() alone would let it run for 0.5 s
            run.session.close()

    def close(self) -> None:
        """Stops the spare sandbox, if any (a later :meth:`start` starts a new one). Safe to call twice."""
        _close_all(self._slot, self._lock)

    def _take_spare(self) -> SandboxSession:
        with self._lock:
            owner, launcher, spare = self._slot.pop() if self._slot else (0, None, None)
        if spare is not None and owner != os.getpid():
            spare = None  # a forked child never uses its parent's spare (the parent may use it too)
        elif spare is not None and (spare.proc.poll() is not None or not launcher.is_alive()):  # type: ignore[union-attr]
            spare.close()  # it died while waiting, or will die with its launching thread
            spare = None
        return spare or self._spawn()

    def _refill(self) -> None:
        with self._lock:
            if self._slot:
                return
        try:
            spare = self._spawn()
        except Exception:  # noqa: BLE001  (this run is under way; the next start() spawns again and raises)
            return
        with self._lock:
            if not self._slot:
                self._slot.append((os.getpid(), threading.current_thread(), spare))
                return
        spare.close()

    def _spawn(self) -> SandboxSession:
        return self.sandbox.spawn(self._spare_argv, limits=self.limits)  # type: ignore[attr-defined, no-any-return]


def _dispatch_script(scripts: Mapping[str, str]) -> str:
    """A shell script that waits for a script name on stdin, then runs that script."""
    branches = "".join(f"{name})\n{body.rstrip()}\n;;\n" for name, body in scripts.items())
    return f"IFS= read -r script || exit {_BAD_SCRIPT}\ncase \"$script\" in\n{branches}*) exit {_BAD_SCRIPT};;\nesac\n"


def _write_files(workdir: Path, files: Mapping[str, str | bytes]) -> None:
    """Writes a run's files into a spare's work dir (only ``read`` has run there), owned like the dir."""
    owner = workdir.stat()
    for rel, content in files.items():
        target = workdir / check_relative_path(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else bytes(content))
        os.chown(target, owner.st_uid, owner.st_gid)


def _wait(session: SandboxSession, output_limit_bytes: int, collect: Sequence[str]) -> SandboxResult:
    """Reads a session's stdout to its end (at most ``output_limit_bytes``), then closes it."""
    lines: list[bytes] = []
    size = 0
    while size <= output_limit_bytes and (line := session.read_line(max_bytes=output_limit_bytes)) is not None:
        lines.append(line + b"\n")
        size += len(line) + 1
    result = session.close(collect)
    stdout = b"".join(lines) + result.stdout.encode()
    if len(stdout) > output_limit_bytes:
        return dataclasses.replace(result, exit_code=None, killed_by="output",
                                   stdout=stdout[:output_limit_bytes].decode("utf-8", "replace"))
    return dataclasses.replace(result, stdout=stdout.decode("utf-8", "replace"))


def _close_all(slot: list[tuple[int, threading.Thread, SandboxSession]], lock: threading.Lock) -> None:
    with lock:
        spares, slot[:] = list(slot), []
    for owner, _launcher, spare in spares:
        if owner == os.getpid():
            spare.close()
