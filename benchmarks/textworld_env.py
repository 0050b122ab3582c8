"""Throughput of the text-world env on one core: steps, resets, forks, oracle plans.

Usage::

    .venv/bin/python benchmarks/textworld_env.py [--env textworld/ALFWorld-v0] [--seconds 2]

Prints operations per second; fork() is shown beside its baseline (``copy.deepcopy`` of the whole env, the
``rlvr_gym.Env`` default) with the speed-up ratio, the two measured in alternating slices so the ratio holds
on a loaded machine. Steps take random admissible actions (fixed seed) and
reset on episode end. No timed assertions: numbers only.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from rlvr_gym_textworld import ALFWorldEnv, oracle_plan

import rlvr_gym


def rate(operation: Callable[[], object], seconds: float) -> float:
    """Calls ``operation`` repeatedly for about ``seconds``; returns calls per second."""
    calls, started = 0, time.perf_counter()
    deadline = started + seconds
    while time.perf_counter() < deadline:
        for _ in range(20):
            operation()
        calls += 20
    return calls / (time.perf_counter() - started)


def interleaved_rates(operations: list[Callable[[], object]], seconds: float, slice_s: float = 0.05) -> list[float]:
    """Like :func:`rate` for several operations, measured in alternating slices so that a busy machine
    slows them all alike (the ratios stay meaningful under load)."""
    calls = [0] * len(operations)
    spent = [0.0] * len(operations)
    while sum(spent) < seconds:
        for index, operation in enumerate(operations):
            started = time.perf_counter()
            while time.perf_counter() - started < slice_s:
                for _ in range(10):
                    operation()
                calls[index] += 10
            spent[index] += time.perf_counter() - started
    return [c / s for c, s in zip(calls, spent, strict=True)]


def make_stepper(env: ALFWorldEnv) -> Callable[[], object]:
    """A closure taking one random admissible action, resetting when the episode ends."""
    rng = np.random.default_rng(0)
    episode = iter(range(10**9))
    info = env.reset(seed=next(episode))[1]

    def step() -> None:
        nonlocal info
        actions = info["admissible_actions"]
        result = env.step(actions[int(rng.integers(len(actions)))])
        info = result.info
        if result.terminated or result.truncated:
            info = env.reset(seed=next(episode))[1]

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="textworld/ALFWorld-v0")
    parser.add_argument("--seconds", type=float, default=2.0, help="measuring time per number")
    args = parser.parse_args()
    env = rlvr_gym.make(args.env)
    assert isinstance(env, ALFWorldEnv)
    print(f"{args.env}, one core, {args.seconds:.1f} s per number")
    print(f"  step (random admissible)   {rate(make_stepper(env), args.seconds):>10,.0f} /s")
    seeds = iter(range(10**9))
    print(f"  reset (generate a world)   {rate(lambda: env.reset(seed=next(seeds)), args.seconds):>10,.0f} /s")
    env.reset(seed=1)
    for action in oracle_plan(env.world_state)[:3]:
        env.step(action)
    fast, baseline = interleaved_rates([env.fork, env.fork_by_deepcopy], 2 * args.seconds)
    print(f"  fork() (state copy)        {fast:>10,.0f} /s")
    print(f"  fork baseline (deepcopy)   {baseline:>10,.0f} /s   speed-up x{fast / baseline:.1f}")
    state = env.world_state
    print(f"  oracle_plan                {rate(lambda: oracle_plan(state), args.seconds):>10,.0f} /s")


if __name__ == "__main__":
    main()
