"""Builds the RTL task suites under ``tasks/rtl/`` (run once; the outputs are committed).

    python -m rlvr_gym_rtl.build_suites [--source /path/to/verilog-eval] [--tasks-dir tasks]

* copies the VerilogEval problems (and LICENSE) into ``tasks/rtl/verilog-eval/`` with a manifest;
* ``verilogeval.jsonl`` (``rtl/VerilogEval-v0``) and ``verilogeval-refine.jsonl``
  (``rtl/VerilogEval-Refine-v0``): one task per problem whose reference passes here; gold is the reference
  renamed to ``TopModule``; wrong is the first mutation (:func:`rlvr_gym_rtl.verilog_eval.mutations`) the
  judge fails, else the reference with an inverted output;
* ``generated-{train,dev,test}.jsonl`` (``rtl/Generated-v0``), ``generated-refine-dev.jsonl``
  (``rtl/Generated-Refine-v0``) and ``generated-easy-{dev,test}.jsonl`` (``rtl/GeneratedEasy-Refine-v0``):
  generated problems on disjoint seed ranges, kinds in rotation.

Every gold is checked to pass and every wrong to fail with the real judge before it is written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
from pathlib import Path

from rlvr_gym.tasks import Split, Task, TaskSuite, tasks_dir
from rlvr_gym_rtl.generated import EASY_KINDS, KINDS, generate_problem
from rlvr_gym_rtl.judge import ReferenceFailedError, RtlJudge
from rlvr_gym_rtl.problem import RtlProblem, gold_action
from rlvr_gym_rtl.verilog_eval import (
    BUNDLED_DIR,
    IVERILOG11_LIMITS,
    inverted_output,
    load_problems,
    mutations,
    problem_names,
)

VERILOG_EVAL_SOURCE = "https://github.com/NVlabs/verilog-eval (v2, dataset_spec-to-rtl)"
REFINE_TURNS = 3
GENERATED_SPLITS = {"train": (0, 300), "dev": (1_000_000, 40), "test": (2_000_000, 40)}
"""split -> (first seed, number of problems); seed ranges are disjoint."""
EASY_SPLITS: dict[Split, tuple[int, int]] = {"dev": (4_000_000, 40), "test": (4_000_040, 200)}
"""easy split -> (first seed, number of problems): disjoint from each other and from the task-less problems
the warm start and RL draw (:data:`rlvr_gym_rtl.env.TASKLESS_MIN_SEED` up)."""


def wrong_design(judge: RtlJudge, problem: RtlProblem) -> tuple[str, str]:
    """The first mutation of the reference that the judge fails (and that lints clean), with its label."""
    for label, mutant in mutations(problem.reference_solution()):
        judgement = judge.judge(problem, gold_action(mutant))
        if judgement.outcome.stage not in ("extract", "lint") and not judgement.result.success:
            return mutant, f"mutation {label}"
    mutant = inverted_output(problem.reference, judge.problem_facts(problem).ports)
    if judge.judge(problem, gold_action(mutant)).result.success:
        raise RuntimeError(f"{problem.name}: even the inverted-output mutant passes; the testbench is too weak")
    return mutant, "inverted output"


def gold_and_wrong(judge: RtlJudge, problem: RtlProblem) -> tuple[str, str, str]:
    """(gold action, wrong action, wrong label), both verified with the judge."""
    judge.problem_facts(problem)  # raises ReferenceFailedError when the reference fails here
    gold = gold_action(problem.reference_solution())
    verdict = judge.judge(problem, gold)
    if not verdict.result.success:
        raise RuntimeError(f"{problem.name}: the gold design fails: {verdict.result.reason}")
    wrong, label = wrong_design(judge, problem)
    return gold, gold_action(wrong), label


def copy_verilog_eval(source: Path, target: Path) -> list[str]:
    """Copies the problem files and the licence; returns the problem names."""
    target.mkdir(parents=True, exist_ok=True)
    names = sorted(p.name.removesuffix("_prompt.txt") for p in source.glob("*_prompt.txt"))
    for name in names:
        for suffix in ("_prompt.txt", "_ref.sv", "_test.sv"):
            shutil.copyfile(source / f"{name}{suffix}", target / f"{name}{suffix}")
    shutil.copyfile(source / "LICENSE", target / "LICENSE")
    return names


def write_problem_manifest(target: Path, names: list[str], excluded: dict[str, str]) -> None:
    """``tasks/rtl/verilog-eval/manifest.json``: source, licence, files with SHA-256, excluded problems."""
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(target.iterdir())
             if p.is_file() and p.name != "manifest.json"}
    manifest = {"source": VERILOG_EVAL_SOURCE, "licence": "MIT (see LICENSE)", "num_problems": len(names),
                "note": "104 of the 156 spec-to-RTL problems (numbers not divisible by 3)",
                "excluded_with_iverilog_11": excluded, "files": files}
    (target / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def verilog_eval_suites(judge: RtlJudge, root: Path, names: list[str]) -> dict[str, str]:
    """Writes ``verilogeval.jsonl`` and ``verilogeval-refine.jsonl``; returns the excluded problems."""
    single, refine, excluded = [], [], {}
    for problem in load_problems(root / BUNDLED_DIR):
        try:
            gold, wrong, label = gold_and_wrong(judge, problem)
        except ReferenceFailedError as error:
            excluded[problem.name] = IVERILOG11_LIMITS.get(problem.name, str(error)[:300])
            continue
        data = {"problem_dir": BUNDLED_DIR, "name": problem.name}
        meta = {"source": "verilog-eval", "wrong": label}
        single.append(Task(id=f"ve-{problem.name}", env_id="rtl/VerilogEval-v0", data=data, gold=[gold],
                           wrong=[wrong], split="test", metadata=meta))
        refine.append(Task(id=f"ve-refine-{problem.name}", env_id="rtl/VerilogEval-Refine-v0", data=data,
                           gold=[gold], wrong=[wrong] * REFINE_TURNS, split="test", metadata=meta))
    extra = {"excluded_with_iverilog_11": excluded, "problems": len(names)}
    for suite_name, tasks in (("verilogeval", single), ("verilogeval-refine", refine)):
        suite = TaskSuite(suite_name, tasks)
        suite.save(root / "rtl" / f"{suite_name}.jsonl")
        suite.write_manifest(root / "rtl" / f"{suite_name}.manifest.json", source=VERILOG_EVAL_SOURCE,
                             licence="MIT", **extra)
    return excluded


def generated_suites(judge: RtlJudge, root: Path) -> None:
    """Writes ``generated-{train,dev,test}.jsonl`` and ``generated-refine-dev.jsonl``."""
    kinds = sorted(KINDS)
    for split, (first_seed, count) in GENERATED_SPLITS.items():
        tasks, refine = [], []
        for i in range(count):
            seed, kind = first_seed + i, kinds[i % len(kinds)]
            problem = generate_problem(seed, kind)
            gold, wrong, label = gold_and_wrong(judge, problem)
            data = {"generator_seed": seed, "kind": kind, "name": problem.name}
            meta = {"source": "generated", "kind": kind, "wrong": label}
            tasks.append(Task(id=f"gen-{split}-{i:04d}", env_id="rtl/Generated-v0", data=data, gold=[gold],
                              wrong=[wrong], split=split, metadata=meta))  # type: ignore[arg-type]
            refine.append(Task(id=f"gen-refine-{split}-{i:04d}", env_id="rtl/Generated-Refine-v0", data=data,
                               gold=[gold], wrong=[wrong] * REFINE_TURNS, split=split,  # type: ignore[arg-type]
                               metadata=meta))
        _save(TaskSuite(f"generated-{split}", tasks), root)
        if split == "dev":
            _save(TaskSuite("generated-refine-dev", refine), root)
    generated_easy_suite(judge, root)


def generated_easy_suite(judge: RtlJudge, root: Path) -> None:
    """Writes ``generated-easy-{dev,test}.jsonl`` (``rtl/GeneratedEasy-Refine-v0``)."""
    for split, (first_seed, count) in EASY_SPLITS.items():
        easy = []
        for i in range(count):
            seed, kind = first_seed + i, EASY_KINDS[i % len(EASY_KINDS)]
            gold, wrong, label = gold_and_wrong(judge, generate_problem(seed, kind))
            easy.append(Task(id=f"gen-easy-{split}-{i:04d}", env_id="rtl/GeneratedEasy-Refine-v0",
                             data={"generator_seed": seed, "kind": kind, "name": f"gen_{kind}_{seed}"},
                             gold=[gold], wrong=[wrong] * REFINE_TURNS, split=split,
                             metadata={"source": "generated", "kind": kind, "wrong": label}))
        _save(TaskSuite(f"generated-easy-{split}", easy), root)


def _save(suite: TaskSuite, root: Path) -> None:
    suite.save(root / "rtl" / f"{suite.name}.jsonl")
    suite.write_manifest(root / "rtl" / f"{suite.name}.manifest.json", source="rlvr_gym_rtl.generated (v0)",
                         licence="Apache-2.0", generator="rlvr_gym_rtl.generated.generate_problem")


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=None,
                        help="a VerilogEval-layout directory to copy the problems from (default: keep the bundled copy)")
    parser.add_argument("--tasks-dir", type=Path, default=None, help="the tasks/ folder (default: the repo's)")
    parser.add_argument("--skip-generated", action="store_true")
    args = parser.parse_args(argv)
    root = args.tasks_dir or tasks_dir()
    judge = RtlJudge()
    if args.source is not None:
        names = copy_verilog_eval(args.source, root / BUNDLED_DIR)
    else:
        names = problem_names(root / BUNDLED_DIR)
    excluded = verilog_eval_suites(judge, root, names)
    write_problem_manifest(root / BUNDLED_DIR, names, excluded)
    print(f"verilog-eval: {len(names) - len(excluded)} tasks, excluded {sorted(excluded)}")
    if not args.skip_generated:
        generated_suites(judge, root)
        print("generated suites written")


if __name__ == "__main__":
    main()
