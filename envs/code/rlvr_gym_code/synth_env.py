"""``code/Synth-v0``: write a small generated Python function, with the failing test as feedback between turns.

The tasks come from :mod:`rlvr_gym_code.synth` (a seeded grammar of one-to-four-line functions; suites
``code/synth-train`` and ``code/synth-test``, the test split holding out frame-and-primitive combinations).

Episode: the first observation is the prompt (signature, one-line spec, two examples), about 50 tokens. The
action is the function (raw text or a fenced ``python`` block) and must define ``f`` at top level. The judge
(:func:`rlvr_gym_code.judge.judge_python`, the candidate in the bubblewrap sandbox, the hidden tests outside
it) calls ``f`` on six inputs and compares each result with the expected one, types included (a tuple is not
a list). All pass: reward 1.0, the episode terminates. Otherwise the next observation names the first failing
call: ``Test failed: f([3, 4]) should be [9], got [10].`` or ``Test failed: f([]) raised ZeroDivisionError:
...`` (the exception's last line), or the syntax error, timeout or sandbox limit with its typed failure;
the agent may resubmit until ``max_turns`` (3) runs out, which truncates the episode at reward 0.0. With
``reject_repeats=True`` a resubmission of code that failed on its own (a wrong result, a syntax error, no ``f``)
is answered without judging (an ``invalid_action``).

Typed failures: ``parse_error`` (no code, a syntax error), ``invalid_action`` (the code does not define ``f``;
judged without the sandbox), ``timeout``, ``memory_limit``, ``output_limit``, ``sandbox_error``; a wrong
answer is no failure, only reward 0.0.

For warm starts: ``info["admissible_actions"]`` lists the task's near misses (wrong functions one change from
the solution; what ``sft.mistake_rate`` samples; never the solution, and the policy never sees ``info``),
:meth:`SynthEnv.oracle_action` gives the solution (``sft.expert: oracle``), and :func:`malformed_programs`
lists rejected slips of it (``sft.invalid_actions``).
"""

from __future__ import annotations

import ast
import json
from typing import Any

from rlvr_gym import Env, Failure, FailureKind, RewardResult, StepResult, Task, TaskSuite
from rlvr_gym.core import draw_seed
from rlvr_gym.sandbox import SandboxLimits
from rlvr_gym_code.batch import BatchJudge
from rlvr_gym_code.extract import extract_code
from rlvr_gym_code.humaneval import HumanEvalRefineEnv
from rlvr_gym_code.judge import AST_LOCK, DEFAULT_LIMITS, JudgeReport, PythonTests, interactive_sandbox, judge_python
from rlvr_gym_code.synth import ENTRY_POINT, ENV_ID, generate_task, generate_tasks

SOLVED = "All tests passed."
FIX = "Fix the function."
REPEATED = "You submitted this function before:"
CHANGE = "Change the function."
MAX_SHOWN_CHARS = 60
"""A value longer than this is cut in the feedback (the whole episode must fit a 512-token context)."""
REPEATABLE_FAILURES = (FailureKind.PARSE_ERROR, FailureKind.INVALID_ACTION)
"""Failures that a resubmission of the same code would meet again; a wrong answer (no failure) is one too. A
timeout, a sandbox limit or a sandbox error can come from a loaded machine, so ``reject_repeats`` judges such code
again."""
LIMIT_KINDS = (FailureKind.MEMORY_LIMIT, FailureKind.OUTPUT_LIMIT, FailureKind.DISK_LIMIT, FailureKind.PROCESS_LIMIT)
"""Failures whose message, not the failing call, is the feedback (the call failed because of the limit)."""
_SETUP = '''
import json

CASES = json.loads({cases})


def _same(got, want):
    if isinstance(want, list):
        return type(got) is list and len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    return type(got) is type(want) and got == want


def _cut(text):
    return text if len(text) <= {limit} else text[:{limit} - 3] + "..."


def _show(value):
    return _cut(repr(value))
'''
_TEST = '''
def check(candidate):
    for args, want in CASES:
        call = "f(" + ", ".join(repr(a) for a in args) + ")"
        try:
            got = candidate(*args)
        except Exception as error:
            ok, note = False, call + " raised " + type(error).__name__ + ": " + _cut(str(error))
        else:
            ok, note = _same(got, want), call + " should be " + _show(want) + ", got " + _show(got)
        try:
            assert ok
        except AssertionError as failure:
            failure.add_note(note)
            raise
'''


def synth_tests(data: dict[str, Any]) -> PythonTests:
    """The hidden tests of a task: ``f(*args)`` must equal ``expected`` (same types) for every case, in order."""
    setup = _SETUP.format(cases=json.dumps(json.dumps(data["cases"])), limit=MAX_SHOWN_CHARS)
    return PythonTests(data.get("entry_point", ENTRY_POINT), _TEST, setup_source=setup)


def defines_entry_point(code: str, entry_point: str = ENTRY_POINT) -> bool | None:
    """True when ``code`` defines ``entry_point`` at top level, False when not, None when it does not parse."""
    try:
        with AST_LOCK:
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point for n in tree.body)


def verify_synth(
    data: dict[str, Any], action: str, *, backend: str = "auto", limits: SandboxLimits = DEFAULT_LIMITS,
    judge: BatchJudge | None = None,
) -> tuple[RewardResult, JudgeReport]:
    """Scores an action on a Synth task: 1.0 when ``f`` returns the expected value on every hidden case.

    Args:
        data: the task's ``data`` (``entry_point``, ``cases``).
        action: the agent's text (the function, raw or in a fenced block).
        backend: the sandbox back-end (see :func:`rlvr_gym.sandbox.get_sandbox`).
        limits: limits of the candidate's sandbox.
        judge: a long-lived :class:`rlvr_gym_code.batch.BatchJudge` to judge in (same verdicts).

    Returns:
        ``(reward, report)``; ``reward.components``: ``passed`` (0/1) and ``cases_passed`` (cases that held
        before the first failing one).
    """
    code = extract_code(action)
    entry_point = data.get("entry_point", ENTRY_POINT)
    defined = defines_entry_point(code, entry_point) if code.strip() else None
    if not code.strip():
        report = JudgeReport(False, reason="no code found: answer with the function",
                             failure=Failure(FailureKind.PARSE_ERROR, "the action contains no code"))
    elif defined is False:
        reason = f"your code does not define {entry_point}: start it with the def line of the task"
        report = JudgeReport(False, reason=reason, failure=Failure(FailureKind.INVALID_ACTION, reason))
    else:  # it defines f, or it does not parse and the judge reports the syntax error
        tests = synth_tests(data)
        report = (judge.judge(code, tests) if judge is not None
                  else judge_python(code, tests, sandbox=interactive_sandbox(backend), limits=limits))
    held = report.num_asserts if report.passed else max(report.num_asserts - 1, 0)
    components = {"passed": float(report.passed), "cases_passed": float(held)}
    return RewardResult(float(report.passed), components, report.reason[:2000]), report


def feedback(report: JudgeReport) -> str:
    """The observation after a failing attempt, one or two short lines.

    The sandbox limit the program hit (memory, output, disk, processes), else the first failing call with
    its expected and actual value (or the exception it raised), else the first line of the judge's reason (syntax error, timeout, limit) or the exception's last line for a program
    that raised while loading; then the tail of what the program printed, if anything.
    """
    reason = report.reason.strip()
    head, _, rest = reason.partition("\n")
    if report.failure is not None and report.failure.kind in LIMIT_KINDS:
        text = report.failure.message.splitlines()[0][:200]
        text = text[:1].upper() + text[1:] + ("" if text.endswith(".") else ".")
    elif head.startswith("test failed") and rest.strip():
        text = f"Test failed: {rest.strip().splitlines()[-1]}."
    elif head.startswith("the program raised while loading") and rest.strip():
        text = f"Your code raised while loading: {rest.strip().splitlines()[-1][:200]}."
    else:
        text = (head[:200] + ".") if head and not head.endswith(".") else head[:200]
        text = text[:1].upper() + text[1:]
    printed = report.output.strip().splitlines()[-2:]
    if printed:
        text += f"\nIt printed: {' / '.join(printed)[-120:]}"
    return f"{text}\n{FIX}"


class SynthEnv(HumanEvalRefineEnv):
    """``code/Synth-v0``: write a generated function; the failing test is the next observation (3 turns).

    Reset with ``options={"task": task}``: a task of ``code/synth-*`` (its ``data`` holds the prompt and hidden
    cases); a task with only ``options["seed"]`` generates its function from that seed (training structures),
    and no task draws a seed from ``self.np_random``, so the env is also a generator of fresh tasks.

    Args:
        backend: sandbox back-end name (``"auto"``, ``"bwrap"``, ...).
        timeout_s: wall-clock limit of one judgement, in seconds (also the CPU-time limit, rounded down, >= 1);
            the functions take microseconds, so a run this long is an endless loop.
        persistent_sandbox: True: judge in one long-lived sandbox per env (about 8x less judging time per step,
            one idle sandbox process per env); None (default): borrow a shared long-lived sandbox per step
            inside ``hold_shared_resources()`` (as the trainer and evaluations run), else a fresh one per step;
            False: a fresh sandbox per step (see :class:`rlvr_gym_code.humaneval.HumanEvalEnv`).
        max_turns: the turn limit (default 3).
        reject_repeats: True: code that failed before in the episode with a wrong answer, a syntax error or no
            ``def f`` (the same code as :func:`submitted_code` compares it: trailing whitespace and surrounding
            blank lines aside) is not judged again: the observation says so and repeats that judgement's feedback,
            and the turn is an ``invalid_action`` (a trainer's invalid-action penalty applies); it still takes a
            turn. Code that timed out or hit a sandbox limit is judged again. False (default): it is judged again.

    Version History:
        v0: first version (six frames, held-out frame-and-primitive combinations, six hidden cases); the
        ``reject_repeats`` option came later, off by default, so v0's episodes are unchanged.
    """

    max_turns = 3
    required_keys = ("prompt", "entry_point", "cases")

    def __init__(self, backend: str = "auto", timeout_s: float = 3.0, persistent_sandbox: bool | None = None,
                 max_turns: int | None = None, reject_repeats: bool = False, render_mode: str | None = None) -> None:
        super().__init__(backend=backend, timeout_s=timeout_s, persistent_sandbox=persistent_sandbox,
                         max_turns=max_turns, render_mode=render_mode)
        self.reject_repeats = bool(reject_repeats)

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        if task is not None and all(key in task.data for key in self.required_keys):
            self.data = dict(task.data)
        else:
            seed = task.options.get("seed") if task is not None else None
            self.data = generate_task(int(seed) if seed is not None else draw_seed(self.np_random)).data()
        self.last_report: JudgeReport | None = None
        self.failed_before: dict[str, str] = {}  # a failed submission's code -> its feedback
        return self.data["prompt"], self._info()

    def _info(self) -> dict[str, Any]:
        return {"entry_point": self.data.get("entry_point", ENTRY_POINT),
                "admissible_actions": list(self.data.get("near_misses", []))}

    def oracle_action(self) -> str:
        """The task's solution (the expert of ``sft.expert: oracle``; the same on every turn).

        Raises:
            ValueError: when the task carries no solution.
        """
        solution = self.data.get("solution")
        if not solution:
            raise ValueError(f"task {getattr(self.task, 'id', None)!r} has no solution in its data")
        return str(solution)

    def instructions(self) -> str:
        return str(self.data["prompt"])

    def verify(self, action: str) -> tuple[RewardResult, JudgeReport]:
        with self.step_judge() as judge:
            return verify_synth(self.data, action, backend=self.backend, limits=self.limits, judge=judge)

    def _step(self, action: str) -> StepResult:
        code = submitted_code(action) if self.reject_repeats else ""  # "": nothing is remembered
        if code in self.failed_before:
            message = "you submitted this function before"
            observation = f"{REPEATED} {self.failed_before[code].replace(FIX, '').strip()}\n{CHANGE}"
            reward = RewardResult(0.0, {"passed": 0.0, "cases_passed": 0.0}, message)
            return StepResult(observation, 0.0, False, False,
                              {"failure": Failure(FailureKind.INVALID_ACTION, message), "success": False,
                               "reward_details": reward.to_dict(), **self._info()})
        reward, info = self._judge(action)
        info.update(self._info())
        if reward.success:
            return StepResult(SOLVED, 1.0, True, False, info)
        text = feedback(self.last_report)  # type: ignore[arg-type]
        failure = info.get("failure")
        if code and (failure is None or failure.kind in REPEATABLE_FAILURES):
            self.failed_before[code] = text  # a verdict of the code itself, not of the machine's load
        return StepResult(text, 0.0, False, False, info)


def submitted_code(action: str) -> str:
    """The code of ``action`` as ``reject_repeats`` compares it: the extracted code block with each line's trailing
    whitespace and the blank lines around it removed; indentation, the first line's included, is kept (an indented
    first line is a syntax error that its unindented repair must not be taken for)."""
    return "\n".join(line.rstrip() for line in extract_code(action).splitlines()).strip("\n")


def malformed_programs(env: Env) -> list[str]:
    """Slips of the solution that the env rejects without running them, for SFT demonstrations with invalid
    actions (``sft.invalid_actions=rlvr_gym_code:malformed_programs``): the def line without its colon, an
    unclosed bracket, the function under another name, the body alone. The env's feedback to them (a
    ``parse_error`` or ``invalid_action``) and the expert's recovery enter the demonstration; the slips
    themselves are never imitated.

    Raises:
        TypeError: when ``env`` is not a :class:`SynthEnv`.
    """
    if not isinstance(env, SynthEnv):
        raise TypeError(f"malformed_programs needs a SynthEnv, got {type(env).__name__}")
    solution = env.oracle_action()
    def_line, _, body = solution.partition("\n")
    slips = [def_line.rstrip(":") + "\n" + body, solution.replace(")", "", 1),
             solution.replace(f"def {ENTRY_POINT}(", "def g(", 1),
             "\n".join(line[4:] for line in body.splitlines()) + "\n"]
    return [slip for slip in slips if slip != solution]


SYNTH_SIZES: dict[str, int] = {"train": 1000, "test": 200}
"""Tasks per shipped split (``code/synth-<split>``), as the text world's starter suites."""


def build_synth_suites() -> list[TaskSuite]:
    """``code/synth-train`` and ``code/synth-test``, deterministic, every gold and wrong verified in the sandbox.

    Raises:
        RuntimeError: when a solution fails its hidden tests or a near miss passes them (a grammar bug).
    """
    from rlvr_gym_code.batch import judge_many

    suites = []
    for split, size in SYNTH_SIZES.items():
        tasks = generate_tasks(ENV_ID, split, size)  # type: ignore[arg-type]
        jobs = [(program, synth_tests(t.data), t.id, program == t.gold[0])  # type: ignore[index]
                for t in tasks for program in [*t.gold, *t.data["near_misses"]]]  # type: ignore[misc]
        reports = judge_many([(program, tests) for program, tests, _, _ in jobs], batch_size=25, max_workers=2)
        wrong = sorted({task_id for (_, _, task_id, gold), r in zip(jobs, reports) if r.passed != gold})
        if wrong:
            raise RuntimeError(f"{len(wrong)} {split} task(s) with a failing solution or a passing near miss: "
                               f"{wrong[:5]}")
        suites.append(TaskSuite(f"synth-{split}", tasks))
    return suites
