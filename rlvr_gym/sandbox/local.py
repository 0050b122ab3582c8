"""The plain-subprocess back-end: rlimits and a timeout, no isolation. Opt-in only."""

from __future__ import annotations

import shutil
import sys
import warnings
from collections.abc import Mapping, Sequence
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


class UnsafeSandboxWarning(UserWarning):
    """Code is about to run without isolation."""


class SubprocessSandbox:
    """Runs commands as the current user in a temporary dir, with rlimits, a timeout and a cleared
    environment. It does **not** isolate the file system, the network or other processes: code run here
    can read and write everything the current user can. Use it only for trusted code or when no other
    back-end exists, and never for policy-generated code on a machine you care about.
    """

    name = "subprocess"

    def __init__(self, workdir_root: str | None = None) -> None:
        self.prlimit_path = shutil.which("prlimit") or ""
        if not self.prlimit_path:
            raise SandboxUnavailableError("the subprocess sandbox needs `prlimit` (util-linux) on PATH")
        self.workdir_root = workdir_root
        warnings.warn(
            "rlvr_gym sandbox back-end 'subprocess' gives NO isolation: the code can read and write your files "
            "and reach the network. Use 'bwrap' or 'docker' for untrusted code.",
            UnsafeSandboxWarning,
            stacklevel=2,
        )
        print("WARNING: rlvr_gym is running code WITHOUT a sandbox (backend='subprocess')", file=sys.stderr)

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
        """Runs ``argv`` in a fresh temporary dir holding ``files`` (or in the caller's ``workdir``, kept
        afterwards). See :class:`rlvr_gym.sandbox.Sandbox`."""
        if not argv:
            raise ValueError("argv must name a command, got an empty list")
        keep = workdir is not None
        workdir = adopt_workdir(Path(workdir), files, None) if keep else make_workdir(  # type: ignore[arg-type]
            files, None, self.workdir_root)
        try:
            outcome = run_process_tree(
                self._command(argv, limits), stdin=stdin, timeout_s=limits.timeout_s,
                output_limit_bytes=limits.output_limit_bytes, env=_environment(workdir, env), cwd=workdir,
                disk_exceeded=DiskWatch(workdir, limits.disk_limit_mb).exceeded,
            )
            stdout = outcome.stdout.decode("utf-8", "replace")
            stderr = outcome.stderr.decode("utf-8", "replace")
            exit_code, killed_by = classify_exit(outcome.returncode, stderr, signal_offset=False)
            if outcome.limit_hit:
                killed_by = outcome.limit_hit
            files_out = collect_files(workdir, collect) if collect else {}
            return SandboxResult(exit_code, stdout, stderr, outcome.timed_out, killed_by, outcome.launch_error,
                                 outcome.duration_s, files_out)
        finally:
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
        """Starts ``argv`` and returns a :class:`SandboxSession` (see ``BwrapSandbox.spawn``)."""
        if not argv:
            raise ValueError("argv must name a command, got an empty list")
        workdir = make_workdir(files, None, self.workdir_root)
        try:
            return SandboxSession(self._command(argv, limits), limits, workdir, None, _environment(workdir, env),
                                  signal_offset=False, cwd=workdir)
        except BaseException:
            remove_tree(workdir)
            raise

    def _command(self, argv: Sequence[str], limits: SandboxLimits) -> list[str]:
        mib = 1024 * 1024
        rlimits = [f"--as={limits.memory_limit_mb * mib}", f"--cpu={limits.cpu_time_s}:{limits.cpu_time_s + 1}",
                   f"--fsize={limits.file_size_limit_mb * mib}", f"--nofile={limits.max_open_files}", "--core=0"]
        return [self.prlimit_path, *rlimits, "--", *argv]


def _environment(workdir: Path, env: Mapping[str, str] | None) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(workdir), "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", **(env or {})}
