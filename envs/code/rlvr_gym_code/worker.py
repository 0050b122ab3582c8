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

Batch mode (``--zygote``): one sandbox judges several programs in turn. For each
``{"program": str, "nonce": str}`` the zygote forks a child that serves that program as above (fresh
``job/`` dir, its own stdin pipe), forwards the judge's lines to it until ``{"end": nonce, "seal": str}``,
then kills the child and *every other process of the sandbox user* (``kill(-1, SIGKILL)``), reaps, wipes
``job/``, ``/tmp`` and ``/dev/shm`` and answers ``{"done": seal, "log": str}``. The seal is fresh and only
ever seen by the zygote, so lines a candidate forged before it died cannot pass for the end of its job. The zygote makes itself non-dumpable, so a
candidate (same uid) cannot ptrace it or read its memory; a candidate can kill it, which ends the batch (the
judge then re-runs the rest one sandbox each), but it cannot touch a later program's process.
"""

import importlib.util
import os
import shutil
import signal
import sys
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # in the sandbox these names come from the codec source shipped in front of this file
    from rlvr_gym_code.codec import decode, dumps, encode, loads  # noqa: TC004

JOB_DIR = "/workspace/job"


def _redirect_output(log_path):
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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
    return reply


def serve(channel, requests, path, nonce):
    """Loads the program at ``path``, says ready with ``nonce``, then answers calls until EOF."""
    try:
        module = _load(path)
    except BaseException:  # noqa: BLE001  (an exit or error while loading is reported, not fatal)
        channel.write(dumps({"load_error": _tail()}))
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


def _wipe(path):
    for name in os.listdir(path) if os.path.isdir(path) else []:
        target = os.path.join(path, name)
        if os.path.isdir(target) and not os.path.islink(target):
            shutil.rmtree(target, ignore_errors=True)
        else:
            try:
                os.unlink(target)
            except OSError:
                pass


def _child(channel, read_fd, nonce):
    os.dup2(read_fd, 0)
    os.close(read_fd)
    os.chdir(JOB_DIR)
    log_fd = os.open("output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    try:
        serve(channel, os.fdopen(0, "rb", closefd=False), os.path.join(JOB_DIR, "solution.py"), nonce)
    finally:
        os._exit(0)


def _sweep(child):
    for target in (child, -1):
        try:
            os.kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break


def _run_job(channel, stdin, job):
    nonce, seal = job["nonce"], None
    _wipe(JOB_DIR)
    os.makedirs(JOB_DIR, exist_ok=True)
    with open(os.path.join(JOB_DIR, "solution.py"), "w", encoding="utf-8") as handle:
        handle.write(job["program"])
    read_fd, write_fd = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(write_fd)
        _child(channel, read_fd, nonce)
    os.close(read_fd)
    for line in iter(stdin.readline, b""):
        message = loads(line)
        if message.get("end") == nonce:
            seal = message.get("seal")
            break
        try:
            os.write(write_fd, line)
        except OSError:
            pass  # the child is gone; the judge sees no reply and ends the job
    os.close(write_fd)
    _sweep(child)
    try:
        with open(os.path.join(JOB_DIR, "output.log"), "rb") as handle:
            log = handle.read()[-4000:].decode("utf-8", "replace")
    except OSError:
        log = ""
    for path in (JOB_DIR, "/tmp", "/dev/shm"):
        _wipe(path)
    channel.write(dumps({"done": seal, "log": log}))


def zygote():
    _make_undumpable()
    channel = _redirect_output("/workspace/zygote.log")
    stdin = sys.stdin.buffer
    for line in iter(stdin.readline, b""):
        _run_job(channel, stdin, loads(line))


if __name__ == "__main__":
    zygote() if "--zygote" in sys.argv else main()
