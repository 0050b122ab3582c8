"""The call worker: runs INSIDE the sandbox, loads candidate programs and answers call requests.

It is shipped into the sandbox as source text, after the source of :mod:`rlvr_gym_code.codec` (so
``encode``/``decode``/``dumps``/``loads`` are globals), and run by the system ``python3``. It is not trusted:
the candidate program runs in the same process and may patch or replace any of it. Nothing here decides a
verdict; the judge outside the sandbox holds the tests and compares values itself, and whatever comes back
is simply the candidate's answer, decoded into builtin types.

Protocol (one JSON object per line on stdin / on the original stdout):
    judge -> ``{"load": "solution.py", "nonce": str}``; worker -> ``{"ready": nonce}`` or
    ``{"load_error": str}``. Then judge -> ``{"id": int, "fn": str, "args": [...], "kwargs": [[k, v]...]}``;
    worker -> ``{"id": int, "value": <encoded>}`` or ``{"id": int, "error": str, "message": str}``.
The candidate's own prints go to ``output.log`` in its work dir, never to the protocol channel.

Batch mode (``--zygote``): one sandbox judges several programs in turn. Before each job the zygote forks
the job's child ahead of time (after the previous job's clean-up, so from a clean sandbox): it warms up
(compiles and runs a trusted snippet, so its copy-on-write page faults are paid before the program comes)
and waits on its own stdin pipe. For each ``{"program": str, "nonce": str}`` the zygote writes the program
to a fresh ``job/solution.py`` and hands the nonce to that child, which then serves the program as above;
the zygote forwards the judge's lines to it until ``{"end": nonce, "seal": str}``, then kills the child and
*every other process of the sandbox user* (``kill(-1, SIGKILL)``), reaps, answers ``{"done": seal, "log":
str}``, and only then empties every writable place (``/workspace``, ``/tmp``, ``/dev/shm``; the root and
``/dev`` are read-only), removes SysV IPC objects and forks the next child; it reads the next job only after
that, so the judge may send it without waiting for ``done``. If the child ends before the end request (an
exit mid-call), the zygote says ``{"exited": status, "nonce": nonce}`` at once, so the judge need not wait
for the call's deadline. The seal is fresh and only ever seen by the zygote, so lines a candidate forged
before it died cannot pass for the end of its job. The zygote makes itself non-dumpable, so a candidate
(same uid) cannot ptrace it or read its memory; a candidate can kill it, which ends the batch (the judge
then re-runs the rest one sandbox each), but it cannot touch a later program's process.
"""

import importlib.util
import os
import resource
import select
import shutil
import signal
import sys
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # in the sandbox these names come from the codec source shipped in front of this file
    from rlvr_gym_code.codec import decode, dumps, encode, loads  # noqa: TC004

JOB_DIR = "/workspace/job"
_CHANNEL = None  # the protocol channel (the original stdout), set by zygote()
WRITABLE_DIRS = (("/workspace", 0o700), ("/tmp", 0o1777), ("/dev/shm", 0o1777), ("/dev/mqueue", 0o1777))
"""Every directory a sandboxed program can write to (bwrap mounts the rest read-only), with its mode; a POSIX
message queue is a file in /dev/mqueue."""
_KEYCTL = {"x86_64": 250, "aarch64": 219}
"""The keyctl(2) system call's number per machine."""


def _redirect_output(log_path):
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    try:
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except PermissionError:  # a host whose /dev/null lost its write permission (seen: mode 0755)
        log_fd = os.open("/tmp", os.O_WRONLY | os.O_TMPFILE, 0o600)  # nameless: no later program sees it
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    return channel


def _load(path):
    spec = importlib.util.spec_from_file_location("solution", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["solution"] = module
    spec.loader.exec_module(module)
    return module


def _tail():
    return "".join(traceback.format_exc().splitlines(keepends=True)[-12:])[-2000:]


_DISK_ERRNOS = (27, 28, 30, 122)  # EFBIG, ENOSPC, EROFS, EDQUOT
_OUTPUT_LOG_FULL_BYTES = 1 << 20


def _limit_of(error):
    """Which sandbox limit an exception says was hit ("memory", "disk", "output", "processes"), or None. A
    hint for the judge's failure kind only: the candidate could fake it, and it decides no verdict."""
    if isinstance(error, MemoryError):
        return "memory"
    if isinstance(error, OSError) and error.errno in _DISK_ERRNOS:
        try:  # a write that failed while the output log (fd 1) is at its cap is an output flood
            return "output" if os.fstat(1).st_size >= _OUTPUT_LOG_FULL_BYTES else "disk"
        except OSError:
            return "disk"
    if isinstance(error, OSError) and error.errno == 11 or "can't start new thread" in str(error):  # EAGAIN
        return "processes"
    return None


def _answer(module, request):
    reply = {"id": request.get("id")}
    try:
        function = getattr(module, request["fn"])
        args = decode(request["args"])
        kwargs = dict(decode(request["kwargs"]))
        reply["value"] = encode(function(*args, **kwargs))
    except BaseException as error:  # noqa: BLE001  (SystemExit too: an exit inside a call is a failed call)
        reply["error"] = type(error).__name__
        reply["message"] = str(error)[:1000]
        reply["traceback"] = _tail()
        limit = _limit_of(error)
        if limit is not None:
            reply["limit"] = limit
    return reply


def serve(channel, requests, path, nonce):
    """Loads the program at ``path``, says ready with ``nonce``, then answers calls until EOF."""
    try:
        module = _load(path)
    except BaseException as error:  # noqa: BLE001  (an exit or error while loading is reported, not fatal)
        reply = {"load_error": _tail()}
        if _limit_of(error) is not None:
            reply["limit"] = _limit_of(error)
        channel.write(dumps(reply))
        return
    channel.write(dumps({"ready": nonce}))
    for line in requests:
        try:
            channel.write(dumps(_answer(module, loads(line))))
        except BaseException as error:  # noqa: BLE001
            channel.write(dumps({"id": None, "error": type(error).__name__, "message": str(error)[:1000]}))


def main():
    channel = _redirect_output("output.log")
    stdin = sys.stdin.buffer
    hello = loads(stdin.readline())
    serve(channel, stdin, hello["load"], hello["nonce"])


# -- batch mode -------------------------------------------------------------------------------------------
def _make_undumpable():
    import ctypes

    pr_set_dumpable = 4
    if ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _unlock(path):
    """Gives the sandbox user back every directory under ``path`` (a program may chmod one to 0, which rmtree
    cannot enter), walking without recursion."""
    stack = [path]
    while stack:
        directory = stack.pop()
        try:
            os.chmod(directory, 0o700)
            names = os.listdir(directory)
        except OSError:
            continue
        for name in names:
            target = os.path.join(directory, name)
            if os.path.isdir(target) and not os.path.islink(target):
                stack.append(target)


def _wipe(path):
    for name in os.listdir(path) if os.path.isdir(path) else []:
        target = os.path.join(path, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target, ignore_errors=True)
            if os.path.lexists(target):  # a directory locked with chmod: unlock the tree, then remove it
                _unlock(target)
                shutil.rmtree(target, ignore_errors=True)
        else:
            try:
                os.unlink(target)
            except OSError:
                pass


def _process_state():
    """What a program could change in the zygote from outside (same user: prlimit(2), setpriority(2)) and
    every later child would inherit: its resource limits and nice value."""
    limits = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            try:
                limits[name] = resource.getrlimit(getattr(resource, name))
            except (OSError, ValueError):
                pass
    return limits, os.getpriority(os.PRIO_PROCESS, 0)


_WARM_UP = """
from typing import Dict, List, Optional, Tuple
import math, re, itertools, functools, collections


def _warm(numbers: List[int], text: str = "a b c") -> Tuple[int, Dict[str, int]]:
    counts: Dict[str, int] = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    total = sum(x * x for x in numbers if x % 2 == 0)
    pairs = [(a, b) for a in numbers for b in numbers if a < b]
    return total + len(pairs), dict(sorted(counts.items()))
"""


def _warm_up():
    """Touches what loading and serving a program touches (the compiler, the codec), so the copy-on-write
    page faults after fork() are paid while the child waits for its program, not while the judge waits."""
    namespace = {"__name__": "_warm_up"}
    exec(compile(_WARM_UP, "<warm-up>", "exec"), namespace)  # noqa: S102  (trusted text, not a candidate's)
    loads(dumps({"id": 0, "value": encode(namespace["_warm"]([1, 2, 3, 4]))}))
    decode(encode([1, "x", (2.5, None), {"k": [True]}, {3}, b"b"]))


def _prefork():
    """Forks the next job's child ahead of its program: it warms up, then waits on its own pipe for the
    job's nonce (the program is in ``job/solution.py`` by then) and serves it. Returns (pid, write end).
    Runs once every process of the previous job is dead; the child touches no file before its nonce comes,
    and the nonce comes only after the clean-up, so it starts from a clean sandbox."""
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(write_fd)
        _child(read_fd)
    os.close(read_fd)
    return child, write_fd


def _child(read_fd):
    try:
        os.dup2(read_fd, 0)
        os.close(read_fd)
        _warm_up()
        requests = os.fdopen(0, "rb", closefd=False)
        nonce = requests.readline().decode("ascii").strip()
        os.chdir(JOB_DIR)
        log_fd = os.open("output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        serve(_CHANNEL, requests, os.path.join(JOB_DIR, "solution.py"), nonce)
    finally:
        os._exit(0)


def _sweep(child):
    for target in (child, -1) if child is not None else (-1,):
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


class _Lines:
    """Lines from a raw fd, and whether a child process ended meanwhile (a pidfd polled alongside)."""

    def __init__(self, fd):
        self.fd, self.buffer = fd, b""

    def next(self, pidfd=None):
        """The next line (with its newline), b"" at EOF, or None when ``pidfd`` became readable first."""
        while b"\n" not in self.buffer:
            ready = select.select([self.fd] + ([pidfd] if pidfd is not None else []), [], [])[0]
            if self.fd not in ready:
                return None
            chunk = os.read(self.fd, 1 << 16)
            if not chunk:
                line, self.buffer = self.buffer, b""
                return line
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line + b"\n"


def _pidfd(child):
    try:
        return os.pidfd_open(child)
    except (AttributeError, OSError):  # an old kernel: a child's exit is then noticed at the call's deadline
        return None


def _start_job(job, spare):
    """Writes the job's program, hands its nonce to the pre-forked child (a fresh one if that has died)."""
    with open(os.path.join(JOB_DIR, "solution.py"), "w", encoding="utf-8", errors="surrogatepass") as handle:
        handle.write(job["program"])
    child, write_fd = spare
    if os.waitpid(child, os.WNOHANG)[0] != 0:  # the spare died while waiting (e.g. the memory limit)
        os.close(write_fd)
        child, write_fd = _prefork()
    try:
        os.write(write_fd, job["nonce"].encode("ascii") + b"\n")
    except OSError:
        pass  # it died just now: the judge sees no ready line and ends the job
    return child, write_fd


def _run_job(channel, lines, job, spare):
    nonce, seal = job["nonce"], None
    child, write_fd = _start_job(job, spare)
    pidfd = _pidfd(child)
    while True:
        line = lines.next(pidfd)
        if line is None:  # the child ended: tell the judge now rather than at the call's deadline
            os.close(pidfd)
            pidfd = None
            _, status = os.waitpid(child, 0)
            child = None
            channel.write(dumps({"exited": os.waitstatus_to_exitcode(status), "nonce": nonce}))
            continue
        if not line:
            break
        if line.startswith(b'{"end"') and loads(line).get("end") == nonce:
            seal = loads(line).get("seal")
            break
        try:
            os.write(write_fd, line)
        except OSError:
            pass  # the child is gone; the judge sees no reply and ends the job
    if pidfd is not None:
        os.close(pidfd)
    os.close(write_fd)
    _sweep(child)
    try:
        with open(os.path.join(JOB_DIR, "output.log"), "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 4000))
            log = handle.read(4000).decode("utf-8", "replace")
    except OSError:
        log = ""
    # Every process of the job is dead, so nothing can write any more: fork the next child (it warms up
    # meanwhile), answer, then clean while the judge works on its side; the next job is read only after that.
    spare = _prefork()
    channel.write(dumps({"done": seal, "log": log}))
    _reset_writable()
    return spare


def _reset_writable():
    """Empties every place a program can write (the root and /dev are read-only) and restores their modes,
    so nothing one program wrote is visible to the next; also removes SysV IPC objects it left. Leaves an
    empty ``job/`` for the next program."""
    for path, mode in WRITABLE_DIRS:
        _wipe(path)
        try:
            os.chmod(path, mode)
        except OSError:
            pass
    _remove_sysv_ipc()
    _clear_keyrings()
    os.makedirs(JOB_DIR, exist_ok=True)
    if any(os.listdir(path) != (["job"] if JOB_DIR.startswith(path + "/") else []) for path, _ in WRITABLE_DIRS):
        _exit_for_a_fresh_sandbox()  # something the wipe could not remove: the next program gets a new sandbox


def _exit_for_a_fresh_sandbox():
    """Ends the zygote (its spare child too): the judge starts a fresh sandbox for the next program."""
    _sweep(None)
    os._exit(0)


def _clear_keyrings():
    """Empties the session, user and user-session keyrings (keyctl(KEYCTL_CLEAR)): a key a program added
    would otherwise be found by the next one."""
    import ctypes
    import platform

    number = _KEYCTL.get(platform.machine())
    if number is None:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    keyctl_clear = 7
    for keyring in (-3, -4, -5):  # KEY_SPEC_SESSION_KEYRING, _USER_KEYRING, _USER_SESSION_KEYRING
        libc.syscall(number, keyctl_clear, ctypes.c_int(keyring))


def _remove_sysv_ipc():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    ipc_rmid = 0
    for kind, remove in (("shm", libc.shmctl), ("msg", libc.msgctl), ("sem", libc.semctl)):
        try:
            with open(f"/proc/sysvipc/{kind}") as table:
                ids = [int(row.split()[1]) for row in table.read().splitlines()[1:] if row.strip()]
        except (OSError, ValueError, IndexError):
            continue
        for ipc_id in ids:
            remove(ipc_id, ipc_rmid, None) if kind != "sem" else remove(ipc_id, 0, ipc_rmid)


def zygote():
    global _CHANNEL
    _make_undumpable()
    sys.dont_write_bytecode = True  # no __pycache__ in job/ (``-I`` ignores PYTHONDONTWRITEBYTECODE)
    _CHANNEL = _redirect_output(os.devnull)  # no log in /workspace: the next program would read it
    _reset_writable()  # the worker's own source: no program needs it
    lines = _Lines(0)
    state = _process_state()
    spare = _prefork()
    while line := lines.next():
        spare = _run_job(_CHANNEL, lines, loads(line), spare)
        if _process_state() != state:  # a program changed the zygote's limits or priority
            _exit_for_a_fresh_sandbox()
    _sweep(None)


if __name__ == "__main__":
    zygote() if "--zygote" in sys.argv else main()
