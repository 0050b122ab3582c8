"""The Python judge: hidden tests run outside the sandbox and call the candidate inside it.

Why this shape (reward-hacking defences, see ``reference/environments.md`` §4.3):

* The candidate program runs in a bubblewrap sandbox (:mod:`rlvr_gym.sandbox`) under the call worker
  (:mod:`rlvr_gym_code.worker`). The tests never enter the sandbox: they run here, in the judge, and each
  ``candidate(...)`` call in them is a remote call (:class:`RemoteFunction`). The candidate cannot read,
  patch or skip the tests, the ``assert`` statement, the builtins or the runner, because none of them are in
  its process.
* Values come back through :mod:`rlvr_gym_code.codec`, which builds builtin types only: an object with an
  always-true ``__eq__`` cannot arrive.
* The worker must answer the load request with a fresh random nonce before any test runs; ``sys.exit(0)``,
  ``os._exit(0)``, ``atexit`` or ``excepthook`` tricks end the worker, and a dead worker fails every call.
  Nothing the candidate prints is parsed for a verdict (its prints go to a log file).
* The verdict needs the test function to return normally after at least one assertion held and at least
  one call reached the candidate; assertions are counted by an instrumented copy of the test code, which is
  compiled with ``optimize=0`` so ``python -O`` cannot strip them.

The test and setup code come from the task suite (trusted data) and run in this process; candidate code
never runs outside the sandbox.
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import functools
import importlib.resources
import secrets
import threading
import time
import warnings
from typing import Any

from rlvr_gym import Failure, FailureKind
from rlvr_gym.sandbox import Sandbox, SandboxLimits, SandboxSession, SandboxUnavailableError, get_sandbox
from rlvr_gym_code import codec

PYTHON = "python3"
"""The interpreter inside the sandbox (the system Python, ``/usr/bin/python3``), run with ``-I -S``: isolated
mode, standard library only (no site-packages), which also saves start-up time."""
DEFAULT_LIMITS = SandboxLimits(timeout_s=10.0, cpu_time_s=10, memory_limit_mb=1024, output_limit_bytes=16384)
WORKER_FILE = "_rlvr_worker.py"
SOLUTION_FILE = "solution.py"
LOG_FILE = "output.log"
_COUNTER = "__rlvr_assert_reached__"
AST_LOCK = threading.Lock()
"""Serialises ``ast.parse``: CPython 3.11's AST constructor is not thread-safe ("AST constructor recursion
depth mismatch", python/cpython#106905), and :func:`rlvr_gym_code.batch.judge_many` judges from several threads."""


@dataclasses.dataclass(frozen=True)
class PythonTests:
    """Hidden tests for one Python task.

    Attributes:
        entry_point: the function the tests call (``candidate`` in the test code is bound to it).
        test_source: trusted code defining ``check(candidate)`` (HumanEval convention).
        setup_source: trusted code run first in the judge's namespace (e.g. the HumanEval prompt, whose
            helper functions the tests use).
    """

    entry_point: str
    test_source: str
    setup_source: str = ""


@dataclasses.dataclass
class JudgeReport:
    """The verdict on one program.

    Attributes:
        passed: every test ran and held.
        num_asserts: assertions reached (the failing one included).
        num_calls: calls that reached the candidate.
        reason: what happened, written for the agent (the failing assertion, the candidate's error, ...).
        failure: a typed failure when the run itself broke (parse error, timeout, sandbox error), else None.
        output: the tail of what the candidate printed.
        duration_s: wall-clock seconds of the whole judgement.
    """

    passed: bool
    num_asserts: int = 0
    num_calls: int = 0
    reason: str = ""
    failure: Failure | None = None
    output: str = ""
    duration_s: float = 0.0


class CandidateError(BaseException):
    """The candidate could not answer a call (it died, timed out, or sent a malformed reply).

    Derives from BaseException so test code's ``except Exception`` cannot swallow it."""

    def __init__(self, message: str, failure: Failure | None = None) -> None:
        super().__init__(message)
        self.failure = failure


class RemoteFunction:
    """A callable standing for the candidate's function; each call is a round trip to the sandbox.

    Exceptions the candidate raises come back as the builtin exception of the same name when there is one
    (so tests that expect ``ValueError`` work), else as :class:`CandidateError`.
    """

    def __init__(self, session: SandboxSession, name: str, deadline: float | None = None) -> None:
        self.session = session
        self.name = name
        self.deadline = deadline
        self.num_calls = 0
        self.dead: CandidateError | None = None
        self.limit: Failure | None = None  # the last sandbox limit a failed call reported hitting

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.dead is not None:
            raise self.dead
        self.num_calls += 1
        request = {"id": self.num_calls, "fn": self.name, "args": codec.encode(list(args)),
                   "kwargs": codec.encode(list(kwargs.items()))}
        if not self.session.write(codec.dumps(request), self.deadline):
            self._die("the candidate stopped reading its calls (it exited, hung or timed out)")
        line = self.session.read_line(self.deadline)
        if line is None:
            self._die("the candidate's process ended or timed out during a call")
        try:
            reply = codec.loads(line)  # type: ignore[arg-type]
            if "exited" in reply:  # batch mode: the zygote saw the candidate's process end mid-call
                self._die(f"the candidate's process exited during a call (status {reply['exited']})")
            if reply.get("id") != self.num_calls:
                raise codec.CodecError("reply out of order")
            if "error" in reply:
                self.limit = limit_failure(reply.get("limit"), reply) or self.limit
                raise _candidate_exception(reply)
            return codec.decode(reply["value"])
        except (codec.CodecError, KeyError) as error:
            self._die(f"the candidate sent a malformed reply ({error})")

    def _die(self, message: str) -> None:
        late = self.session.timed_out or (self.deadline is not None and time.monotonic() >= self.deadline)
        kind = FailureKind.TIMEOUT if late else FailureKind.SANDBOX_ERROR
        self.dead = CandidateError(message, Failure(kind, message))
        raise self.dead


_LIMIT_KINDS = {"memory": FailureKind.MEMORY_LIMIT, "disk": FailureKind.DISK_LIMIT,
                "output": FailureKind.OUTPUT_LIMIT, "processes": FailureKind.PROCESS_LIMIT}
_LIMIT_ADVICE = {"memory": "use less memory", "disk": "write less (and only under /workspace or /tmp)",
                 "output": "print less", "processes": "start fewer processes or threads"}


def limit_failure(limit: Any, reply: dict[str, Any]) -> Failure | None:
    """The typed failure for a sandbox limit the worker reported (``"memory"``, ``"disk"``, ``"output"``,
    ``"processes"``), or None for anything else."""
    kind = _LIMIT_KINDS.get(limit) if isinstance(limit, str) else None
    if kind is None:
        return None
    error = f"{reply.get('error', '')}: {str(reply.get('message', ''))[:200]}".strip(": ")
    return Failure(kind, f"the program hit the sandbox's {limit} limit ({error}); {_LIMIT_ADVICE[limit]}")


def _candidate_exception(reply: dict[str, Any]) -> BaseException:
    name, message = str(reply.get("error")), str(reply.get("message", ""))
    described = f"{name}: {message}\n{reply.get('traceback', '')}".strip()
    exception_type = getattr(builtins, name, None)
    if isinstance(exception_type, type) and issubclass(exception_type, Exception):
        error = exception_type(message)
        error.add_note(f"raised by the candidate:\n{described}")
        return error
    return CandidateError(f"the candidate raised {described}")


def interactive_sandbox(backend: str | Sandbox = "auto") -> Sandbox:
    """A back-end that can ``spawn`` interactive sessions (bwrap, or the opt-in subprocess back-end).

    ``"auto"`` picks :func:`rlvr_gym.sandbox.get_sandbox`'s choice and, when that is Docker (one-shot runs
    only), bubblewrap instead.

    Raises:
        SandboxUnavailableError: when the requested back-end cannot run sessions, or none is available.
    """
    box = get_sandbox(backend) if isinstance(backend, str) else backend
    if hasattr(box, "spawn"):
        return box
    if backend == "auto":
        return get_sandbox("bwrap")
    raise SandboxUnavailableError(
        f"the {box.name!r} sandbox runs one-shot commands only; the code judge needs interactive sessions: "
        "use backend='bwrap' (apt-get install bubblewrap) or, for trusted code only, backend='subprocess'"
    )


@functools.lru_cache(maxsize=512)
def instrument_tests(test_source: str) -> Any:
    """Compiles test code with a counter call before every ``assert`` (``optimize=0``: never stripped).

    Raises:
        SyntaxError: when the test code itself does not parse (a broken task, not a candidate fault).
    """
    with AST_LOCK:
        tree = ast.parse(test_source)

    class _CountAsserts(ast.NodeTransformer):
        def visit_Assert(self, node: ast.Assert) -> list[ast.stmt]:
            call = ast.Expr(ast.Call(ast.Name(_COUNTER, ast.Load()), [ast.Constant(node.lineno)], []))
            return [ast.copy_location(call, node), node]

    with AST_LOCK:
        tree = ast.fix_missing_locations(_CountAsserts().visit(tree))
        return compile(tree, "<hidden tests>", "exec", optimize=0)


@functools.lru_cache(maxsize=512)
def compile_setup(setup_source: str) -> Any:
    """Compiles a task's trusted setup code once (a task is judged many times: every sample of a group).

    Raises:
        SyntaxError: when the setup code does not parse (a broken task, not a candidate fault).
    """
    with AST_LOCK:
        return compile(setup_source, "<task setup>", "exec", optimize=0)


@functools.cache
def worker_source() -> str:
    """The worker script shipped into the sandbox: the codec's source followed by the worker's."""
    package = importlib.resources.files("rlvr_gym_code")
    return (package / "codec.py").read_text() + "\n\n" + (package / "worker.py").read_text()


def check_syntax(program: str) -> str | None:
    """Returns None when ``program`` parses as Python, else the error, formatted for the agent."""
    try:
        with AST_LOCK, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the candidate's invalid escapes are its business
            ast.parse(program)
    except SyntaxError as error:
        return f"SyntaxError: {error.msg} (line {error.lineno})"
    except (ValueError, RecursionError, MemoryError) as error:
        return f"the program cannot be parsed: {type(error).__name__}"
    return None


def judge_python(
    program: str,
    tests: PythonTests,
    *,
    sandbox: Sandbox | None = None,
    limits: SandboxLimits = DEFAULT_LIMITS,
) -> JudgeReport:
    """Runs the hidden ``tests`` against ``program`` (Python source) and returns the verdict.

    Args:
        program: the candidate's complete module source; it must define ``tests.entry_point``.
        tests: the hidden tests.
        sandbox: a back-end with ``spawn`` (bwrap or subprocess); default :func:`get_sandbox`.
        limits: limits of the candidate's sandbox; ``timeout_s`` bounds the whole judgement.

    Raises:
        SyntaxError: when the *test* code does not parse (the task is broken).
    """
    start = time.monotonic()
    syntax_error = check_syntax(program)
    if syntax_error is not None:
        failure = Failure(FailureKind.PARSE_ERROR, syntax_error)
        return JudgeReport(False, reason=syntax_error, failure=failure)
    code = instrument_tests(tests.test_source)
    box = interactive_sandbox(sandbox or "auto")
    try:
        session = box.spawn(  # type: ignore[attr-defined]
            [PYTHON, "-I", "-S", WORKER_FILE], files={WORKER_FILE: worker_source(), SOLUTION_FILE: program},
            limits=limits,
        )
    except (OSError, ValueError) as error:  # could not start a process (no pids left, NUL byte in the program)
        failure = Failure(FailureKind.SANDBOX_ERROR, f"the sandbox could not start: {error}")
        return JudgeReport(False, reason=failure.message, failure=failure, duration_s=time.monotonic() - start)
    report = JudgeReport(False)
    try:
        _run_tests(session, tests, code, report)
    finally:
        result = session.close(collect=[LOG_FILE])
        report.output = result.files.get(LOG_FILE, b"")[-4000:].decode("utf-8", "replace")
        report.duration_s = time.monotonic() - start
    limit = result.failure()  # the sandbox stopped the program (the disk watch, a signal): say which limit
    replaceable = report.failure is None or report.failure.kind is FailureKind.SANDBOX_ERROR
    if not report.passed and limit is not None and replaceable:
        report.failure = limit
    return report


def _run_tests(session: SandboxSession, tests: PythonTests, code: Any, report: JudgeReport,
               load: dict[str, Any] | None = None, deadline: float | None = None, nonce: str | None = None) -> None:
    """Sends the load request (``load`` plus a fresh nonce), then runs the tests against the candidate."""
    nonce = nonce or secrets.token_hex(16)
    request = {**(load or {"load": SOLUTION_FILE}), "nonce": nonce}
    ready = session.write(codec.dumps(request), deadline) and session.read_line(deadline)
    if not _is_ready(ready, nonce, report, session, deadline):
        return
    proxy = RemoteFunction(session, tests.entry_point, deadline)
    reached: list[int] = []
    namespace: dict[str, Any] = {"__name__": "__rlvr_tests__"}
    exec(compile_setup(tests.setup_source), namespace)  # noqa: S102  (trusted task data, never candidate code)
    namespace[_COUNTER] = reached.append
    exec(code, namespace)  # noqa: S102  (trusted task data: defines check)
    namespace[tests.entry_point] = proxy
    try:
        namespace["check"](proxy)
    except CandidateError as error:
        report.reason, report.failure = str(error), error.failure
    except AssertionError as error:
        report.reason = _assertion_reason(tests.test_source, reached, error)
    except Exception as error:  # noqa: BLE001  (the test code failed on the candidate's output)
        report.reason = f"a test failed with {type(error).__name__}: {error}"
    else:
        report.passed = bool(reached) and proxy.num_calls > 0
        report.reason = f"all {len(reached)} assertions held" if report.passed else "no test reached the candidate"
    if not report.passed and report.failure is None and proxy.limit is not None:
        report.failure = proxy.limit
    report.num_asserts, report.num_calls = len(reached), proxy.num_calls


def _is_ready(line: bytes | bool | None, nonce: str, report: JudgeReport, session: SandboxSession,
              deadline: float | None = None) -> bool:
    if not line:
        late = session.timed_out or (deadline is not None and time.monotonic() >= deadline)
        kind = FailureKind.TIMEOUT if late else FailureKind.SANDBOX_ERROR
        report.reason = "the program did not finish loading (it exited, hung or timed out before any test)"
        report.failure = Failure(kind, report.reason)
        return False
    try:
        message = codec.loads(line)  # type: ignore[arg-type]
    except codec.CodecError:
        message = {}
    if "exited" in message:
        report.reason = f"the program exited while loading (status {message['exited']}), before any test"
        report.failure = Failure(FailureKind.SANDBOX_ERROR, report.reason)
        return False
    if "load_error" in message:
        report.reason = f"the program raised while loading:\n{str(message['load_error'])[-2000:]}"
        report.failure = limit_failure(message.get("limit"), {"error": "while loading"})
        return False
    if message.get("ready") != nonce:
        report.reason = "the program's process answered the load request with something else"
        report.failure = Failure(FailureKind.SANDBOX_ERROR, report.reason)
        return False
    return True


def _assertion_reason(test_source: str, reached: list[int], error: AssertionError) -> str:
    lines = test_source.splitlines()
    line_no = reached[-1] if reached else 0
    statement = lines[line_no - 1].strip() if 0 < line_no <= len(lines) else "?"
    notes = "\n".join(getattr(error, "__notes__", []))
    return f"test failed (assertion {len(reached)}): {statement}" + (f"\n{notes}" if notes else "")
