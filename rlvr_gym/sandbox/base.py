"""What every sandbox back-end shares: limits, results, the work dir and the process runner."""

from __future__ import annotations

import dataclasses
import os
import selectors
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Protocol, runtime_checkable

from rlvr_gym.failures import Failure, FailureKind

MAX_COLLECT_BYTES = 64 * 1024 * 1024
"""Cap on the total size of the files returned by one run's ``collect``."""

_MEMORY_PATTERNS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")
_FILE_SIZE_PATTERNS = ("File too large",)
_DISK_PATTERNS = ("No space left on device", "Read-only file system", "Disk quota exceeded")
_PROCESS_PATTERNS = ("Resource temporarily unavailable", "fork: retry", "Cannot fork", "can't start new thread")
LIMIT_FAILURES = {
    "memory": FailureKind.MEMORY_LIMIT,
    "file_size": FailureKind.DISK_LIMIT,
    "disk": FailureKind.DISK_LIMIT,
    "output": FailureKind.OUTPUT_LIMIT,
    "processes": FailureKind.PROCESS_LIMIT,
    "cpu_time": FailureKind.TIMEOUT,
}
"""``SandboxResult.killed_by`` -> the failure kind it gives (other values, such as ``"signal:N"``, are
``SANDBOX_ERROR``)."""


class SandboxUnavailableError(RuntimeError):
    """The requested back-end cannot run on this machine (binary missing, no engine, no user namespaces)."""


@dataclasses.dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandbox run. Every field has its unit in its name.

    Attributes:
        timeout_s: wall-clock limit in seconds, enforced by the parent (the whole process tree is killed).
        cpu_time_s: CPU-time limit in seconds per process (RLIMIT_CPU; SIGXCPU at the limit).
        memory_limit_mb: address-space limit in MiB per process (RLIMIT_AS); Docker: the container's memory.
        file_size_limit_mb: largest file a process may write, in MiB (RLIMIT_FSIZE; SIGXFSZ beyond it).
        max_processes: processes and threads the sandboxed user may have (RLIMIT_NPROC; Docker: pids limit).
        output_limit_bytes: bytes kept of each of stdout and stderr; more kills the run (``killed_by="output"``).
        network: allow network access (bwrap: shares the host network namespace; off by default).
        max_open_files: open file descriptors per process (RLIMIT_NOFILE).
        tmp_size_mb: size of the private ``/tmp`` and ``/dev/shm`` tmpfs mounts, in MiB (bwrap, Docker).
        disk_limit_mb: host disk the work dir's files may take, in MiB, checked by the parent every 0.25 s
            (bwrap, subprocess; Docker: a tmpfs work dir); more kills the run (``killed_by="disk"``).
    """

    timeout_s: float = 10.0
    cpu_time_s: int = 10
    memory_limit_mb: int = 1024
    file_size_limit_mb: int = 16
    max_processes: int = 64
    output_limit_bytes: int = 65536
    network: bool = False
    max_open_files: int = 256
    tmp_size_mb: int = 64
    disk_limit_mb: int = 256

    def __post_init__(self) -> None:
        for name in ("timeout_s", "cpu_time_s", "memory_limit_mb", "file_size_limit_mb", "max_processes",
                     "output_limit_bytes", "max_open_files", "tmp_size_mb", "disk_limit_mb"):
            if getattr(self, name) <= 0:
                raise ValueError(f"SandboxLimits.{name} must be > 0, got {getattr(self, name)!r}")


DEFAULT_LIMITS = SandboxLimits()
"""The limits used when a caller gives none."""


@dataclasses.dataclass
class SandboxResult:
    """The outcome of one sandbox run.

    Attributes:
        exit_code: the command's exit status; ``-N`` when it died of signal N; None when it never finished
            (wall-clock timeout, output limit) or never started.
        stdout: standard output, decoded as UTF-8 (invalid bytes replaced), at most ``output_limit_bytes``.
        stderr: standard error, same rules.
        timed_out: the wall-clock limit ran out.
        killed_by: which limit ended the run: ``"memory"``, ``"cpu_time"``, ``"file_size"``, ``"output"``,
            ``"disk"`` (also a full ``/tmp`` or a write to the read-only root), ``"processes"``, ``"signal:N"``,
            or None.
        sandbox_error: why the sandbox itself failed (could not start, bad file path), or None.
        duration_s: wall-clock seconds from start to the end of the process tree.
        files: the collected files, by path relative to the work dir.
    """

    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    killed_by: str | None = None
    sandbox_error: str | None = None
    duration_s: float = 0.0
    files: dict[str, bytes] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Exit status 0, no timeout, no limit hit, no sandbox error."""
        return self.exit_code == 0 and not self.timed_out and self.killed_by is None and self.sandbox_error is None

    def failure(self) -> Failure | None:
        """The typed failure of this run, or None.

        A run that hit the wall-clock or CPU-time limit is a ``TIMEOUT``; the memory, disk (file size, work
        dir, ``/tmp``, read-only root), output and process-count limits each have their own kind (see
        :data:`LIMIT_FAILURES`); a run whose sandbox failed or that died of another signal is a
        ``SANDBOX_ERROR``. A program that simply exited non-zero is not a failure of the run (its verdict is
        the verifier's business), so that gives None.
        """
        details = {"exit_code": self.exit_code, "killed_by": self.killed_by, "stderr_tail": self.stderr[-500:]}
        if self.sandbox_error is not None:
            return Failure(FailureKind.SANDBOX_ERROR, f"sandbox error: {self.sandbox_error}", details)
        if self.timed_out:
            return Failure(FailureKind.TIMEOUT, f"wall-clock limit hit after {self.duration_s:.1f} s", details)
        if self.killed_by is not None:
            kind = LIMIT_FAILURES.get(self.killed_by, FailureKind.SANDBOX_ERROR)
            return Failure(kind, f"stopped by the {self.killed_by.replace('_', '-')} limit", details)
        return None


@runtime_checkable
class Sandbox(Protocol):
    """Runs a command in an isolated, fresh work dir.

    ``run(argv, files=..., limits=..., stdin=..., collect=..., env=...)`` writes ``files`` (relative path ->
    text or bytes) into a new private work dir, runs ``argv`` with that dir as the current directory, and
    returns a :class:`SandboxResult` with the files named in ``collect`` (relative paths; a directory means
    every regular file under it). The work dir is deleted afterwards. ``env`` adds environment variables to
    a cleared environment.
    """

    name: str

    def run(
        self,
        argv: Sequence[str],
        *,
        files: Mapping[str, str | bytes] = {},
        limits: SandboxLimits = DEFAULT_LIMITS,
        stdin: str | bytes | None = None,
        collect: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
    ) -> SandboxResult:
        """Runs ``argv``; see the class docstring."""
        ...


def encode_text(content: str | bytes) -> bytes:
    """UTF-8 bytes of a file's or stdin's content. Lone surrogates (``"\\ud800"``, which strict UTF-8
    refuses) are written as their 3-byte forms, so the sandboxed program meets invalid UTF-8 and reports it
    (Python: a SyntaxError) instead of the run raising ``UnicodeEncodeError`` on the host."""
    return content.encode("utf-8", "surrogatepass") if isinstance(content, str) else bytes(content)


# -- work dir ---------------------------------------------------------------------------------------------
def check_relative_path(path: str) -> PurePosixPath:
    """Validates a work-dir path: relative, no ``..``, not empty.

    Raises:
        ValueError: naming the bad path.
    """
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"sandbox file paths must be relative and stay in the work dir, got {path!r}")
    return pure


def make_workdir(files: Mapping[str, str | bytes], owner: int | None, root: str | None = None) -> Path:
    """Creates a private work dir holding ``files``, owned (with its contents) by uid/gid ``owner``."""
    workdir = Path(tempfile.mkdtemp(prefix="rlvr-sandbox-", dir=root))
    try:
        for rel, content in files.items():
            target = workdir / check_relative_path(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            data = encode_text(content)
            target.write_bytes(data)
        if owner is not None:
            for path in [workdir, *workdir.rglob("*")]:
                os.chown(path, owner, owner, follow_symlinks=False)
        os.chmod(workdir, 0o700)
    except BaseException:
        remove_tree(workdir)
        raise
    return workdir


def adopt_workdir(workdir: Path, files: Mapping[str, str | bytes], owner: int | None) -> Path:
    """Prepares a caller-owned, persistent work dir for a run: writes ``files`` into it and hands the tree
    to uid/gid ``owner`` (symlinks are re-owned, never followed).

    Raises:
        FileNotFoundError: when ``workdir`` is not an existing directory (or is a symlink).
    """
    if workdir.is_symlink() or not workdir.is_dir():
        raise FileNotFoundError(f"work dir {workdir} must be an existing directory (not a symlink)")
    root_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    os.close(root_fd)
    for rel, content in files.items():
        target = workdir / check_relative_path(rel)
        _refuse_symlinks(workdir, target)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(encode_text(content))
    if owner is not None:
        for top, dirs, names in os.walk(workdir, followlinks=False):
            os.chown(top, owner, owner, follow_symlinks=False)
            for name in dirs + names:
                os.chown(os.path.join(top, name), owner, owner, follow_symlinks=False)
    os.chmod(workdir, 0o700)
    return workdir


def _refuse_symlinks(root: Path, target: Path) -> None:
    current = root
    for part in target.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            raise ValueError(f"refusing to write through the symlink {current} planted in the work dir")


def remove_tree(path: Path) -> None:
    """Deletes a work dir without following symlinks the sandboxed code may have planted."""
    shutil.rmtree(path, ignore_errors=True)


def collect_files(workdir: Path, paths: Sequence[str]) -> dict[str, bytes]:
    """Reads the regular files named by ``paths`` (files or directories, relative to ``workdir``).

    Symlinks are never followed, at any path component, so code in the sandbox cannot make the collector
    read host files (``out.txt -> /etc/shadow``). Missing paths are skipped. At most
    :data:`MAX_COLLECT_BYTES` in all.
    """
    collected: dict[str, bytes] = {}
    root_fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel in paths:
            parts = check_relative_path(rel).parts
            parts = tuple(p for p in parts if p != ".")
            _collect_beneath(root_fd, parts, collected)
    finally:
        os.close(root_fd)
    return collected


def _collect_beneath(root_fd: int, parts: tuple[str, ...], out: dict[str, bytes]) -> None:
    fd = os.dup(root_fd)
    try:
        for part in parts:
            next_fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            os.close(fd)
            fd = next_fd
        _read_node(fd, "/".join(parts), out)
    except OSError:
        pass  # missing, a symlink, or unreadable: not collected
    finally:
        os.close(fd)


def _read_node(fd: int, rel: str, out: dict[str, bytes]) -> None:
    mode = os.fstat(fd).st_mode
    if stat.S_ISREG(mode):
        budget = MAX_COLLECT_BYTES - sum(len(v) for v in out.values())
        if budget > 0:
            with os.fdopen(os.dup(fd), "rb") as handle:
                out[rel] = handle.read(budget)
    elif stat.S_ISDIR(mode):
        for name in sorted(os.listdir(fd)):
            try:
                child = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
            except OSError:
                continue  # a symlink (ELOOP) or unreadable: skipped
            try:
                _read_node(child, f"{rel}/{name}" if rel else name, out)
            except OSError:
                pass
            finally:
                os.close(child)


# -- running a process tree -------------------------------------------------------------------------------
class DiskWatch:
    """Rate-limited check of the space a work dir's files take on the host disk (allocated blocks, no
    symlinks followed). The work dir is the only host disk a sandboxed run can write to.

    Args:
        root: the work dir.
        limit_mb: the limit, in MiB.
        every_s: the shortest interval between two walks of the tree, in seconds.
    """

    def __init__(self, root: Path, limit_mb: int, every_s: float = 0.25) -> None:
        self.root, self.limit_bytes, self.every_s = root, limit_mb * 1024 * 1024, every_s
        self._next = time.monotonic() + every_s

    def exceeded(self) -> bool:
        """True when the tree holds more than the limit (walks it at most once per ``every_s``)."""
        now = time.monotonic()
        if now < self._next:
            return False
        self._next = now + self.every_s
        return disk_usage_bytes(self.root) > self.limit_bytes


def disk_usage_bytes(root: Path) -> int:
    """Bytes allocated to the regular files under ``root`` (``st_blocks``; sparse files count what they
    use), symlinks not followed."""
    total = 0
    for top, _, names in os.walk(root, followlinks=False):
        for name in names:
            try:
                total += os.lstat(os.path.join(top, name)).st_blocks * 512
            except OSError:
                pass
    return total


@dataclasses.dataclass
class ProcessOutcome:
    """Raw outcome of :func:`run_process_tree`. ``limit_hit``: ``"output"``, ``"disk"`` or None."""

    returncode: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    limit_hit: str | None
    duration_s: float
    launch_error: str | None = None


def run_process_tree(
    cmd: Sequence[str],
    *,
    stdin: str | bytes | None,
    timeout_s: float,
    output_limit_bytes: int,
    env: Mapping[str, str],
    cwd: Path | None = None,
    user: int | None = None,
    disk_exceeded: Callable[[], bool] | None = None,
    pass_fds: Sequence[int] = (),
) -> ProcessOutcome:
    """Runs ``cmd`` in a new session, capturing capped stdout/stderr, and kills its process group when it
    exits, times out, writes more than ``output_limit_bytes`` to either stream, or ``disk_exceeded()``.
    ``pass_fds`` stay open in the child (e.g. bwrap's ``--args`` pipe)."""
    stdin_file = tempfile.TemporaryFile()  # noqa: SIM115  (closed right after Popen inherits it)
    if stdin is not None:
        stdin_file.write(encode_text(stdin))
        stdin_file.seek(0)
    start = time.monotonic()
    with stdin_file:
        try:
            proc = subprocess.Popen(
                list(cmd), stdin=stdin_file, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd,
                env=dict(env), start_new_session=True, close_fds=True, pass_fds=tuple(pass_fds),
                user=user, group=user, extra_groups=[] if user is not None else None,
            )
        except (OSError, ValueError) as error:  # E2BIG (argument over 128 KiB), an embedded NUL byte
            return ProcessOutcome(None, b"", b"", False, None, time.monotonic() - start, f"cannot start: {error}")
    try:
        stdout, stderr, timed_out, limit_hit = _pump(proc, start + timeout_s, output_limit_bytes, disk_exceeded)
    finally:
        _kill_group(proc)
    returncode = None if (timed_out or limit_hit) else proc.returncode
    return ProcessOutcome(returncode, stdout, stderr, timed_out, limit_hit, time.monotonic() - start)


def _pump(
    proc: subprocess.Popen[bytes], deadline: float, limit: int, disk_exceeded: Callable[[], bool] | None
) -> tuple[bytes, bytes, bool, str | None]:
    out, err = bytearray(), bytearray()
    buffers = {proc.stdout: out, proc.stderr: err}
    with selectors.DefaultSelector() as selector:
        for stream in buffers:
            selector.register(stream, selectors.EVENT_READ)  # type: ignore[arg-type]
        while selector.get_map() or proc.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return bytes(out), bytes(err), True, None
            if disk_exceeded is not None and disk_exceeded():
                return bytes(out), bytes(err), False, "disk"
            if not selector.get_map():  # both streams closed, the process still runs
                try:
                    proc.wait(timeout=min(remaining, 0.25))
                except subprocess.TimeoutExpired:
                    pass
                continue
            for key, _ in selector.select(timeout=min(remaining, 0.25)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffer = buffers[key.fileobj]  # type: ignore[index]
                buffer.extend(chunk)
                if len(buffer) > limit:
                    del buffer[limit:]
                    return bytes(out), bytes(err), False, "output"
    return bytes(out), bytes(err), False, None


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass


def classify_exit(returncode: int | None, stderr: str, signal_offset: bool) -> tuple[int | None, str | None]:
    """Maps a raw return code to ``(exit_code, killed_by)``.

    Args:
        returncode: the raw status (negative for a signal death, as ``subprocess`` reports it).
        stderr: the decoded standard error, scanned for out-of-memory, disk-full and fork-failure messages.
        signal_offset: True when the launcher reports a signal death as ``128 + N`` (bwrap does).
    """
    if returncode is None:
        return None, None
    signum = -returncode if returncode < 0 else 0
    if signal_offset and 128 < returncode < 128 + 65:
        signum = returncode - 128
    if signum in _SIGNALS:
        names = {signal.SIGXCPU.value: "cpu_time", signal.SIGXFSZ.value: "file_size"}
        return -signum, names.get(signum, f"signal:{signum}")
    # Python ignores SIGXFSZ and turns RLIMIT_AS into MemoryError, so those limits show up in stderr.
    if returncode != 0 and any(p in stderr[-4000:] for p in _MEMORY_PATTERNS):
        return returncode, "memory"
    if returncode != 0 and any(p in stderr[-4000:] for p in _FILE_SIZE_PATTERNS):
        return returncode, "file_size"
    if returncode != 0 and any(p in stderr[-4000:] for p in _DISK_PATTERNS):
        return returncode, "disk"
    if returncode != 0 and any(p in stderr[-4000:] for p in _PROCESS_PATTERNS):
        return returncode, "processes"
    return returncode, None


_SIGNALS = {s.value for s in signal.Signals}
