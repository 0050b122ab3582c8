"""The bubblewrap back-end (the default). See :mod:`rlvr_gym.sandbox` for what it isolates."""

from __future__ import annotations

import contextlib
import functools
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from rlvr_gym.sandbox.base import (
    DEFAULT_LIMITS,
    DiskWatch,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
    adopt_workdir,
    classify_exit,
    collect_files,
    make_workdir,
    remove_tree,
    run_process_tree,
)
from rlvr_gym.sandbox.session import SandboxSession

SANDBOX_UID = 65534
"""The uid (``nobody``) the sandboxed code sees inside its user namespace."""
HOST_UID_BASE = 1_000_000_000
"""Runs started as root use a fresh host uid in ``[HOST_UID_BASE, HOST_UID_BASE + 2**24)``, so the process
limit of one run is not shared with concurrent runs (RLIMIT_NPROC counts per host uid)."""
WORKDIR_MOUNT = "/workspace"
_LAUNCHER_ENV = {"PATH": "/usr/bin:/bin"}
# procps' kill if present (fast), else the system Python: either sends SIGKILL to every process of its uid.
_KILL_ALL = ([shutil.which("kill", path="/usr/bin:/bin") or "", "-KILL", "-1"] if shutil.which("kill", path="/usr/bin:/bin")
             else ["/usr/bin/python3", "-I", "-S", "-c", "import os, signal; os.kill(-1, signal.SIGKILL)"])
# util-linux's setpriv drops the launcher to a run's host uid; unlike Popen(user=...), which must fork() the
# whole (large) parent, it lets Python start the launcher with vfork(): about 8 ms less per run.
_SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin")
_ETC_ENTRIES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "localtime", "mime.types")
_NETWORK_ETC_ENTRIES = ("resolv.conf", "hosts", "nsswitch.conf", "ssl", "ca-certificates")
_BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORKDIR_MOUNT, "LANG": "C.UTF-8",
             "PYTHONDONTWRITEBYTECODE": "1", "TMPDIR": "/tmp"}


class BwrapSandbox:
    """Runs commands under bubblewrap as an unprivileged user, without network, with rlimits.

    Args:
        bwrap_path: the ``bwrap`` binary (default: found on PATH).
        extra_ro_binds: more host paths made visible read-only, as ``{host_path: sandbox_path}``.
        workdir_root: where work dirs are created (default: the system temp dir). Must be traversable by
            unprivileged users.

    Raises:
        SandboxUnavailableError: when ``bwrap`` or ``prlimit`` is missing, or user namespaces are off.
    """

    name = "bwrap"

    def __init__(
        self,
        bwrap_path: str | None = None,
        extra_ro_binds: Mapping[str, str] | None = None,
        workdir_root: str | None = None,
    ) -> None:
        self.bwrap_path = bwrap_path or shutil.which("bwrap") or ""
        self.prlimit_path = shutil.which("prlimit") or ""
        if not self.bwrap_path or not self.prlimit_path:
            raise SandboxUnavailableError(
                "bubblewrap sandbox needs `bwrap` and `prlimit` on PATH; install them with "
                "`apt-get install bubblewrap util-linux` (or use get_sandbox('docker'))"
            )
        self.extra_ro_binds = dict(extra_ro_binds or {})
        self.workdir_root = workdir_root
        _check_userns(self.bwrap_path, self.prlimit_path)

    def run(
        self,
        argv: Sequence[str],
        *,
        files: Mapping[str, str | bytes] = {},
        limits: SandboxLimits = DEFAULT_LIMITS,
        stdin: str | bytes | None = None,
        collect: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        workdir: str | Path | None = None,
    ) -> SandboxResult:
        """Runs ``argv`` in ``/workspace``, a fresh dir holding ``files``. See :class:`Sandbox`.

        Args:
            workdir: optional caller-owned host dir to use as ``/workspace`` instead of a fresh one (for
                multi-step episodes on a persistent file system); ``files`` are written into it, and it is
                kept after the run. Everything in it becomes writable by the sandboxed code.

        Raises:
            ValueError: on an empty ``argv`` or a file path that leaves the work dir.
        """
        if not argv:
            raise ValueError("argv must name a command, got an empty list")
        host_uid = _host_uid()
        keep = workdir is not None
        workdir = adopt_workdir(Path(workdir), files, host_uid) if keep else make_workdir(  # type: ignore[arg-type]
            files, host_uid, self.workdir_root)
        outcome = None
        try:
            as_user, user = _launch_as(host_uid)
            with self._command(argv, workdir, limits, env or {}, host_uid) as (cmd, args_fd):
                outcome = run_process_tree(
                    as_user + cmd, stdin=stdin, timeout_s=limits.timeout_s,
                    output_limit_bytes=limits.output_limit_bytes, env=_LAUNCHER_ENV, user=user,
                    disk_exceeded=DiskWatch(workdir, limits.disk_limit_mb).exceeded, pass_fds=(args_fd,),
                )
            stdout = outcome.stdout.decode("utf-8", "replace")
            stderr = outcome.stderr.decode("utf-8", "replace")
            sandbox_error = outcome.launch_error or _launcher_error(outcome.returncode, stderr)
            exit_code, killed_by = classify_exit(outcome.returncode, stderr, signal_offset=True)
            if outcome.limit_hit:
                killed_by = outcome.limit_hit
            return SandboxResult(
                exit_code, stdout, stderr, outcome.timed_out, killed_by, sandbox_error, outcome.duration_s,
                collect_files(workdir, collect) if collect else {},
            )
        finally:
            if outcome is None or not _ended_cleanly(outcome.returncode, outcome.timed_out, outcome.limit_hit):
                _sweep(host_uid)
            if not keep:
                remove_tree(workdir)

    def spawn(
        self,
        argv: Sequence[str],
        *,
        files: Mapping[str, str | bytes] = {},
        limits: SandboxLimits = DEFAULT_LIMITS,
        env: Mapping[str, str] | None = None,
    ) -> SandboxSession:
        """Starts ``argv`` like :meth:`run` but returns at once with a :class:`SandboxSession` to talk to it
        through stdin/stdout. The caller must ``close()`` it (or use it as a context manager). The session
        dies when the *thread* that spawned it exits (``--die-with-parent`` follows the launching thread), so
        spawn from a thread that outlives the session.

        Raises:
            ValueError: on an empty ``argv`` or a file path that leaves the work dir.
        """
        if not argv:
            raise ValueError("argv must name a command, got an empty list")
        host_uid = _host_uid()
        workdir = make_workdir(files, host_uid, self.workdir_root)
        try:
            as_user, user = _launch_as(host_uid)
            with self._command(argv, workdir, limits, env or {}, host_uid) as (cmd, args_fd):
                session = SandboxSession(as_user + cmd, limits, workdir, user, _LAUNCHER_ENV, signal_offset=True,
                                         pass_fds=(args_fd,))
            session.on_close = functools.partial(_sweep, host_uid)
            return session
        except BaseException:
            remove_tree(workdir)
            raise

    @contextlib.contextmanager
    def _command(
        self, argv: Sequence[str], workdir: Path, limits: SandboxLimits, env: Mapping[str, str], host_uid: int
    ) -> Iterator[tuple[list[str], int]]:
        """The launcher command and the read end of a pipe holding bwrap's own options (``--args FD``), so
        that no host path or setting shows in ``/proc/1/cmdline`` inside the sandbox (pid 1 there is bwrap)."""
        rlimits = _prlimit_args(limits, host_uid)
        namespaces = ["--unshare-all", "--unshare-user", "--disable-userns"]
        if limits.network:
            namespaces.append("--share-net")
        tmp_bytes = str(limits.tmp_size_mb * 1024 * 1024)
        # The root (bwrap's own tmpfs, which no limit covers) and /dev are remounted read-only once every
        # mount point exists: the program can write only to /workspace, /tmp and /dev/shm, all capped.
        mounts = [
            "--ro-bind", "/usr", "/usr",
            "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib",
            "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/sbin", "/sbin",
            "--proc", "/proc", "--dev", "/dev",
            "--mqueue", "/dev/mqueue",  # the sandbox's own POSIX message queues, listed so a sweep can remove them
            "--size", tmp_bytes, "--tmpfs", "/dev/shm",
            "--size", tmp_bytes, "--tmpfs", "/tmp",
            "--bind", str(workdir), WORKDIR_MOUNT,
        ]
        for entry in _ETC_ENTRIES + (_NETWORK_ETC_ENTRIES if limits.network else ()):
            mounts += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
        for host_path, sandbox_path in self.extra_ro_binds.items():
            mounts += ["--ro-bind", host_path, sandbox_path]
        mounts += ["--remount-ro", "/dev", "--remount-ro", "/"]
        environment = ["--clearenv"]
        for key, value in {**_BASE_ENV, **env}.items():
            environment += ["--setenv", key, value]
        identity = ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--hostname", "sandbox"]
        session = ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--chdir", WORKDIR_MOUNT]
        options = [*namespaces, *identity, *session, *mounts, *environment]
        blob = b"".join(os.fsencode(option) + b"\0" for option in options)
        read_fd, write_fd = os.pipe()
        try:
            with os.fdopen(write_fd, "wb") as pipe:  # a few KiB: fits the pipe's buffer, never blocks
                pipe.write(blob)
            yield [self.prlimit_path, *rlimits, "--", self.bwrap_path, "--args", str(read_fd), "--", *argv], read_fd
        finally:
            os.close(read_fd)


def _prlimit_args(limits: SandboxLimits, host_uid: int) -> list[str]:
    mib = 1024 * 1024
    nproc = limits.max_processes
    if os.geteuid() != 0:
        # Without root we cannot switch to a fresh uid; the limit counts this user's other processes too.
        nproc += _count_processes(host_uid)
    return [
        f"--as={limits.memory_limit_mb * mib}",
        f"--cpu={limits.cpu_time_s}:{limits.cpu_time_s + 1}",
        f"--fsize={limits.file_size_limit_mb * mib}",
        f"--nproc={nproc}",
        f"--nofile={limits.max_open_files}",
        "--core=0",
    ]


def _launch_as(host_uid: int) -> tuple[list[str], int | None]:
    """How the launcher becomes the run's host uid: a command prefix, or the uid for ``Popen(user=...)``.

    As root: ``setpriv`` with real, effective and saved uid and gid set to ``host_uid`` and no supplementary
    groups (the same credentials as ``Popen(user=, group=, extra_groups=[])``, capabilities dropped by the
    uid change); without ``setpriv``, Popen's own switch. Not root: nothing to switch.
    """
    if os.geteuid() != 0:
        return [], None
    if _SETPRIV:
        return [_SETPRIV, f"--reuid={host_uid}", f"--regid={host_uid}", "--clear-groups", "--"], None
    return [], host_uid


def _host_uid() -> int:
    if os.geteuid() == 0:
        return HOST_UID_BASE + secrets.randbelow(2**24)
    return os.geteuid()


def _ended_cleanly(returncode: int | None, timed_out: bool, limit_hit: str | None) -> bool:
    """A run whose command exited by itself: the PID namespace is already being torn down by the kernel,
    so the synchronous sweep (one more process start) is skipped."""
    return returncode is not None and 0 <= returncode < 128 and not timed_out and limit_hit is None


def _sweep(host_uid: int) -> None:
    """Kills every process of a run's private host uid, synchronously.

    The PID namespace dies with the run, but the kernel tears it down asynchronously after bwrap exits, so
    a fork bomb can run on for a moment after a timeout. ``kill -KILL -1`` run as that uid signals all of
    its processes at once (the kernel blocks forks during the sweep). Only as root: without root the uid
    is the caller's own, and ``kill -1`` would hit the caller's other processes.
    """
    if os.geteuid() != 0 or host_uid < HOST_UID_BASE:
        return
    as_user, user = _launch_as(host_uid)
    subprocess.run(as_user + _KILL_ALL, check=False, capture_output=True, user=user, group=user,
                   extra_groups=None if user is None else [], env=_LAUNCHER_ENV, timeout=10)


def _count_processes(uid: int) -> int:
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += entry.stat().st_uid == uid
            except OSError:
                pass
    return count


def _launcher_error(returncode: int | None, stderr: str) -> str | None:
    """bwrap reports its own setup failures as ``bwrap: ...`` on stderr with status 1."""
    if returncode == 1 and stderr.startswith("bwrap: "):
        return stderr.strip().splitlines()[0]
    if returncode in (126, 127) and stderr.startswith(("prlimit: ", "setpriv: ")):
        return stderr.strip().splitlines()[0]
    return None


@functools.cache
def _check_userns(bwrap_path: str, prlimit_path: str) -> None:
    """Runs ``true`` in a minimal sandbox once per process; raises when bubblewrap cannot start."""
    user = _host_uid()
    cmd = [bwrap_path, "--unshare-all", "--unshare-user", "--ro-bind", "/usr", "/usr",
           "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--", "/usr/bin/true"]
    try:
        done = subprocess.run(cmd, check=False, capture_output=True, timeout=10, user=user if os.geteuid() == 0 else None,
                              env={"PATH": "/usr/bin:/bin"})
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SandboxUnavailableError(f"bubblewrap could not start: {error}") from None
    if done.returncode != 0:
        raise SandboxUnavailableError(
            f"bubblewrap cannot create a sandbox here ({done.stderr.decode(errors='replace').strip()}); "
            "unprivileged user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone=1)"
        )
