"""Functional tests of rlvr_gym.sandbox: the API, limits and result classification (bwrap back-end)."""

from __future__ import annotations

import dataclasses
import shutil
import signal
import time
import warnings

import pytest

from rlvr_gym import FailureKind
from rlvr_gym.sandbox import SandboxLimits, SandboxResult, SandboxUnavailableError, get_sandbox
from rlvr_gym.sandbox.base import classify_exit, collect_files, make_workdir, remove_tree

FAST = SandboxLimits(timeout_s=5.0, cpu_time_s=2, memory_limit_mb=512)


@pytest.fixture(scope="module")
def box():  # type: ignore[no-untyped-def]
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    try:
        return get_sandbox("bwrap")
    except SandboxUnavailableError as error:
        pytest.skip(str(error))


def test_runs_program_with_files_stdin_and_collects(box) -> None:  # type: ignore[no-untyped-def]
    program = "import sys\nopen('out/result.txt','w').write(sys.stdin.read().upper())\nprint(open('data.txt').read())"
    result = box.run(["sh", "-c", "mkdir out && python3 main.py"], files={"main.py": program, "data.txt": "abc"},
                     stdin="hello", collect=["out"], limits=FAST)
    assert result.ok, result
    assert result.stdout == "abc\n"
    assert result.files == {"out/result.txt": b"HELLO"}
    assert result.failure() is None


def test_nonzero_exit_is_not_a_sandbox_failure(box) -> None:  # type: ignore[no-untyped-def]
    result = box.run(["python3", "-c", "import sys; print('x', file=sys.stderr); sys.exit(3)"], limits=FAST)
    assert (result.exit_code, result.stderr, result.ok, result.failure()) == (3, "x\n", False, None)


def test_runs_as_nobody_in_workspace_with_cleared_env(box) -> None:  # type: ignore[no-untyped-def]
    code = "import os; print(os.getuid(), os.getgid(), os.getcwd(), sorted(os.environ))"
    result = box.run(["python3", "-c", code], env={"EXTRA": "1"}, limits=FAST)
    assert result.stdout.split(" ", 3)[:3] == ["65534", "65534", "/workspace"]
    assert "EXTRA" in result.stdout and "HOSTNAME" not in result.stdout


def test_wall_clock_timeout(box) -> None:  # type: ignore[no-untyped-def]
    result = box.run(["sleep", "30"], limits=SandboxLimits(timeout_s=0.5))
    assert result.timed_out and result.exit_code is None
    assert 0.5 <= result.duration_s < 3.0
    failure = result.failure()
    assert failure is not None and failure.kind is FailureKind.TIMEOUT


def test_cpu_time_limit(box) -> None:  # type: ignore[no-untyped-def]
    # 1 s of CPU can take many seconds of wall time on a loaded machine, hence the generous wall limit
    result = box.run(["python3", "-c", "while True: pass"], limits=SandboxLimits(timeout_s=30, cpu_time_s=1))
    assert result.killed_by == "cpu_time" and not result.timed_out
    assert result.failure().kind is FailureKind.TIMEOUT  # type: ignore[union-attr]


def test_memory_limit(box) -> None:  # type: ignore[no-untyped-def]
    result = box.run(["python3", "-c", "x = bytearray(1024 * 1024 * 1024)"], limits=FAST)
    assert result.killed_by == "memory" and result.exit_code == 1
    assert result.failure().kind is FailureKind.MEMORY_LIMIT  # type: ignore[union-attr]


def test_output_limit_kills_and_truncates(box) -> None:  # type: ignore[no-untyped-def]
    result = box.run(["python3", "-c", "while True: print('y' * 1000)"], limits=SandboxLimits(output_limit_bytes=4096))
    assert result.killed_by == "output" and len(result.stdout) == 4096 and result.exit_code is None
    assert result.failure().kind is FailureKind.OUTPUT_LIMIT  # type: ignore[union-attr]


def test_file_size_limit(box) -> None:  # type: ignore[no-untyped-def]
    result = box.run(["sh", "-c", "head -c 3000000 /dev/zero > big"], limits=SandboxLimits(file_size_limit_mb=1))
    assert result.killed_by == "file_size" and result.exit_code == -signal.SIGXFSZ
    assert result.failure().kind is FailureKind.DISK_LIMIT  # type: ignore[union-attr]


def test_the_root_is_read_only_and_a_root_fill_is_a_disk_limit(box) -> None:  # type: ignore[no-untyped-def]
    if box.name != "bwrap":
        pytest.skip("only bubblewrap builds its own root")
    fill = "with open('/fill', 'wb') as f:\n    for _ in range(200): f.write(b'x' * 1048576)"
    result = box.run(["python3", "-c", fill], limits=FAST)
    assert "Read-only file system" in result.stderr and result.killed_by == "disk"
    assert result.failure().kind is FailureKind.DISK_LIMIT  # type: ignore[union-attr]
    writable = box.run(["sh", "-c", "echo a > /workspace/a && echo b > /tmp/b && echo c > /dev/shm/c && cat a /tmp/b"])
    assert writable.stdout == "a\nb\n"
    assert "Read-only" in box.run(["sh", "-c", "touch /dev/planted"], limits=FAST).stderr


def test_a_full_tmp_is_a_disk_limit(box) -> None:  # type: ignore[no-untyped-def]
    if box.name != "bwrap":
        pytest.skip("the subprocess back-end has no private /tmp")
    fill = "with open('/tmp/fill', 'wb') as f:\n    for _ in range(8): f.write(b'x' * 1048576)"
    result = box.run(["python3", "-c", fill], limits=dataclasses.replace(FAST, tmp_size_mb=2, file_size_limit_mb=64))
    assert "No space left on device" in result.stderr
    assert result.failure().kind is FailureKind.DISK_LIMIT  # type: ignore[union-attr]


def test_the_process_count_limit_is_its_own_failure(box) -> None:  # type: ignore[no-untyped-def]
    if box.name != "bwrap":
        pytest.skip("the subprocess back-end shares the caller's process count")
    bomb = "import os\nfor _ in range(100):\n    if os.fork() == 0:\n        import time; time.sleep(5); os._exit(0)"
    result = box.run(["python3", "-c", bomb], limits=dataclasses.replace(FAST, max_processes=8))
    assert result.killed_by == "processes", result.stderr
    assert result.failure().kind is FailureKind.PROCESS_LIMIT  # type: ignore[union-attr]


def test_host_paths_and_settings_are_not_in_the_sandbox_s_command_lines(box) -> None:  # type: ignore[no-untyped-def]
    if box.name != "bwrap":
        pytest.skip("only bubblewrap runs a pid 1 of its own")
    result = box.run(["sh", "-c", "for p in /proc/[0-9]*; do tr '\\000' ' ' < $p/cmdline; echo; done"])
    assert "--args" in result.stdout and "rlvr-sandbox-" not in result.stdout and "--bind" not in result.stdout


def test_missing_command_is_a_sandbox_error(box) -> None:  # type: ignore[no-untyped-def]
    result = box.run(["no-such-program"], limits=FAST)
    assert result.sandbox_error is not None and "no-such-program" in result.sandbox_error
    assert result.failure().kind is FailureKind.SANDBOX_ERROR  # type: ignore[union-attr]


def test_bad_arguments_raise(box) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="relative"):
        box.run(["true"], files={"../escape.txt": "x"})
    with pytest.raises(ValueError, match="relative"):
        box.run(["true"], files={"/etc/x": "x"})
    with pytest.raises(ValueError, match="argv"):
        box.run([])
    with pytest.raises(ValueError, match="timeout_s"):
        SandboxLimits(timeout_s=0)
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        get_sandbox("chroot")


def test_work_dirs_are_removed(box, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from rlvr_gym.sandbox.bwrap import BwrapSandbox

    local_box = BwrapSandbox(workdir_root=str(tmp_path))
    tmp_path.chmod(0o755)
    local_box.run(["sh", "-c", "echo x > f; mkdir d; ln -s / d/root"], limits=FAST)
    assert list(tmp_path.iterdir()) == []


def test_collect_skips_symlinks_everywhere(tmp_path) -> None:
    workdir = make_workdir({"a/ok.txt": "fine", "b.txt": "bee"}, None, str(tmp_path))
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret")
    (workdir / "link.txt").symlink_to(secret)
    (workdir / "linkdir").symlink_to(tmp_path)
    files = collect_files(workdir, [".", "link.txt", "linkdir/secret.txt", "missing"])
    assert files == {"a/ok.txt": b"fine", "b.txt": b"bee"}
    remove_tree(workdir)
    assert secret.read_text() == "host secret" and not workdir.exists()


def test_classify_exit() -> None:
    assert classify_exit(0, "", True) == (0, None)
    assert classify_exit(128 + 24, "", True) == (-24, "cpu_time")
    assert classify_exit(128 + 25, "", True) == (-25, "file_size")
    assert classify_exit(128 + 9, "", True) == (-9, "signal:9")
    assert classify_exit(-9, "", False) == (-9, "signal:9")
    assert classify_exit(137, "", False) == (137, None)  # plain exit(137) outside bwrap is not a signal
    assert classify_exit(1, "Traceback\nMemoryError\n", False) == (1, "memory")
    assert classify_exit(None, "", True) == (None, None)


def test_result_failure_kinds() -> None:
    assert SandboxResult(0, "", "").ok
    assert SandboxResult(0, "", "", killed_by="output").failure().kind is FailureKind.OUTPUT_LIMIT  # type: ignore[union-attr]
    assert SandboxResult(-9, "", "", killed_by="signal:9").failure().kind is FailureKind.SANDBOX_ERROR  # type: ignore[union-attr]
    assert SandboxResult(None, "", "", sandbox_error="boom").failure().kind is FailureKind.SANDBOX_ERROR  # type: ignore[union-attr]


def test_subprocess_backend_warns_and_runs() -> None:
    from rlvr_gym.sandbox.local import SubprocessSandbox, UnsafeSandboxWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        local = SubprocessSandbox()
    assert any(issubclass(w.category, UnsafeSandboxWarning) for w in caught)
    result = local.run(["python3", "-c", "import os; print(sorted(os.listdir('.')))"], files={"x.py": ""},
                       limits=FAST)
    assert result.ok and result.stdout == "['x.py']\n"
    assert local.run(["sleep", "5"], limits=SandboxLimits(timeout_s=0.3)).timed_out


@pytest.mark.docker
def test_docker_backend_runs() -> None:
    box = get_sandbox("docker")
    result = box.run(["python3", "-c", "import os; print(open('in.txt').read(), os.getuid())"],
                     files={"in.txt": "hi"}, limits=FAST)
    assert result.ok and result.stdout == "hi 65534\n"
    assert box.run(["python3", "-c", "import urllib.request as u; u.urlopen('http://1.1.1.1', timeout=2)"]).exit_code != 0


def test_spawned_session_talks_and_cleans_up(box) -> None:  # type: ignore[no-untyped-def]
    program = "import sys\nfor line in sys.stdin:\n    print(line.strip()[::-1], flush=True)\nprint('bye', file=sys.stderr)"
    session = box.spawn(["python3", "-c", program], limits=FAST)
    assert session.write(b"hello\n") and session.read_line() == b"olleh"
    assert session.write(b"abc\n") and session.read_line() == b"cba"
    result = session.close()
    assert (result.exit_code, result.stderr, result.timed_out) == (0, "bye\n", False)
    assert not session.workdir.exists()


def test_spawned_session_deadline(box) -> None:  # type: ignore[no-untyped-def]
    session = box.spawn(["sleep", "30"], limits=SandboxLimits(timeout_s=0.5))
    assert session.read_line() is None and session.timed_out
    result = session.close()
    assert result.timed_out and result.exit_code is None and result.duration_s < 3.0


def test_session_keeps_a_too_long_line(box) -> None:  # type: ignore[no-untyped-def]
    session = box.spawn(["sh", "-c", "echo short; head -c 5000 /dev/zero | tr '\\0' x; echo"], limits=FAST)
    assert session.read_line() == b"short"
    time.sleep(0.3)  # the long line and its newline arrive in one read
    assert session.read_line(max_bytes=1000) is None
    assert session.close().stdout == "x" * 5000 + "\n"  # not silently dropped


def test_restart_clock_gives_the_full_limit_from_the_go_ahead(box) -> None:  # type: ignore[no-untyped-def]
    session = box.spawn(["sh", "-c", "read -r go; sleep 1; echo done"], limits=SandboxLimits(timeout_s=2.0))
    time.sleep(1.5)  # waiting on stdin, ahead of time: without the restart only 0.5 s would be left
    session.restart_clock()
    assert session.write(b"go\n") and session.read_line() == b"done"
    result = session.close()
    assert result.exit_code == 0 and not result.timed_out and 1.0 <= result.duration_s < 2.0


def test_network_flag(box) -> None:  # type: ignore[no-untyped-def]
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    code = f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')"
    try:
        assert box.run(["python3", "-c", code], limits=FAST).stdout != "connected\n"
        allowed = dataclasses.replace(FAST, network=True)
        assert box.run(["python3", "-c", code], limits=allowed).stdout == "connected\n"
    finally:
        server.close()


def test_disk_limit_for_runs_and_sessions(box) -> None:  # type: ignore[no-untyped-def]
    limits = SandboxLimits(timeout_s=20, disk_limit_mb=4, file_size_limit_mb=2)
    fill = "for i in $(seq 100); do head -c 1000000 /dev/zero > f$i; sleep 0.05; done"
    result = box.run(["sh", "-c", fill], limits=limits)
    assert result.killed_by == "disk" and result.exit_code is None and result.duration_s < 10
    assert result.failure().kind is FailureKind.DISK_LIMIT  # type: ignore[union-attr]
    session = box.spawn(["sh", "-c", fill], limits=limits)
    assert session.read_line() is None
    assert session.close().killed_by == "disk"
