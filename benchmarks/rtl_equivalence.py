"""The RTL judge's formal equivalence check: what it decides on every shipped reference, and what it costs.

Part 1 (``--decide``): every shipped reference (the VerilogEval suite and the generated suites but
``--skip-suites``), renamed to ``TopModule``, checked against itself with
:func:`rlvr_gym_rtl.equivalence.check_equivalence`. Each should be ``equivalent``; the script counts the
verdicts and lists every problem the check cannot decide (``unknown``) or wrongly refutes.

Part 2 (``--time``): judge time per problem, interleaved per problem (so all see the same load):
the VerilogEval harness's bare ``iverilog`` + ``vvp`` (unsandboxed), :class:`rlvr_gym_rtl.judge.RtlJudge`
with the check off, and with it on (``strict``). Prints per repetition the summed seconds, then min /
median / max over repetitions and the ratios of the medians to the bare harness.

Usage: ``.venv/bin/python benchmarks/rtl_equivalence.py [--decide] [--time] [--repeats 3] [--limit 103]
[--steps 20]``
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

from rlvr_gym_rtl.equivalence import check_equivalence
from rlvr_gym_rtl.generated import generate_problem
from rlvr_gym_rtl.judge import ReferenceFailedError, RtlJudge
from rlvr_gym_rtl.problem import RtlProblem, gold_action
from rlvr_gym_rtl.verilog_eval import load_problem, resolve_problem_dir
from rtl_judge import run_harness

from rlvr_gym.tasks import load_suite

SUITES = ("rtl/verilogeval", "rtl/generated-dev", "rtl/generated-easy-dev", "rtl/generated-refine-dev",
          "rtl/generated-test", "rtl/generated-train")


def shipped_problems(suites: tuple[str, ...]) -> list[RtlProblem]:
    """The distinct problems of ``suites`` (by reference and testbench)."""
    found: dict[str, RtlProblem] = {}
    for suite in suites:
        for task in load_suite(suite).tasks:
            data = task.data
            if "problem_dir" in data:
                problem = load_problem(resolve_problem_dir(str(data["problem_dir"])), str(data["name"]))
            elif "generator_seed" in data:
                problem = generate_problem(int(data["generator_seed"]), data.get("kind"))
            else:
                problem = RtlProblem.from_data(data)
            found.setdefault(problem.key, problem)
    return list(found.values())


def decide(problems: list[RtlProblem], judge: RtlJudge, steps: int) -> None:
    verdicts: collections.Counter[str] = collections.Counter()
    undecided, seconds = [], []
    for problem in problems:
        result = check_equivalence(judge.sandbox, problem.reference, problem.reference_solution(), max_steps=steps)
        verdicts[result.status] += 1
        seconds.append(result.duration_s)
        if result.status != "equivalent":
            undecided.append(f"{problem.name}: {result.status} ({result.detail[:120]})")
    print(f"{len(problems)} shipped references against themselves (renamed), {steps} steps: {dict(verdicts)}; "
          f"check time min {min(seconds):.2f} s, median {statistics.median(seconds):.2f} s, max {max(seconds):.2f} s")
    for line in undecided:
        print("  " + line)


def time_judges(problems: list[RtlProblem], repeats: int, steps: int) -> None:
    judges = {"judge (check off)": RtlJudge(), "judge (check on)": RtlJudge(equivalence="strict", equivalence_steps=steps)}
    usable = []
    for problem in problems:
        try:
            for judge in judges.values():
                judge.problem_facts(problem)
            usable.append(problem)
        except ReferenceFailedError:
            continue
    totals: dict[str, list[float]] = {"bare iverilog+vvp": [], **{name: [] for name in judges}}
    for rep in range(repeats):
        rep_totals = dict.fromkeys(totals, 0.0)
        passes = dict.fromkeys(totals, 0)
        for problem in usable:
            code = problem.reference_solution()
            seconds, ok = run_harness(problem, code)
            rep_totals["bare iverilog+vvp"] += seconds
            passes["bare iverilog+vvp"] += ok
            for name, judge in judges.items():
                start = time.perf_counter()
                ok = judge.judge(problem, gold_action(code)).result.success
                rep_totals[name] += time.perf_counter() - start
                passes[name] += ok
        for name, value in rep_totals.items():
            totals[name].append(value)
        print(f"rep {rep}: " + " | ".join(f"{n} {v:.2f} s ({passes[n]} pass)" for n, v in rep_totals.items()),
              flush=True)
    base = statistics.median(totals["bare iverilog+vvp"])
    for name, values in totals.items():
        med = statistics.median(values)
        print(f"{name:>18}: min {min(values):.2f} s, median {med:.2f} s, max {max(values):.2f} s, "
              f"{1000 * med / len(usable):.1f} ms/problem, ratio to bare {med / base:.2f}x")
    for judge in judges.values():
        judge.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decide", action="store_true", help="part 1: every shipped reference against itself")
    parser.add_argument("--time", action="store_true", help="part 2: judge time with and without the check")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=int, default=103, help="VerilogEval problems timed in part 2")
    parser.add_argument("--steps", type=int, default=20, help="equivalence_steps")
    parser.add_argument("--skip-suites", nargs="*", default=[], help="suites left out of part 1")
    args = parser.parse_args()
    judge = RtlJudge()
    if args.decide or not args.time:
        decide(shipped_problems(tuple(s for s in SUITES if s not in args.skip_suites)), judge, args.steps)
    if args.time:
        time_judges(shipped_problems(("rtl/verilogeval",))[: args.limit], args.repeats, args.steps)
    judge.close()


if __name__ == "__main__":
    main()
