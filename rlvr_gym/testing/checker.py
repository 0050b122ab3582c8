"""The conformance checker: does a registered env honour the rlvr_gym contract?

``check_env(env_id)`` runs, in order (see :mod:`rlvr_gym.testing.checks` and :mod:`rlvr_gym.testing.gymnasium_checks`):

- ``gymnasium_api``: Gymnasium's ``gymnasium.utils.env_checker`` functions that apply to text spaces (spaces,
  reset/step return types, seeded-reset determinism, reset options, passive step checks, returned data not
  reused, one-step determinism), with ``options["task"]`` injected into every reset. Not applicable, so not
  run: :data:`rlvr_gym.testing.gymnasium_checks.GYMNASIUM_NOT_APPLICABLE`. Gymnasium's warnings become notes.
- ``render``: ``render()`` returns text in every declared render mode.
- ``info_conventions``: ``task_id`` and ``turn`` in every info, ``admissible_actions`` a list of str, ``tools``
  OpenAI-style function schemas (gold actions outside the admissible list are noted).
- ``seed_determinism``: the same task, seed and actions (gold, wrong, random) give the same observations,
  rewards and end flags in two fresh envs (skipped for envs registered ``nondeterministic=True``).
- ``fork_equivalence``: after ``fork()`` at the root and mid-episode, the copy and the original give the
  same transitions as an unforked run, and stepping the copy leaves the original unchanged (skipped when
  ``supports_fork`` is False).
- ``gold_and_wrong``: gold actions end in success with ``reward_details``/``success`` in the last info;
  wrong actions score less and are no success.
- ``malformed_actions``: random text from the action space, ``""``, a 200k-character string, control
  characters, plausible near misses (the env's admissible actions, tool schemas and the task's gold actions
  mutated: wrong ids, wrong types, truncated; :mod:`rlvr_gym.testing.fuzz`) and lone surrogates (toggle:
  ``surrogates=`` / ``RLVR_GYM_CHECK_SURROGATES=0``) never raise and yield a text observation; a failure
  names the action.
- ``turn_limit``: ``make(env_id, max_turns=2)`` ends an episode by turn 2.
- ``close``: ``close()`` leaves no child process running (read through psutil); twice is safe.

A failing check raises :class:`CheckError` naming the env, the check, the problem and the fix (with
``raise_on_failure=False`` the report is returned instead, with every check run).
"""

from __future__ import annotations

import dataclasses
import os
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Literal

from rlvr_gym.registry import spec
from rlvr_gym.tasks import Task, TaskFileError, load_suite
from rlvr_gym.testing import checks, gymnasium_checks
from rlvr_gym.testing.checks import CheckContext, CheckFailed, CheckSkipped

Status = Literal["passed", "skipped", "failed"]

ALL_CHECKS: dict[str, Callable[[CheckContext], str]] = {
    "gymnasium_api": gymnasium_checks.check_gymnasium_api,
    "render": gymnasium_checks.check_render,
    "info_conventions": checks.check_info_conventions,
    "seed_determinism": checks.check_seed_determinism,
    "fork_equivalence": checks.check_fork,
    "gold_and_wrong": checks.check_gold_and_wrong,
    "malformed_actions": checks.check_malformed_actions,
    "turn_limit": checks.check_turn_limit,
    "close": checks.check_close,
}
"""The checks in the order they run; each returns a note, or raises CheckFailed / CheckSkipped."""


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: the check's name (a key of :data:`ALL_CHECKS`).
        status: ``passed``, ``skipped`` (does not apply; ``message`` says why) or ``failed``.
        message: what was checked, or what went wrong and how to fix it.
        elapsed_s: wall-clock seconds the check took.
    """

    name: str
    status: Status
    message: str
    elapsed_s: float


@dataclasses.dataclass
class CheckReport:
    """All check results for one env.

    Attributes:
        env_id: the env checked.
        task_ids: the tasks the checks used.
        results: one :class:`CheckResult` per check, in run order.
    """

    env_id: str
    task_ids: list[str]
    results: list[CheckResult] = dataclasses.field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when no check failed."""
        return all(r.status != "failed" for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        """The failed checks."""
        return [r for r in self.results if r.status == "failed"]

    def __str__(self) -> str:
        lines = [f"{self.env_id} on tasks {', '.join(self.task_ids)}:"]
        lines += [f"  [{r.status:>7}] {r.name} ({r.elapsed_s:.2f}s): {r.message}" for r in self.results]
        return "\n".join(lines)


class CheckError(AssertionError):
    """An env failed a conformance check. The message names the env, the check, the problem and the fix;
    ``report`` holds every result so far."""

    def __init__(self, message: str, report: CheckReport) -> None:
        super().__init__(message)
        self.report = report


def check_env(
    env_id: str,
    tasks: Sequence[Task] | None = None,
    num_tasks: int = 3,
    *,
    checks: Sequence[str] | None = None,
    raise_on_failure: bool = True,
    seed: int = 0,
    surrogates: bool | None = None,
) -> CheckReport:
    """Runs the conformance checks on a registered env.

    Args:
        env_id: a registered id, ``family/Name-vN`` (or ``module:family/Name-vN`` to import ``module`` first).
        tasks: the tasks to check on; None loads ``spec(env_id).default_suite`` with
            :func:`rlvr_gym.load_suite`. Tasks with gold actions are preferred.
        num_tasks: how many tasks to use (>= 1).
        checks: names of the checks to run (default: all, in order).
        raise_on_failure: raise :class:`CheckError` at the first failed check; when False every check runs
            and the report carries the failures.
        seed: seeds the random actions.
        surrogates: send actions with lone surrogates (``"\\ud800"``) in ``malformed_actions``; None reads
            ``RLVR_GYM_CHECK_SURROGATES`` (``0`` turns them off; default on).

    Returns:
        The :class:`CheckReport`.

    Raises:
        CheckError: when a check fails (and ``raise_on_failure``), or when there are no tasks to check on.
        rlvr_gym.UnknownEnvError: when ``env_id`` is not registered.
        ValueError: on ``num_tasks < 1`` or an unknown check name.
    """
    if num_tasks < 1:
        raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
    unknown = sorted(set(checks or ()) - set(ALL_CHECKS))
    if unknown:
        raise ValueError(f"unknown checks {unknown}; known: {', '.join(ALL_CHECKS)}")
    env_spec = spec(env_id)
    env_id = env_spec.id  # drops a "module:" prefix
    chosen = _choose_tasks(env_id, tasks, num_tasks)
    report = CheckReport(env_id, [t.id for t in chosen])
    if surrogates is None:
        surrogates = os.environ.get("RLVR_GYM_CHECK_SURROGATES", "1") != "0"
    ctx = CheckContext(env_id, env_spec, chosen, seed, surrogates)
    for name in checks or ALL_CHECKS:
        result = _run_check(name, ctx)
        report.results.append(result)
        if result.status == "failed" and raise_on_failure:
            raise CheckError(f"{env_id} failed check '{name}': {result.message}", report)
    return report


def _run_check(name: str, ctx: CheckContext) -> CheckResult:
    start = time.perf_counter()
    try:
        note = ALL_CHECKS[name](ctx)
    except CheckSkipped as skip:
        return CheckResult(name, "skipped", str(skip), time.perf_counter() - start)
    except CheckFailed as failure:
        message = f"{failure.problem}. How to fix: {failure.fix}."
        return CheckResult(name, "failed", message, time.perf_counter() - start)
    except Exception as error:  # noqa: BLE001 - an env raising inside a check is a failed check
        where = traceback.extract_tb(error.__traceback__)[-1]
        message = (f"raised {type(error).__name__}: {error} (at {where.filename}:{where.lineno}). How to fix: "
                   "the env must not raise on valid use; a malformed action is an observation plus a Failure.")
        return CheckResult(name, "failed", message, time.perf_counter() - start)
    return CheckResult(name, "passed", note or "ok", time.perf_counter() - start)


def _choose_tasks(env_id: str, tasks: Sequence[Task] | None, num_tasks: int) -> list[Task]:
    if tasks is None:
        suite_name = spec(env_id).default_suite
        if suite_name is None:
            raise CheckError(f"{env_id} has no default_suite to check on; register it with "
                             "default_suite='family/suite' or pass tasks=", CheckReport(env_id, []))
        try:
            tasks = load_suite(suite_name).tasks
        except (FileNotFoundError, TaskFileError) as error:
            raise CheckError(f"{env_id}: cannot load its default suite {suite_name!r}: {error}. How to fix: ship "
                             f"tasks/{suite_name}.jsonl or pass tasks=", CheckReport(env_id, [])) from None
    mine = [t for t in tasks if t.env_id == env_id]
    if not mine:
        raise CheckError(f"{env_id}: none of the {len(tasks)} given tasks has env_id {env_id!r}; "
                         "pass tasks of this env", CheckReport(env_id, []))
    with_gold = [t for t in mine if t.gold]
    return (with_gold + [t for t in mine if not t.gold])[:num_tasks]
