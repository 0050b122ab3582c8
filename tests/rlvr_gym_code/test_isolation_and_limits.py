"""The Python judge, fresh and batch mode: each limit is its own failure kind, programs judged one after
another in one sandbox see nothing of each other's files, and a program that exits mid-call frees the judge."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Iterator

import pytest
from rlvr_gym_code.batch import BatchJudge
from rlvr_gym_code.judge import JudgeReport, PythonTests, judge_python

from rlvr_gym import FailureKind
from rlvr_gym.sandbox import SandboxLimits

LIMITS = SandboxLimits(timeout_s=20.0, cpu_time_s=20, memory_limit_mb=512, max_processes=32, output_limit_bytes=16384)
TESTS = PythonTests("f", "def check(candidate):\n    assert candidate() == 'ok'\n")

Judge = Callable[[str], JudgeReport]


@pytest.fixture(params=["fresh", "batch"])
def judge(request: pytest.FixtureRequest) -> Iterator[Judge]:
    if request.param == "fresh":
        yield lambda program: judge_python(program, TESTS, limits=LIMITS)
        return
    batch = BatchJudge(limits=LIMITS)
    try:
        yield lambda program: batch.judge(program, TESTS)
    finally:
        batch.close()


def _function(body: str) -> str:
    return "import os, sys, threading, time\n\ndef f():\n" + textwrap.indent(textwrap.dedent(body), "    ")


LIMIT_PROGRAMS = {
    FailureKind.MEMORY_LIMIT: "x = bytearray(2 * 1024 ** 3)\nreturn 'ok'",
    FailureKind.DISK_LIMIT: """
        with open('/tmp/fill', 'wb') as handle:
            for _ in range(200):
                handle.write(b'x' * 1048576)
        return 'ok'""",
    FailureKind.OUTPUT_LIMIT: "while True:\n    print('y' * 4096)",
    FailureKind.PROCESS_LIMIT: """
        while True:
            if os.fork() == 0:
                time.sleep(30)
                os._exit(0)""",
    FailureKind.TIMEOUT: "while True:\n    pass",
}


@pytest.mark.parametrize("kind", list(LIMIT_PROGRAMS), ids=lambda k: k.value)
def test_each_limit_is_its_own_failure_kind(judge: Judge, kind: FailureKind) -> None:
    report = judge(_function(LIMIT_PROGRAMS[kind]))
    assert not report.passed
    assert report.failure is not None and report.failure.kind is kind, (report.failure, report.reason)


def test_a_write_to_the_root_is_refused_and_typed(judge: Judge) -> None:
    report = judge(_function("open('/planted', 'w').write('x')\nreturn 'ok'"))
    assert report.failure is not None and report.failure.kind is FailureKind.DISK_LIMIT
    assert "Read-only file system" in report.reason


PLANT = _function("""
    for path in ('/planted', '/workspace/planted', os.path.expanduser('~/planted_home'), '/tmp/planted',
                 '/dev/shm/planted', '/workspace/job/planted', '/planted_dir/x'):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            open(path, 'w').write('from an earlier program')
        except OSError:
            pass
    os.chmod('/tmp', 0o700)
    return 'ok'""")
LOOK = _function("""
    seen = []
    for top in ('/', '/workspace', os.path.expanduser('~'), '/tmp', '/dev/shm', '/workspace/job'):
        for name in os.listdir(top):
            if 'planted' in name:
                seen.append(os.path.join(top, name))
    if oct(os.stat('/tmp').st_mode & 0o7777) != '0o1777':
        seen.append('the mode of /tmp')
    return 'ok' if not seen else repr(seen)""")


def test_a_program_sees_nothing_an_earlier_one_wrote() -> None:
    batch = BatchJudge(limits=LIMITS)
    try:
        planted = batch.judge(PLANT, TESTS)
        assert planted.passed, planted.reason  # the planting program ran to its end
        zygote = batch._session
        looked = batch.judge(LOOK, TESTS)
        assert batch._session is zygote  # the same sandbox judged both
    finally:
        batch.close()
    assert looked.passed, looked.reason


def test_a_program_that_exits_mid_call_frees_the_batch_judge_at_once() -> None:
    batch = BatchJudge(limits=SandboxLimits(timeout_s=60.0, cpu_time_s=60))
    try:
        report = batch.judge(_function("os._exit(3)"), TESTS)
        assert not report.passed and "exited during a call (status 3)" in report.reason
        # a generous bound: before, the judge waited for the 60 s deadline
        assert report.duration_s < 30.0
        assert batch.judge(_function("return 'ok'"), TESTS).passed
    finally:
        batch.close()


def test_a_hang_while_loading_is_a_timeout_in_batch_mode() -> None:
    batch = BatchJudge(limits=SandboxLimits(timeout_s=2.0, cpu_time_s=10))
    try:
        report = batch.judge("while True:\n    pass\n", TESTS)
    finally:
        batch.close()
    assert report.failure is not None and report.failure.kind is FailureKind.TIMEOUT


def test_batch_mode_reports_a_failing_programs_output_without_following_its_symlinks() -> None:
    batch = BatchJudge(limits=LIMITS)
    try:
        printed = batch.judge(_function("print('looking at', 41 + 1)\nreturn 'no'"), TESTS)
        # the log read from the host side must not follow a link the program planted there
        linked = batch.judge(_function("""
            os.remove('output.log')
            os.symlink('/etc/passwd', 'output.log')
            return 'no'"""), TESTS)
        job_linked = batch.judge(_function("""
            import shutil
            os.chdir('/workspace')
            shutil.rmtree('/workspace/job')
            os.symlink('/etc', '/workspace/job')
            return 'no'"""), TESTS)
        after = batch.judge(_function("return 'ok'"), TESTS)
    finally:
        batch.close()
    assert not printed.passed and "looking at 42" in printed.output
    assert not linked.passed and linked.output == ""
    assert not job_linked.passed and job_linked.output == ""
    assert after.passed, after.reason


def test_batch_mode_refuses_a_sandbox_that_would_empty_the_hosts_tmp() -> None:
    from rlvr_gym.sandbox import SandboxUnavailableError, get_sandbox

    with pytest.warns(UserWarning, match="NO isolation"):
        unsafe = get_sandbox("subprocess")
    with pytest.raises(SandboxUnavailableError, match="needs the 'bwrap' sandbox"):
        BatchJudge(unsafe)
