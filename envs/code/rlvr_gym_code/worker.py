"""The call worker: runs INSIDE the sandbox, loads the candidate program and answers call requests.

It is shipped into the sandbox as source text, after the source of :mod:`rlvr_gym_code.codec` (so
``encode``/``decode``/``dumps``/``loads`` are globals), and run by the system ``python3``. It is not trusted:
the candidate program runs in this same process and may patch or replace any of it. Nothing here decides a
verdict; the judge outside the sandbox holds the tests and compares values itself, and whatever this
process sends back is simply the candidate's answer, decoded into builtin types.

Protocol (one JSON object per line on stdin / on the original stdout):
    judge -> ``{"load": "solution.py", "nonce": str}``; worker -> ``{"ready": nonce}`` or
    ``{"load_error": str}``. Then judge -> ``{"id": int, "fn": str, "args": [...], "kwargs": [[k, v]...]}``;
    worker -> ``{"id": int, "value": <encoded>}`` or ``{"id": int, "error": str, "message": str}``.
The candidate's own prints go to ``output.log`` in the work dir, never to the protocol channel.
"""

import importlib.util
import os
import sys
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # in the sandbox these names come from the codec source shipped in front of this file
    from rlvr_gym_code.codec import decode, dumps, encode, loads  # noqa: TC004


def _redirect_output():
    channel = os.fdopen(os.dup(1), "wb", buffering=0)
    log_fd = os.open("output.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
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


def main():
    channel = _redirect_output()
    stdin = sys.stdin.buffer
    hello = loads(stdin.readline())
    try:
        module = _load(hello["load"])
    except BaseException:  # noqa: BLE001  (an exit or error while loading is reported, not fatal)
        channel.write(dumps({"load_error": _tail()}))
        return
    channel.write(dumps({"ready": hello["nonce"]}))
    for line in stdin:
        try:
            reply = _answer(module, loads(line))
            channel.write(dumps(reply))
        except BaseException as error:  # noqa: BLE001
            channel.write(dumps({"id": None, "error": type(error).__name__, "message": str(error)[:1000]}))


if __name__ == "__main__":
    main()
