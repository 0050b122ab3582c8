"""Judging many programs: in parallel sandboxes, and in batches inside one sandbox (the worker's zygote).

See :mod:`rlvr_gym_code.worker` for the zygote's protocol and :mod:`rlvr_gym_code.judge` for why the tests
stay outside the sandbox.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from rlvr_gym import Failure, FailureKind
from rlvr_gym.sandbox import Sandbox, SandboxLimits, SandboxSession, SandboxUnavailableError
from rlvr_gym_code import codec
from rlvr_gym_code.judge import (
    DEFAULT_LIMITS,
    PYTHON,
    WORKER_FILE,
    JudgeReport,
    PythonTests,
    _run_tests,
    check_syntax,
    instrument_tests,
    interactive_sandbox,
    judge_python,
    worker_source,
)


def judge_many(
    jobs: Sequence[tuple[str, PythonTests]],
    *,
    sandbox: Sandbox | None = None,
    limits: SandboxLimits = DEFAULT_LIMITS,
    max_workers: int = 4,
    batch_size: int = 1,
    progress: Callable[[int], None] | None = None,
) -> list[JudgeReport]:
    """Judges many ``(program, tests)`` pairs, ``max_workers`` sandboxes at a time.

    Args:
        batch_size: programs per sandbox. 1: a fresh sandbox each (:func:`judge_python`); more: chunks of
            that many judged in turn by one sandbox's zygote (:func:`judge_batch`), which saves the start-up
            of a sandbox and an interpreter per program while keeping each program in its own process.
        progress: called with the number of programs judged so far.

    Threads suffice: a judgement mostly waits on its sandboxed process.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    box = interactive_sandbox(sandbox or "auto")
    chunks = [list(jobs[i:i + batch_size]) for i in range(0, len(jobs), batch_size)]
    reports: list[JudgeReport] = []
    with ThreadPoolExecutor(max_workers=max_workers) as pool:
        if batch_size == 1:
            futures = [pool.submit(lambda c: [judge_python(*c[0], sandbox=box, limits=limits)], c) for c in chunks]
        else:
            futures = [pool.submit(judge_batch, c, sandbox=box, limits=limits) for c in chunks]
        for future in futures:
            reports.extend(future.result())
            if progress is not None:
                progress(len(reports))
    return reports


class BatchJudge:
    """A long-lived batch-mode sandbox that judges programs one at a time.

    Each program runs in its own process forked from a non-dumpable zygote, in a fresh ``job/`` dir, under
    ``limits`` (``timeout_s`` applies per program); after each program every process of the sandbox user
    is killed, every writable place (``/workspace``, so ``$HOME`` and ``job/`` too, ``/tmp``, ``/dev/shm``;
    the root and ``/dev`` are read-only) is emptied and its mode restored (directories a program locked with
    chmod included), SysV IPC objects, POSIX message queues and the keyrings' keys are removed, so a program
    cannot read or influence a later one through them; a zygote whose resource limits or priority a program
    changed (prlimit(2), setpriority(2)), or whose writable places could not be emptied, exits, and the next
    program gets a fresh sandbox. A program that exits during
    a call is reported at once (not at the call's deadline). This saves a sandbox and interpreter start-up
    per program; the child is forked and warmed up before its program arrives, and a job whose tests
    reached a verdict is ended without waiting for the clean-up (see :meth:`judge`). If a program kills
    the zygote, its verdict is re-judged in a sandbox of its own and the next program gets a new zygote.

    Args:
        sandbox: the bwrap back-end; default :func:`rlvr_gym_code.judge.interactive_sandbox`.
        limits: limits of each program.
        session_timeout_s: lifetime of one zygote, in seconds (a new one starts after it).
        spawner: runs the zygote's start (a callable) and returns its session; default: in the calling thread.
            A bwrap sandbox dies with the thread that started it, so a judge used from short-lived threads
            needs a long-lived thread to start its zygotes (:class:`JudgePool` passes one).

    Raises:
        SandboxUnavailableError: for a back-end other than bwrap (the subprocess back-end would let the
            zygote empty the host's ``/tmp``).
    """

    def __init__(self, sandbox: Sandbox | None = None, limits: SandboxLimits = DEFAULT_LIMITS,
                 session_timeout_s: float = 3600.0,
                 spawner: Callable[[Callable[[], SandboxSession]], SandboxSession] | None = None) -> None:
        self._spawner = spawner
        self._session: SandboxSession | None = None
        self._pending_seal: str | None = None  # the seal of a job ended but not yet confirmed done
        self.box = interactive_sandbox(sandbox or "auto")
        if self.box.name != "bwrap":  # the zygote empties /tmp, /dev/shm and /workspace between programs
            raise SandboxUnavailableError(
                f"batch judging needs the 'bwrap' sandbox, got {self.box.name!r}: between programs its zygote "
                "empties /tmp, /dev/shm and /workspace, which outside bubblewrap are the host's own; judge one "
                "program per sandbox instead (judge_python, batch_size=1, persistent_sandbox=False)")
        self.limits = limits
        self.session_limits = dataclasses.replace(limits, timeout_s=session_timeout_s)

    def judge(self, program: str, tests: PythonTests) -> JudgeReport:
        """The verdict on ``program`` (the same as :func:`judge_python` would give).

        A job whose tests reached a verdict is ended without waiting: the zygote's sweep, clean-up and
        next fork overlap with whatever the caller does next, and the following :meth:`judge` first waits
        for the zygote's ``done`` (the next program is only sent once every process of this one is dead
        and every writable place is empty)."""
        if self._session is not None and not self._settle():
            self.close()
        if self._session is None or self._session.timed_out:
            self.close()
            def spawn() -> SandboxSession:
                return self.box.spawn(  # type: ignore[attr-defined,no-any-return]
                    [PYTHON, "-I", "-S", WORKER_FILE, "--zygote"], files={WORKER_FILE: worker_source()},
                    limits=self.session_limits)

            self._session = self._spawner(spawn) if self._spawner is not None else spawn()
        report, alive = _judge_one_in_batch(self._session, program, tests, self.limits)  # type: ignore[arg-type]
        if isinstance(alive, str):
            self._pending_seal = alive
        elif not alive:
            self.close()
        return report if report is not None else judge_python(program, tests, sandbox=self.box, limits=self.limits)

    def _settle(self) -> bool:
        """Waits for the zygote's ``done`` of the job ended last; False when it never came."""
        seal, self._pending_seal = self._pending_seal, None
        return seal is None or _await_done(self._session, seal) is not None  # type: ignore[arg-type]

    def close(self) -> None:
        """Stops the zygote (a later :meth:`judge` starts a new one). Safe to call twice."""
        session, self._session, self._pending_seal = self._session, None, None
        if session is not None:
            session.close()

    def __del__(self) -> None:
        self.close()


class JudgePool:
    """Long-lived :class:`BatchJudge` sandboxes shared by every env of a process: a step borrows an idle one
    with the same back-end and limits (or starts one) and gives it back, so episodes that make and close an
    env each still judge in a warm zygote (the trainer and :func:`rlvr_gym.evaluate` make one env per
    episode). Each program keeps its own process and its sweep (:class:`BatchJudge`), so sharing a zygote
    between episodes isolates them as sharing it between the steps of one env does. Thread-safe: concurrent
    steps borrow different judges, so the pool grows to the number of steps judged at once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, SandboxLimits], list[BatchJudge]] = {}
        self._open = True
        # zygotes start on this thread: a sandbox dies with the thread that started it, and steps come from
        # executor threads that end with each evaluation
        self._spawn_thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="judge-pool-spawner")

    def _spawn(self, start: Callable[[], SandboxSession]) -> SandboxSession:
        try:
            future = self._spawn_thread.submit(start)
        except RuntimeError:  # the pool closed while this judge was borrowed: it is closed when given back
            return start()
        return future.result()

    @contextlib.contextmanager
    def borrow(self, backend: str, limits: SandboxLimits) -> Iterator[BatchJudge | None]:
        """An idle judge for ``(backend, limits)`` for the block, or a new one; None when the back-end
        cannot batch (not bwrap: the caller judges in a fresh sandbox per program)."""
        key = (backend, limits)
        with self._lock:
            idle = self._idle.get(key)
            judge = idle.pop() if idle else None
        if judge is None:
            try:
                judge = BatchJudge(interactive_sandbox(backend), limits, spawner=self._spawn)
            except SandboxUnavailableError:
                yield None
                return
        try:
            yield judge
        finally:
            with self._lock:
                if self._open:
                    self._idle.setdefault(key, []).append(judge)
                    judge = None
            if judge is not None:
                judge.close()

    def close(self) -> None:
        """Stops every idle judge; a judge borrowed now is stopped when it is given back."""
        with self._lock:
            self._open = False
            judges = [judge for idle in self._idle.values() for judge in idle]
            self._idle.clear()
        for judge in judges:
            judge.close()
        self._spawn_thread.shutdown(wait=False)


_POOL_LOCK = threading.Lock()
_POOL: JudgePool | None = None
_POOL_HOLDERS = 0


@contextlib.contextmanager
def keep_judges_warm() -> Iterator[JudgePool]:
    """Holds this process's :class:`JudgePool` for the block (nested and concurrent holders share it; the
    last to leave stops its judges). Code envs made inside with ``persistent_sandbox`` unset judge in it
    (:meth:`rlvr_gym_code.humaneval.HumanEvalEnv.hold_shared_resources`)."""
    global _POOL, _POOL_HOLDERS
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = JudgePool()
        pool = _POOL
        _POOL_HOLDERS += 1
    try:
        yield pool
    finally:
        with _POOL_LOCK:
            _POOL_HOLDERS -= 1
            last = _POOL_HOLDERS == 0
            if last:
                _POOL = None
        if last:
            pool.close()


def shared_judges() -> JudgePool | None:
    """The process's held :class:`JudgePool` (inside :func:`keep_judges_warm`), else None."""
    return _POOL


def judge_batch(
    jobs: Sequence[tuple[str, PythonTests]],
    *,
    sandbox: Sandbox | None = None,
    limits: SandboxLimits = DEFAULT_LIMITS,
) -> list[JudgeReport]:
    """Judges several programs in one sandbox, one after another (see :class:`BatchJudge`)."""
    judge = BatchJudge(sandbox, limits, session_timeout_s=limits.timeout_s * len(jobs) + 5.0)
    try:
        return [judge.judge(program, tests) for program, tests in jobs]
    finally:
        judge.close()


def _judge_one_in_batch(
    session: SandboxSession, program: str, tests: PythonTests, limits: SandboxLimits
) -> tuple[JudgeReport | None, bool | str]:
    """Returns (the report, or None to re-judge the program alone; whether the batch can go on, or the seal
    of the end request when the job was ended without waiting for the zygote's ``done``)."""
    start = time.monotonic()
    syntax_error = check_syntax(program)
    if syntax_error is not None:
        return JudgeReport(False, reason=syntax_error, failure=Failure(FailureKind.PARSE_ERROR, syntax_error)), True
    report, nonce = JudgeReport(False), secrets.token_hex(16)
    code = instrument_tests(tests.test_source)
    _run_tests(session, tests, code, report, {"program": program}, start + limits.timeout_s, nonce)
    # A verdict the tests themselves reached stands whatever happens to the zygote afterwards.
    reached = report.passed or (report.failure is None and bool(report.reason))
    if reached:
        report.output = _log_tail(session.workdir)
        seal = _send_end(session, nonce)
        report.duration_s = time.monotonic() - start
        return report, seal if seal is not None else False
    seal = _send_end(session, nonce)
    done = _await_done(session, seal) if seal is not None else None
    report.duration_s = time.monotonic() - start
    if done is None:  # the zygote died or hung: re-judge the program in a sandbox of its own
        return None, False
    report.output = str(done.get("log", ""))
    return report, True


def _send_end(session: SandboxSession, nonce: str) -> str | None:
    """Asks the zygote to end the job; returns the fresh seal its ``done`` must echo, or None if it is gone."""
    seal = secrets.token_hex(16)
    return seal if session.write(codec.dumps({"end": nonce, "seal": seal}), time.monotonic() + 5.0) else None


def _await_done(session: SandboxSession, seal: str) -> dict[str, Any] | None:
    """The zygote's ``done`` message for ``seal``, or None if the zygote is gone or takes over 5 s.

    Lines before it (anything the dead candidate wrote to the channel) are skipped: only the zygote knows
    the fresh seal it must echo."""
    deadline = time.monotonic() + 5.0
    while (line := session.read_line(deadline)) is not None:
        try:
            message = codec.loads(line)
        except codec.CodecError:
            continue
        if message.get("done") == seal:
            return message
    return None


def _log_tail(workdir: Path, max_bytes: int = 4000) -> str:
    """The last ``max_bytes`` of the running job's ``output.log``, read from the host side of the work dir
    (``job/`` under it) without following a symlink the candidate may have planted; "" when absent."""
    try:
        job_fd = os.open(workdir / "job", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return ""
    try:
        log_fd = os.open("output.log", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=job_fd)
    except OSError:
        return ""
    finally:
        os.close(job_fd)
    try:
        size = os.fstat(log_fd).st_size
        if not stat.S_ISREG(os.fstat(log_fd).st_mode):
            return ""
        return os.pread(log_fd, max_bytes, max(0, size - max_bytes)).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(log_fd)
