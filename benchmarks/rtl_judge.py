"""Judges the VerilogEval reference solutions two ways and prints the times side by side.

* baseline: the VerilogEval harness's own command per problem (its Makefile, without the log analysis):
  ``iverilog -Wall -Winfloop -Wno-timescale -g2012 -s tb -o bin sample.sv test.sv ref.sv`` then
  ``timeout 30 vvp -n ./bin``, unsandboxed, files written to a fresh temporary directory;
* ours: :meth:`rlvr_gym_rtl.judge.RtlJudge.judge` on the same design as an agent answer: extraction, pyslang
  lint and interface check, stand-alone elaboration (when the design has a dotted name), compile, simulation
  in a bubblewrap sandbox, verdict. The reference's sample count is learned once per problem (as in
  training) before timing; that one-time cost is printed separately. By default the judge keeps a spare
  sandbox started ahead of time (:mod:`rlvr_gym_rtl.runner`), launched while the previous judgement's run
  compiles; ``--cold`` starts one sandbox per judgement on the critical path instead.

Runs alternate per problem (baseline, ours, baseline, ours, ...) so both see the same machine load. The ratio
is ours / baseline on the summed wall-clock times of each repetition, and the median of per-problem ratios.
Target: ratio <= 1.0. A warm spare moves the sandbox start off the critical path (into the judge's own
wait and the time between judgements; ``--pause-ms 30`` keeps it out of the harness's turn) but does not
save its CPU time (~10 ms of mostly kernel time per start;
not measured here: the sandboxed processes are reaped outside this process, so rusage misses them).

Usage: ``.venv/bin/python benchmarks/rtl_judge.py [--repeats 3] [--limit 103] [--sandbox auto] [--cold]
[--pause-ms 0]``
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from rlvr_gym_rtl.judge import RtlJudge
from rlvr_gym_rtl.problem import RtlProblem, gold_action
from rlvr_gym_rtl.verilog_eval import load_problem, resolve_problem_dir

from rlvr_gym.tasks import load_suite

HARNESS_COMPILE = ["iverilog", "-Wall", "-Winfloop", "-Wno-timescale", "-g2012", "-s", "tb", "-o", "bin",
                   "sample.sv", "test.sv", "ref.sv"]


def run_harness(problem: RtlProblem, code: str) -> tuple[float, bool]:
    """Seconds and pass (``Mismatches: 0``) of the harness's command on ``code``."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "sample.sv").write_text(code)
        (work / "test.sv").write_text(problem.testbench)
        (work / "ref.sv").write_text(problem.reference)
        built = subprocess.run(HARNESS_COMPILE, check=False, cwd=work, capture_output=True, text=True)
        out = ""
        if built.returncode == 0:
            out = subprocess.run(["timeout", "30", "vvp", "-n", "./bin"], check=False, cwd=work, capture_output=True,
                                 text=True).stdout
    return time.perf_counter() - start, "Mismatches: 0 in" in out


def run_ours(judge: RtlJudge, problem: RtlProblem, action: str) -> tuple[float, bool]:
    """Seconds and pass of the full judge on ``action``."""
    start = time.perf_counter()
    passed = judge.judge(problem, action).result.success
    return time.perf_counter() - start, passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="alternating repetitions")
    parser.add_argument("--limit", type=int, default=103, help="number of VerilogEval problems")
    parser.add_argument("--sandbox", default="auto",
                        help="sandbox back-end of the judge (auto, bwrap, docker; 'subprocess' isolates nothing "
                             "and shows the pipeline's own cost without the sandbox start)")
    parser.add_argument("--cold", action="store_true", help="no spare sandbox: one sandbox start per judgement")
    parser.add_argument("--pause-ms", type=float, default=0.0,
                        help="untimed pause after each judgement, so that the next spare's set-up (which goes on "
                             "after the judgement returns) cannot overlap the harness's turn")
    args = parser.parse_args()
    tasks = load_suite("rtl/verilogeval").tasks[: args.limit]
    problems = [load_problem(resolve_problem_dir(t.data["problem_dir"]), t.data["name"]) for t in tasks]
    judge = RtlJudge(sandbox=args.sandbox, warm_sandbox=not args.cold)
    start = time.perf_counter()
    for problem in problems:
        judge.problem_facts(problem)
    once = time.perf_counter() - start
    print(f"judge sandbox: {judge.sandbox.name}")
    print(f"{len(problems)} problems; one-time reference runs: {once:.2f} s ({once / len(problems) * 1e3:.1f} ms/problem)")
    per_problem: dict[str, list[float]] = {p.name: [] for p in problems}
    for rep in range(args.repeats):
        base_total = ours_total = 0.0
        base_pass = ours_pass = 0
        for problem in problems:
            code = problem.reference_solution()
            base_s, base_ok = run_harness(problem, code)
            ours_s, ours_ok = run_ours(judge, problem, gold_action(code))
            time.sleep(args.pause_ms / 1e3)
            base_total, ours_total = base_total + base_s, ours_total + ours_s
            base_pass, ours_pass = base_pass + base_ok, ours_pass + ours_ok
            per_problem[problem.name].append(ours_s / base_s)
        print(f"rep {rep}: harness {base_total:6.2f} s ({base_pass} pass) | judge {ours_total:6.2f} s "
              f"({ours_pass} pass) | ratio {ours_total / base_total:.2f} | "
              f"{ours_total / len(problems) * 1e3:.1f} vs {base_total / len(problems) * 1e3:.1f} ms/problem")
    judge.close()
    medians = {name: statistics.median(r) for name, r in per_problem.items()}
    print(f"median per-problem ratio: {statistics.median(medians.values()):.2f}")
    worst = sorted(medians.items(), key=lambda kv: -kv[1])[:5]
    print("highest per-problem ratios: " + ", ".join(f"{n} {r:.2f}" for n, r in worst))


if __name__ == "__main__":
    main()
