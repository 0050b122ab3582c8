"""Process sandboxes for untrusted code: bubblewrap (default), Docker, plain subprocess (opt-in).

Usage::

    from rlvr_gym.sandbox import SandboxLimits, get_sandbox

    box = get_sandbox()                       # "auto": Docker if an engine answers, else bubblewrap
    result = box.run(["python3", "main.py"], files={"main.py": "print(6 * 7)"},
                     limits=SandboxLimits(timeout_s=5, memory_limit_mb=512), collect=["out.txt"])
    result.ok, result.stdout, result.failure()

Interactive runs: ``box.spawn(argv, files=..., limits=...)`` (bwrap and subprocess back-ends) returns a
:class:`SandboxSession` to exchange lines with the process through its stdin/stdout under the same limits;
the code envs use it to keep hidden tests outside the sandbox.

Every run gets a fresh private work dir (its current directory) holding ``files``; the dir is deleted after
the run. Limits are parameters with units (:class:`SandboxLimits`); a run that hits one reports it in
``SandboxResult.killed_by`` / ``timed_out`` and as a typed :class:`rlvr_gym.Failure` from
``SandboxResult.failure()``: ``timeout`` (wall clock, CPU time), ``memory_limit``, ``disk_limit`` (file
size, the work dir's disk cap, a full ``/tmp``, the read-only root), ``output_limit``, ``process_limit``;
``sandbox_error`` for a sandbox that failed or a process killed by another signal. Inside bwrap and Docker the Python interpreter is the system's ``python3``
(``/usr/bin/python3``), not the caller's virtual environment.

What each back-end isolates
---------------------------
``bwrap`` (bubblewrap; ``apt-get install bubblewrap``):
    * processes: new PID, IPC, UTS, cgroup and user namespaces; the code runs as uid/gid 65534 inside and,
      when we are root, as a fresh unprivileged host uid per run (so RLIMIT_NPROC is per run and holds: as
      root it would be ignored); ``--disable-userns`` forbids nested namespaces; every process dies with the
      sandbox (PID namespace + ``--die-with-parent``), the launcher's process group is killed at the end,
      and after a run that did not exit by itself (timeout, output limit, signal) every process of the run's
      private uid is killed synchronously (the kernel tears a PID namespace down asynchronously).
    * file system: only ``/usr`` (read-only, with the ``/bin``, ``/lib`` symlinks), a few harmless ``/etc``
      files (ld.so cache, alternatives, localtime), a fresh ``/proc`` and minimal ``/dev``, size-limited
      private ``/tmp`` and ``/dev/shm``, and the work dir (``/workspace``, the only writable host path). No
      home directories, no ``/etc/passwd``, no ``/root``, no other work dirs. The root (bubblewrap's own
      tmpfs, which no limit would cover) and ``/dev`` are remounted read-only: ``/workspace``, ``/tmp`` and
      ``/dev/shm`` are the only writable places, all capped. bwrap's options reach it through a pipe
      (``--args``), so ``/proc/1/cmdline`` inside shows no host path.
    * network: a new, empty network namespace (no interfaces but a down loopback) unless ``network=True``.
    * environment: cleared; only PATH, HOME, LANG, TMPDIR, PYTHONDONTWRITEBYTECODE and the caller's ``env``.
    * resources: RLIMIT_AS (memory per process), RLIMIT_CPU, RLIMIT_FSIZE, RLIMIT_NPROC, RLIMIT_NOFILE, core
      dumps off; a wall-clock timeout, an output cap and a disk cap on the work dir (polled every 0.25 s)
      enforced by the parent.
    * persistent work dirs: ``run(..., workdir=path)`` reuses a caller-owned dir across runs (multi-turn
      shell episodes); file paths are checked so nothing is ever written through a planted symlink.
    * not isolated: the host kernel is shared (a kernel exploit escapes; no seccomp filter is installed);
      total memory is bounded only by processes x RLIMIT_AS, not by a cgroup; the disk cap is polled, so a
      fast writer can overshoot it by what it writes in 0.25 s; CPU time is per process, so many processes can
      share the CPU until the wall-clock limit; timing and ``/proc`` kernel-wide information (uptime, load,
      CPU model) are visible; ``/proc/self/mountinfo`` shows the host path of the work dir (a random
      temporary dir name).
``docker`` (``docker`` SDK, image from ``docker/sandbox/Dockerfile``):
    * a fresh container per run: no network (``network_mode=none``), read-only root, tmpfs ``/workspace``
      and ``/tmp``, uid 65534, all capabilities dropped, ``no-new-privileges``, cgroup memory and pids limits
      (total, unlike bwrap), ulimits for CPU time, file size and open files, wall-clock timeout from here.
    * not isolated: the host kernel (as with bwrap); ~0.5-1 s start-up per run.
``subprocess`` (opt-in, warns loudly):
    * only rlimits (AS, CPU, FSIZE, NOFILE), a wall-clock timeout, a temporary work dir as the current
      directory and a cleared environment. **No** file-system, network, process or user isolation: the code
      can read and write whatever the current user can, and processes that leave the process group survive.
"""

from __future__ import annotations

import os

from rlvr_gym.sandbox.base import (
    Sandbox,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
)
from rlvr_gym.sandbox.session import SandboxSession

BACKENDS = ("auto", "bwrap", "docker", "subprocess")
ENV_VAR = "RLVR_GYM_SANDBOX"
"""Environment variable that overrides ``backend="auto"`` (e.g. ``RLVR_GYM_SANDBOX=bwrap``)."""

_CACHE: dict[str, Sandbox] = {}


def get_sandbox(backend: str = "auto") -> Sandbox:
    """Returns a sandbox back-end (cached per process).

    Args:
        backend: ``"auto"`` (the ``RLVR_GYM_SANDBOX`` variable if set; else Docker when an engine answers,
            else bubblewrap), ``"bwrap"``, ``"docker"``, or ``"subprocess"`` (no isolation; warns loudly).

    Raises:
        ValueError: on an unknown back-end name.
        SandboxUnavailableError: when the back-end cannot run here, saying what to install.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown sandbox backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend == "auto":
        backend = os.environ.get(ENV_VAR, "auto")
        if backend not in BACKENDS:
            raise ValueError(f"{ENV_VAR}={backend!r} is not a sandbox backend; choose one of {', '.join(BACKENDS)}")
    if backend not in _CACHE:
        _CACHE[backend] = _build(backend)
    return _CACHE[backend]


def _build(backend: str) -> Sandbox:
    from rlvr_gym.sandbox.bwrap import BwrapSandbox
    from rlvr_gym.sandbox.container import DockerSandbox
    from rlvr_gym.sandbox.local import SubprocessSandbox

    if backend == "bwrap":
        return BwrapSandbox()
    if backend == "docker":
        return DockerSandbox()
    if backend == "subprocess":
        return SubprocessSandbox()
    try:
        return DockerSandbox()
    except SandboxUnavailableError as docker_error:
        try:
            return BwrapSandbox()
        except SandboxUnavailableError as bwrap_error:
            raise SandboxUnavailableError(
                f"no sandbox back-end works here: docker ({docker_error}); bwrap ({bwrap_error}). "
                "Install bubblewrap, start a Docker engine, or opt in to get_sandbox('subprocess') for "
                "trusted code only."
            ) from None


__all__ = [
    "BACKENDS",
    "Sandbox",
    "SandboxLimits",
    "SandboxResult",
    "SandboxSession",
    "SandboxUnavailableError",
    "get_sandbox",
]
