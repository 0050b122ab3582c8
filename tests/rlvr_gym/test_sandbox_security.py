"""Attack programs against the bubblewrap sandbox: every one must fail to reach the host.

Each attack runs in the sandbox and the test checks the *host* side (secrets absent from everything that
came back, canary paths untouched, listeners never contacted, no process left behind), never the attack's
own claims. Limits are short so the whole suite stays fast.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import socket
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]  # this checkout, wherever it is cloned

from rlvr_gym.sandbox import SandboxLimits, SandboxResult, SandboxUnavailableError, get_sandbox
from rlvr_gym.sandbox import bwrap as bwrap_module
from rlvr_gym.sandbox.bwrap import HOST_UID_BASE

LIMITS = SandboxLimits(timeout_s=2.5, cpu_time_s=1, memory_limit_mb=256, file_size_limit_mb=2, max_processes=32,
                       output_limit_bytes=8192, tmp_size_mb=8, disk_limit_mb=8)
# The memory bomb zero-fills 256 MB a page at a time; on a loaded 2-core machine that took the whole second of
# LIMITS' CPU time once (killed_by="cpu_time"), so it gets more CPU and wall time: the memory limit must bind.
MEMORY_BOMB_LIMITS = dataclasses.replace(LIMITS, cpu_time_s=5, timeout_s=10)
SECRET = "rlvr-host-secret-5f1c2e"


class Host:
    """Canaries on the host side."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.secret_file = root / "secret.txt"
        self.secret_file.write_text(SECRET)
        self.secret_file.chmod(0o644)
        root.chmod(0o755)
        self.canary_target = root / "written_by_sandbox"
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(8)
        self.tcp.setblocking(False)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.udp.setblocking(False)
        self.tcp_port, self.udp_port = self.tcp.getsockname()[1], self.udp.getsockname()[1]

    def contacted(self) -> bool:
        for receive in (self.tcp.accept, lambda: self.udp.recvfrom(100)):
            try:
                receive()
                return True
            except BlockingIOError:
                pass
        return False


@pytest.fixture(scope="module")
def box():  # type: ignore[no-untyped-def]
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    try:
        return get_sandbox("bwrap")
    except SandboxUnavailableError as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def host(tmp_path_factory) -> Iterator[Host]:  # type: ignore[no-untyped-def]
    os.environ["RLVR_TEST_API_KEY"] = SECRET
    canaries = Host(tmp_path_factory.mktemp("host-canaries"))
    yield canaries
    del os.environ["RLVR_TEST_API_KEY"]
    canaries.tcp.close()
    canaries.udp.close()


def leaked(result: SandboxResult) -> bool:
    blobs = [result.stdout, result.stderr, *(v.decode("utf-8", "replace") for v in result.files.values())]
    return any(SECRET in blob for blob in blobs)


def processes_of(uid: int) -> list[int]:
    alive = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:  # zombies hold no resources; this machine's PID 1 reaps them lazily
                if entry.stat().st_uid == uid and "\nState:\tZ" not in Path(entry.path, "status").read_text():
                    alive.append(int(entry.name))
            except OSError:
                pass
    return alive


def wait_until_gone(uid: int, timeout_s: float = 3.0) -> list[int]:
    """The processes of ``uid`` still alive after ``timeout_s``: killed processes need CPU time to finish
    exiting, which a loaded 2-core machine may take a moment to give them."""
    deadline = time.monotonic() + timeout_s
    while (left := processes_of(uid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def run_uid(monkeypatch) -> int:  # type: ignore[no-untyped-def]
    """Pins the host uid of the next runs (outside the random range), so leftovers can be found; other
    sessions may be using the sandbox on this machine at the same time."""
    uid = HOST_UID_BASE + 2**24 + os.getpid() % 1000
    monkeypatch.setattr(bwrap_module, "_host_uid", lambda: uid)
    return uid


def py(source: str) -> list[str]:
    return ["python3", "-c", textwrap.dedent(source)]


# (name, argv builder given the host canaries, extra host-side check or None)
Attack = tuple[str, Callable[[Host], list[str]], Callable[[Host, SandboxResult], bool] | None]

READS: list[Attack] = [
    ("read_host_secret_file", lambda h: ["cat", str(h.secret_file)], None),
    ("read_etc_shadow", lambda h: ["cat", "/etc/shadow"], lambda h, r: "root:" not in r.stdout),
    ("read_etc_passwd", lambda h: ["cat", "/etc/passwd"], lambda h, r: "root:" not in r.stdout),
    ("read_root_home", lambda h: ["sh", "-c", "ls -la /root; cat /root/.bashrc"], lambda h, r: ".bashrc" not in r.stdout),
    ("read_project_tree", lambda h: ["ls", str(REPO_ROOT)], lambda h, r: "pyproject" not in r.stdout),
    ("list_host_tmp", lambda h: ["sh", "-c", f"ls -la /tmp {h.root.parent}"], lambda h, r: h.root.name not in r.stdout),
    ("find_secret_everywhere", lambda h: ["sh", "-c", f"grep -rs {SECRET[:12]} / --exclude-dir=proc | head"], None),
    ("env_var_leak", lambda h: ["env"], lambda h, r: "RLVR_TEST_API_KEY" not in r.stdout),
    ("proc_self_environ", lambda h: ["sh", "-c", "tr '\\0' '\\n' < /proc/self/environ"], None),
    ("proc_snoop_host_pids", lambda h: ["sh", "-c", "ls /proc | grep -E '^[0-9]+$' | wc -l; cat /proc/1/cmdline"],
     lambda h, r: int(r.stdout.split()[0]) < 10 and "pytest" not in r.stdout),
    ("proc_read_parent_environ", lambda h: py("""
        import os
        for pid in [p for p in os.listdir('/proc') if p.isdigit()]:
            try: print(open(f'/proc/{pid}/environ','rb').read())
            except OSError as e: print(pid, e)"""), None),
    ("host_pid_of_test_runner", lambda h: ["sh", "-c", f"cat /proc/{os.getpid()}/cmdline; kill -0 {os.getpid()} && echo seen"],
     lambda h, r: "seen" not in r.stdout and "pytest" not in r.stdout),
    ("sysfs_and_devices", lambda h: ["sh", "-c", "ls /sys /dev; cat /dev/sda /dev/mem 2>&1 | head -c 100"],
     lambda h, r: "sda\n" not in r.stdout and "class" not in r.stdout),
    ("symlink_to_host_secret_in_sandbox", lambda h: ["sh", "-c", f"ln -s {h.secret_file} s; cat s"], None),
]

WRITES: list[Attack] = [
    ("write_host_canary_path", lambda h: ["sh", "-c", f"echo pwned > {h.canary_target}"],
     lambda h, r: not h.canary_target.exists()),
    ("write_dotdot_escape", lambda h: py(f"open('../../../..{h.canary_target}', 'w').write('pwned')"),
     lambda h, r: not h.canary_target.exists()),
    ("write_usr_bin", lambda h: ["sh", "-c", "echo x > /usr/bin/rlvr_pwned"],
     lambda h, r: not Path("/usr/bin/rlvr_pwned").exists()),
    ("hardlink_system_binary", lambda h: ["sh", "-c", "ln /usr/bin/python3 py && echo evil >> py"],
     lambda h, r: hashlib.sha256(Path("/usr/bin/python3").resolve().read_bytes()).hexdigest() == PYTHON_SHA),
    ("mount_tmpfs", lambda h: ["sh", "-c", "mkdir -p m && mount -t tmpfs none m && echo mounted"],
     lambda h, r: "mounted" not in r.stdout),
    ("nested_user_namespace", lambda h: ["sh", "-c", "unshare -r id && echo nested"], lambda h, r: "nested" not in r.stdout),
    ("chroot_escape", lambda h: py("import os; os.chroot('/tmp'); print('chrooted')"), lambda h, r: "chrooted" not in r.stdout),
    ("capabilities", lambda h: ["sh", "-c", "grep Cap /proc/self/status; id"],
     lambda h, r: "CapEff:\t0000000000000000" in r.stdout and "uid=65534" in r.stdout),
    ("setuid_binary_to_host", lambda h: ["sh", "-c", "cp /usr/bin/id myid && chmod u+s myid && ls -l myid"],
     lambda h, r: True),  # the work dir is deleted after the run; checked below: nothing left on the host
]

NETWORK: list[Attack] = [
    ("tcp_internet", lambda h: py("import socket; socket.create_connection(('1.1.1.1', 80), timeout=2); print('online')"),
     lambda h, r: "online" not in r.stdout),
    ("tcp_host_loopback", lambda h: py(f"import socket; socket.create_connection(('127.0.0.1', {h.tcp_port}), timeout=2)"),
     lambda h, r: not h.contacted()),
    ("udp_host_loopback", lambda h: py(f"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('127.0.0.1', {h.udp_port}))"),
     lambda h, r: not h.contacted()),
    ("dns_lookup", lambda h: py("import socket; print(socket.gethostbyname('pypi.org'))"), lambda h, r: r.exit_code != 0),
    ("raw_packet_socket", lambda h: py("import socket; socket.socket(socket.AF_PACKET, socket.SOCK_RAW); print('raw')"),
     lambda h, r: "raw" not in r.stdout),
    ("interfaces", lambda h: ["sh", "-c", "cat /proc/net/dev"], lambda h, r: "eth0" not in r.stdout),
]

RESOURCES: list[Attack] = [
    ("fork_bomb", lambda h: py("import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"),
     lambda h, r: r.duration_s < 6),
    ("shell_fork_bomb", lambda h: ["bash", "-c", ":(){ :|:& };:"], lambda h, r: r.duration_s < 6),
    ("memory_bomb", lambda h: py("x = [bytearray(2**20) for _ in range(10_000)]"), lambda h, r: r.killed_by == "memory"),
    ("memory_bomb_many_processes", lambda h: py("import os\nfor _ in range(8): os.fork()\nx = bytearray(200 * 2**20)"),
     lambda h, r: True),
    ("cpu_spin", lambda h: py("while True: pass"), lambda h, r: r.killed_by == "cpu_time" or r.timed_out),
    ("sleep_forever", lambda h: ["sleep", "600"], lambda h, r: r.timed_out),
    ("huge_stdout", lambda h: py("import sys\nwhile True: sys.stdout.write('A' * 65536)"),
     lambda h, r: r.killed_by == "output" and len(r.stdout) <= LIMITS.output_limit_bytes),
    ("huge_stderr", lambda h: ["sh", "-c", "yes err >&2"], lambda h, r: len(r.stderr) <= LIMITS.output_limit_bytes),
    ("huge_file", lambda h: ["sh", "-c", "head -c 50000000 /dev/zero > big"], lambda h, r: r.killed_by == "file_size"),
    ("fill_tmp", lambda h: ["sh", "-c", "for i in 1 2 3 4 5 6; do head -c 2000000 /dev/zero > /tmp/f$i; done; df /tmp"],
     lambda h, r: "No space left" in r.stderr or "File too large" in r.stderr),
    ("fill_dev_shm", lambda h: ["sh", "-c", "for i in 1 2 3 4 5 6; do head -c 2000000 /dev/zero > /dev/shm/f$i; done"],
     lambda h, r: "No space left" in r.stderr or "File too large" in r.stderr),
    ("fill_host_disk_via_workdir", lambda h: ["sh", "-c", "for i in $(seq 400); do head -c 1000000 /dev/zero > f$i; done"],
     lambda h, r: r.killed_by == "disk" or r.timed_out),
    ("many_open_files", lambda h: py("fs = [open('/dev/null') for _ in range(100000)]"), lambda h, r: "Too many open files" in r.stderr),
    ("kill_parent_and_everyone", lambda h: py("import os, signal\nos.kill(os.getppid(), 9)\nos.kill(-1, 9)"),
     lambda h, r: True),
    ("daemon_outlives_run", lambda h: ["sh", "-c", "setsid sh -c 'sleep 30; echo late > late' & disown; echo started"],
     lambda h, r: True),
    ("double_fork_daemon", lambda h: py("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(30)
        print('parent done')"""), lambda h, r: True),
]

ALL_ATTACKS = READS + WRITES + NETWORK + RESOURCES
PYTHON_SHA = hashlib.sha256(Path("/usr/bin/python3").resolve().read_bytes()).hexdigest()


def test_there_are_at_least_40_attacks() -> None:
    assert len(ALL_ATTACKS) >= 40


@pytest.mark.parametrize("name,argv,check", ALL_ATTACKS, ids=[a[0] for a in ALL_ATTACKS])
def test_attack_is_contained(box, host, run_uid, name, argv, check) -> None:  # type: ignore[no-untyped-def]
    limits = MEMORY_BOMB_LIMITS if name == "memory_bomb" else LIMITS
    result = box.run(argv(host), limits=limits, collect=["."])
    assert result.sandbox_error is None, result.sandbox_error
    assert not leaked(result), f"{name} leaked the host secret"
    assert not host.canary_target.exists()
    assert not host.contacted()
    if check is not None:
        assert check(host, result), f"{name}: {result}"
    assert wait_until_gone(run_uid) == [], f"{name} left processes behind"
    assert host.secret_file.read_text() == SECRET


def test_collected_symlinks_never_reach_the_host(box, host) -> None:  # type: ignore[no-untyped-def]
    argv = ["sh", "-c", f"ln -s {host.secret_file} out.txt; ln -s {host.root} dir; ln -s /etc/hostname h"]
    result = box.run(argv, limits=LIMITS, collect=["out.txt", "dir/secret.txt", "h", "."])
    assert result.files == {} and not leaked(result)


def test_concurrent_runs_have_separate_process_limits(box) -> None:  # type: ignore[no-untyped-def]
    from concurrent.futures import ThreadPoolExecutor

    bomb = py("import os, time\nwhile True:\n    try: os.fork()\n    except OSError: time.sleep(0.01)")
    honest = ["sh", "-c", "for i in 1 2 3 4 5; do (echo $i) ; done | wc -l"]
    with ThreadPoolExecutor(2) as pool:
        bombing = pool.submit(box.run, bomb, limits=SandboxLimits(timeout_s=2.0, max_processes=16))
        result = pool.submit(box.run, honest, limits=LIMITS).result()
        bombing.result()
    assert result.ok and result.stdout.strip() == "5"
