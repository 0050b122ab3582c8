"""Judging many programs: in parallel sandboxes, and in batches inside one sandbox (the worker's zygote).

See :mod:`rlvr_gym_code.worker` for the zygote's protocol and :mod:`rlvr_gym_code.judge` for why the tests
stay outside the sandbox.
"""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rlvr_gym import Failure, FailureKind
from rlvr_gym.sandbox import Sandbox, SandboxLimits, SandboxSession
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
    the root and ``/dev`` are read-only) is emptied and its mode restored, and SysV IPC objects are removed,
    so a program cannot read or influence a later one through the file system. A program that exits during
    a call is reported at once (not at the call's deadline). This saves a sandbox and interpreter start-up per program. If a program kills the zygote,
    its verdict is re-judged in a sandbox of its own and the next program gets a new zygote.

    Args:
        sandbox: a back-end with ``spawn``; default :func:`rlvr_gym_code.judge.interactive_sandbox`.
        limits: limits of each program.
        session_timeout_s: lifetime of one zygote, in seconds (a new one starts after it).
    """

    def __init__(self, sandbox: Sandbox | None = None, limits: SandboxLimits = DEFAULT_LIMITS,
                 session_timeout_s: float = 3600.0) -> None:
        self.box = interactive_sandbox(sandbox or "auto")
        self.limits = limits
        self.session_limits = dataclasses.replace(limits, timeout_s=session_timeout_s)
        self._session: SandboxSession | None = None

    def judge(self, program: str, tests: PythonTests) -> JudgeReport:
        """The verdict on ``program`` (the same as :func:`judge_python` would give)."""
        if self._session is None or self._session.timed_out:
            self.close()
            self._session = self.box.spawn(  # type: ignore[attr-defined]
                [PYTHON, "-I", "-S", WORKER_FILE, "--zygote"], files={WORKER_FILE: worker_source()},
                limits=self.session_limits)
        report, alive = _judge_one_in_batch(self._session, program, tests, self.limits)  # type: ignore[arg-type]
        if not alive:
            self.close()
        return report if report is not None else judge_python(program, tests, sandbox=self.box, limits=self.limits)

    def close(self) -> None:
        """Stops the zygote (a later :meth:`judge` starts a new one). Safe to call twice."""
        session, self._session = self._session, None
        if session is not None:
            session.close()

    def __del__(self) -> None:
        self.close()


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
) -> tuple[JudgeReport | None, bool]:
    """Returns (the report, or None to re-judge the program alone; whether the batch can go on)."""
    start = time.monotonic()
    syntax_error = check_syntax(program)
    if syntax_error is not None:
        return JudgeReport(False, reason=syntax_error, failure=Failure(FailureKind.PARSE_ERROR, syntax_error)), True
    report, nonce = JudgeReport(False), secrets.token_hex(16)
    code = instrument_tests(tests.test_source)
    _run_tests(session, tests, code, report, {"program": program}, start + limits.timeout_s, nonce)
    done = _end_job(session, nonce)
    report.duration_s = time.monotonic() - start
    if done is None:  # the zygote died or hung; a verdict the tests themselves reached still stands
        reached = report.passed or (report.failure is None and bool(report.reason))
        return (report if reached else None), False
    report.output = str(done.get("log", ""))
    return report, True


def _end_job(session: SandboxSession, nonce: str) -> dict[str, Any] | None:
    """Ends a batch job; returns the zygote's ``done`` message, or None if the zygote is gone.

    Lines before it (anything the dead candidate wrote to the channel) are skipped: only the zygote knows
    the fresh seal it must echo."""
    seal = secrets.token_hex(16)
    deadline = time.monotonic() + 5.0
    if not session.write(codec.dumps({"end": nonce, "seal": seal}), deadline):
        return None
    while (line := session.read_line(deadline)) is not None:
        try:
            message = codec.loads(line)
        except codec.CodecError:
            continue
        if message.get("done") == seal:
            return message
    return None
