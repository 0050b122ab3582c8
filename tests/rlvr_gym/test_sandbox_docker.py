"""The Docker back-end against a fake engine client (no engine on the build machine): the container it asks
for is locked down, files go in and come out, and a timeout kills it. The real-engine test is marked docker."""

from __future__ import annotations

import io
import tarfile
from typing import Any

import pytest

pytest.importorskip("docker")

from rlvr_gym.sandbox import SandboxLimits
from rlvr_gym.sandbox.container import DockerSandbox


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class FakeContainer:
    def __init__(self, hang: bool) -> None:
        self.hang, self.killed, self.removed, self.archive = hang, False, False, b""
        self.attrs: dict[str, Any] = {"State": {"OOMKilled": False}}

    def put_archive(self, path: str, data: bytes) -> None:
        self.archive = data

    def start(self) -> None:
        pass

    def wait(self, timeout: float) -> dict[str, int]:
        if self.hang:
            raise TimeoutError("read timed out")
        return {"StatusCode": 0}

    def kill(self) -> None:
        self.killed = True

    def logs(self, stdout: bool, stderr: bool) -> bytes:
        return b"out\n" if stdout else b""

    def get_archive(self, path: str) -> tuple[list[bytes], dict[str, Any]]:
        if not path.endswith("out.txt"):
            raise FileNotFoundError(path)
        return [_tar({"out.txt": b"result"})], {}

    def remove(self, force: bool) -> None:
        self.removed = True


class FakeClient:
    def __init__(self, hang: bool = False) -> None:
        self.container = FakeContainer(hang)
        self.containers = self
        self.created: dict[str, Any] = {}

    def create(self, image: str, command: list[str], **options: Any) -> FakeContainer:
        self.created = {"image": image, "command": command, **options}
        return self.container


def test_container_is_locked_down_and_files_round_trip() -> None:
    client = FakeClient()
    limits = SandboxLimits(memory_limit_mb=256, max_processes=16, disk_limit_mb=32)
    result = DockerSandbox(client=client).run(["python3", "main.py"], files={"main.py": "print(1)"}, stdin="x",
                                              limits=limits, collect=["out.txt", "missing.txt"])
    made = client.created
    assert made["network_mode"] == "none" and made["network_disabled"] is True
    assert made["read_only"] is True and made["user"] == "65534:65534" and made["cap_drop"] == ["ALL"]
    assert made["security_opt"] == ["no-new-privileges"] and made["pids_limit"] == 16
    assert made["mem_limit"] == made["memswap_limit"] == 256 * 2**20
    assert made["tmpfs"]["/workspace"].startswith("size=32m")
    assert made["command"][:2] == ["sh", "-c"] and made["command"][-2:] == ["python3", "main.py"]  # stdin redirect
    with tarfile.open(fileobj=io.BytesIO(client.container.archive)) as archive:
        assert sorted(archive.getnames()) == [".stdin", "main.py"]
    assert result.ok and result.stdout == "out\n" and result.files == {"out.txt": b"result"}
    assert client.container.removed


def test_timeout_kills_the_container() -> None:
    client = FakeClient(hang=True)
    result = DockerSandbox(client=client).run(["sleep", "100"], limits=SandboxLimits(timeout_s=0.1))
    assert result.timed_out and result.exit_code is None and client.container.killed and client.container.removed
