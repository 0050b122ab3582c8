"""Env-bound rollouts with concurrent env stepping: one slow env stepped by 2 / 4 / 8 threads against stepping the
envs one after another, side by side in one run.

Each trial runs the flat sampler (:func:`rlvr_gym_agents.rollout.run_episodes`, greedy, a tiny random model) on
``--episodes`` echo episodes whose every step sleeps ``--step-delay-s`` (:class:`rlvr_gym.testing.SlowEchoEnv`: an
env waiting on a sandbox, a simulator, a browser or a Ray worker). Settings are interleaved over ``--repeats``
rounds; the printout gives min / median / max seconds per setting and the median speed-up over the serial baseline
(the ideal is the number of threads, up to the episodes in flight). The trajectories of every setting are checked
to equal the serial ones (concurrency must not change what is trained on).

Not measured here yet: Ray env workers (``env.num_workers``) and the async learner of issue 27.

Run: ``python benchmarks/distributed_scaling.py [--step-delay-s 0.5] [--episodes 8] [--repeats 3]``.
Target (issue 27): >= 0.8 x N speed-up for the slow env with N workers.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from rlvr_gym_agents.policy import ChatFormat, SamplingParams, TransformersPolicy
from rlvr_gym_agents.rollout import run_episodes
from rlvr_gym_agents.warmstart.tiny import save_tiny_policy

from rlvr_gym.testing.toy import WORDS, SlowEchoEnv, echo_tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step-delay-s", type=float, default=0.5, help="seconds every env step sleeps")
    parser.add_argument("--episodes", type=int, default=8, help="episodes per rollout batch")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every setting")
    args = parser.parse_args()
    torch.set_num_threads(1)
    texts = [f"Say the word: {w}" for w in WORDS] + [f"say {w}" for w in WORDS] + ["Correct.", "Wrong."]
    policy = TransformersPolicy.from_pretrained(str(save_tiny_policy(texts, Path(tempfile.mkdtemp()) / "m", tokenizer="word")))
    chat = ChatFormat.for_policy(policy)
    tasks = echo_tasks(args.episodes)  # their env id is served by SlowEchoEnv through the factory below
    sampling = SamplingParams(temperature=0.0, max_new_tokens=4)

    def local(env_id: str, **kwargs: Any) -> Any:
        return SlowEchoEnv(step_delay_s=args.step_delay_s, **kwargs)

    def rollout(factory: Callable[..., Any], threads: int) -> tuple[float, list[list[int]]]:
        executor = ThreadPoolExecutor(max_workers=threads) if threads else None
        began = time.monotonic()
        trajectories = run_episodes(policy, chat, tasks, sampling, env_factory=factory, step_executor=executor)
        elapsed = time.monotonic() - began
        if executor is not None:
            executor.shutdown()
        return elapsed, [t.token_ids for t in trajectories]

    settings: dict[str, tuple[Callable[..., Any], int]] = {"serial (in process)": (local, 0)}
    settings.update({f"{n} threads (in process)": (local, n) for n in (2, 4, 8)})
    times: dict[str, list[float]] = {name: [] for name in settings}
    reference = None
    for _ in range(args.repeats):
        for name, (factory, threads) in settings.items():
            elapsed, ids = rollout(factory, threads)
            reference = reference or ids
            if ids != reference:
                raise SystemExit(f"{name}: trajectories differ from the serial run")
            times[name].append(elapsed)
    base = statistics.median(times["serial (in process)"])
    print(f"{args.episodes} episodes of testing/SlowEcho-v0, steps of {args.step_delay_s} s, {args.repeats} rounds")
    print(f"{'setting':<26}{'min s':>8}{'median s':>10}{'max s':>8}{'speed-up':>10}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<26}{min(values):>8.2f}{median:>10.2f}{max(values):>8.2f}{base / median:>9.2f}x")


if __name__ == "__main__":
    main()
