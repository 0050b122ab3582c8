"""The random baseline (``rlvr-gym eval --agent random``) on every installed family's suites: pass@1 and pass@k.

Prints one row per suite: tasks, k, pass@1, pass@k and the failure that ended most episodes, and writes the
table as JSON. The random agent speaks each env's grammar (admissible actions, schema-typed tool calls, clicks
on page elements, Verilog and Python templates; see ``rlvr_gym.testing.RandomAgent``), so a family where
every suite reads 0 is a family whose tasks random valid-looking actions never solve.

    .venv/bin/python benchmarks/random_baselines.py --limit 40 -k 8 --out runs/random_baselines.json
    .venv/bin/python benchmarks/random_baselines.py --family web --limit 10 -k 4
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import rlvr_gym
from rlvr_gym.evaluation import evaluate
from rlvr_gym.testing import RandomAgent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--family", action="append", help="only these families (repeatable; default all)")
    parser.add_argument("--suite", action="append", help="only these suites, family/suite (repeatable)")
    parser.add_argument("--limit", type=int, default=40, help="tasks per suite (default 40)")
    parser.add_argument("-k", type=int, default=8, help="samples per task (default 8)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args()
    suites = args.suite or [s for s in rlvr_gym.list_suites() if args.family is None or s.split("/")[0] in args.family]
    rows = []
    print(f"{'suite':40s} {'tasks':>5s} {'k':>3s} {'pass@1':>7s} {'pass@k':>7s}  {'s':>6s}  most episodes ended by")
    for name in suites:
        tasks = rlvr_gym.load_suite(name).tasks[: args.limit]
        if not tasks:
            continue
        start = time.perf_counter()
        report = evaluate(RandomAgent(seed=args.seed), tasks, k=args.k, progress=False)
        m = report.metrics
        ended = max(m["episodes_ended_by"].items(), key=lambda kv: kv[1], default=("-", 0))
        row = {"suite": name, "num_tasks": m["num_tasks"], "k": args.k, "pass@1": m["pass@1"],
               "pass@k": m[f"pass@{args.k}"], "elapsed_s": time.perf_counter() - start, "ended_by": ended[0]}
        rows.append(row)
        print(f"{name:40s} {row['num_tasks']:5d} {args.k:3d} {row['pass@1']:7.3f} {row['pass@k']:7.3f}  "
              f"{row['elapsed_s']:6.1f}  {ended[0]} ({ended[1]})", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
