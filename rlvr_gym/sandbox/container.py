"""The Docker back-end, through the ``docker`` Python SDK. Used when a Docker engine answers."""

from __future__ import annotations

import io
import os
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import PurePosixPath
from typing import Any

from rlvr_gym.sandbox.base import (
    DEFAULT_LIMITS,
    MAX_COLLECT_BYTES,
    SandboxLimits,
    SandboxResult,
    SandboxUnavailableError,
    check_relative_path,
    classify_exit,
    encode_text,
)

DEFAULT_IMAGE = "rlvr-gym/sandbox:latest"
"""Built from ``docker/sandbox/Dockerfile`` (``docker build -t rlvr-gym/sandbox docker/sandbox``)."""
WORKDIR = "/workspace"


def docker_client(timeout_s: float = 2.0) -> Any:
    """Returns a connected ``docker.DockerClient``.

    Raises:
        SandboxUnavailableError: when the SDK is missing or no engine answers within ``timeout_s``.
    """
    try:
        import docker
    except ImportError:
        raise SandboxUnavailableError("the docker back-end needs the `docker` package (pip install docker)") from None
    if not os.environ.get("DOCKER_HOST") and not os.path.exists("/var/run/docker.sock"):
        # Asking the SDK anyway leaves a socket open inside urllib3 when the connection is refused.
        raise SandboxUnavailableError("no Docker engine: DOCKER_HOST is unset and /var/run/docker.sock is absent")
    client = None
    try:
        client = docker.from_env(timeout=max(1, int(timeout_s)))  # type: ignore[attr-defined]
        client.ping()
    except Exception as error:  # noqa: BLE001  (the SDK raises many types (DockerException, requests errors, FileNotFound))
        if client is not None:
            client.close()  # else its HTTP session's socket is left open ("unclosed socket" warnings)
        raise SandboxUnavailableError(f"no Docker engine answers: {error}") from None
    return client


class DockerSandbox:
    """Runs each command in a fresh container: no network, read-only root file system, a writable
    ``/workspace``, a size-limited ``/tmp``, uid 65534, all capabilities dropped, ``no-new-privileges``,
    memory and pids limits from :class:`SandboxLimits`, and the wall-clock limit enforced from here.

    Args:
        image: the image to run (must contain the interpreters the tasks need).
        client: a ``docker.DockerClient``; default: :func:`docker_client`.

    Raises:
        SandboxUnavailableError: when no engine answers.
    """

    name = "docker"

    def __init__(self, image: str = DEFAULT_IMAGE, client: Any = None) -> None:
        self.image = image
        self.client = client or docker_client()

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
        """Runs ``argv`` in ``/workspace`` of a new container. See :class:`rlvr_gym.sandbox.Sandbox`."""
        if not argv:
            raise ValueError("argv must name a command, got an empty list")
        payload = dict(files)
        command = list(argv)
        if stdin is not None:
            payload[".stdin"] = stdin
            command = ["sh", "-c", 'exec "$@" < .stdin', "sh", *command]
        start = time.monotonic()
        try:
            container = self.client.containers.create(self.image, command, **_container_options(limits, env))
        except Exception as error:  # noqa: BLE001  (any engine error is a sandbox error, not a crash)
            return SandboxResult(None, "", "", sandbox_error=f"could not create container: {error}")
        try:
            container.put_archive(WORKDIR, _tar(payload))
            container.start()
            return self._wait(container, limits, collect, start)
        finally:
            container.remove(force=True)

    def _wait(self, container: Any, limits: SandboxLimits, collect: Sequence[str], start: float) -> SandboxResult:
        timed_out = False
        try:
            status = container.wait(timeout=limits.timeout_s)
            returncode: int | None = int(status.get("StatusCode", -1))
        except Exception:  # noqa: BLE001  (requests' ReadTimeout: the wall-clock limit ran out)
            container.kill()
            timed_out, returncode = True, None
        stdout = container.logs(stdout=True, stderr=False)[: limits.output_limit_bytes].decode("utf-8", "replace")
        stderr = container.logs(stdout=False, stderr=True)[: limits.output_limit_bytes].decode("utf-8", "replace")
        exit_code, killed_by = classify_exit(returncode, stderr, signal_offset=True)
        if container.attrs.get("State", {}).get("OOMKilled"):
            killed_by = "memory"
        collected = _collect(container, collect)
        return SandboxResult(exit_code, stdout, stderr, timed_out, killed_by, None, time.monotonic() - start,
                             collected)


def _container_options(limits: SandboxLimits, env: Mapping[str, str] | None) -> dict[str, Any]:
    mib = 1024 * 1024
    return {
        "working_dir": WORKDIR,
        "user": "65534:65534",
        "environment": {"HOME": WORKDIR, "LANG": "C.UTF-8", **(env or {})},
        "network_disabled": not limits.network,
        "network_mode": None if limits.network else "none",
        "mem_limit": limits.memory_limit_mb * mib,
        "memswap_limit": limits.memory_limit_mb * mib,
        "pids_limit": limits.max_processes,
        "read_only": True,
        "tmpfs": {"/tmp": f"size={limits.tmp_size_mb}m",
                  WORKDIR: f"size={limits.disk_limit_mb}m,uid=65534,gid=65534,mode=0700"},
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "ulimits": _ulimits(limits),
    }


def _ulimits(limits: SandboxLimits) -> list[Any]:
    import docker.types

    mib = 1024 * 1024
    return [
        docker.types.Ulimit(name="cpu", soft=limits.cpu_time_s, hard=limits.cpu_time_s + 1),
        docker.types.Ulimit(name="fsize", soft=limits.file_size_limit_mb * mib, hard=limits.file_size_limit_mb * mib),
        docker.types.Ulimit(name="nofile", soft=limits.max_open_files, hard=limits.max_open_files),
    ]


def _tar(files: Mapping[str, str | bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for rel, content in files.items():
            data = encode_text(content)
            info = tarfile.TarInfo(str(check_relative_path(rel)))
            info.size, info.uid, info.gid, info.mode = len(data), 65534, 65534, 0o644
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _collect(container: Any, paths: Sequence[str]) -> dict[str, bytes]:
    """Reads regular files out of the stopped container; symlinks are skipped, never followed."""
    collected: dict[str, bytes] = {}
    for rel in paths:
        try:
            stream, _ = container.get_archive(f"{WORKDIR}/{check_relative_path(rel)}")
        except Exception:  # noqa: BLE001, S112  (a missing path is not collected)
            continue
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream)), mode="r") as archive:
            for member in archive.getmembers():
                if member.isfile() and sum(map(len, collected.values())) < MAX_COLLECT_BYTES:
                    name = str(PurePosixPath(rel).parent / member.name) if rel not in (".", "") else member.name
                    extracted = archive.extractfile(member)
                    if extracted is not None:
                        collected[_strip_dot(name)] = extracted.read()
    return collected


def _strip_dot(name: str) -> str:
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    return "/".join(parts)
