"""Distributed scaling (issue 27), side by side in one run: env-bound rollouts stepped by threads in process and by
1 / 2 / 4 Ray env workers, and (``--async``) RL steps per second of async against sync training on rollout workers.

**Env-bound rollouts.** Each trial runs the flat sampler (:func:`rlvr_gym_agents.rollout.run_episodes`, greedy, a
tiny random model) on ``--episodes`` echo episodes whose every step sleeps ``--step-delay-s``
(:class:`rlvr_gym.testing.SlowEchoEnv`: an env waiting on a sandbox, a simulator or a browser). Settings: serial in
process; 2 / 4 / 8 stepping threads in process; and the Ray env pool (:class:`rlvr_gym.workers.EnvPool`,
``env.num_workers`` of a recipe) with 1, 2 and 4 workers, each env a :class:`~rlvr_gym.workers.RemoteEnv` and every
turn's steps sent at once (one thread per episode), so the workers are the bottleneck. Settings are interleaved over
``--repeats`` rounds; the printout gives min / median / max seconds and the median speed-up over serial and over
1 Ray worker (target: >= 0.8 x N for N workers). Every setting's trajectories must equal the serial ones.
``--web`` adds the same 1 / 2 / 4 worker rows on ``web/MiniWoB-v0`` (one Chromium per worker; needs Playwright's
Chromium), over-all seconds only (the tiny model's actions are random clicks).

**Async against sync** (``--async``): the quickstart recipe (``agents/recipes/quickstart.yaml``) made small: one
short warm start is trained once (``--sft-steps``), then each trial trains ``--rl-steps`` RL steps from it on
``--rollout-workers`` Ray rollout workers (:mod:`rlvr_gym_agents.cluster`), ``cluster.async=false`` and ``true``
interleaved over ``--async-repeats`` rounds. Reported: RL steps per second over steps 2..N (async's first step has
nothing in flight; its share of a long run is negligible) and over all N, the async / sync ratio of the medians
(target >= 1.3x), and held-out pass@1 (sampled) after RL of each mode (target: within noise of sync).
``--in-process`` adds the single-process trainer on every core (no Ray) as a third mode: the baseline async must
beat to be worth its workers. ``--set`` passes recipe overrides to every trial, e.g. ``model.num_threads=1
cluster.worker_threads=1`` (on 2 cores: the trainer and one worker each on a core of its own).

Run: ``python benchmarks/distributed_scaling.py [--step-delay-s 0.5] [--episodes 8] [--repeats 3] [--web] [--async]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
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

from rlvr_gym import register
from rlvr_gym.testing.toy import WORDS, SlowEchoEnv, echo_tasks

# Ray env workers build envs by id: register the slow echo env here, importable as this module in the workers.
register("bench/SlowEcho-v0", "rlvr_gym.testing.toy:SlowEchoEnv", max_turns=3,
         description="testing/Echo-v0 with slow steps (step_delay_s), for this benchmark only")
SLOW_ECHO = "distributed_scaling:bench/SlowEcho-v0"
REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "agents" / "recipes" / "quickstart.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--step-delay-s", type=float, default=0.5, help="seconds every env step sleeps")
    parser.add_argument("--episodes", type=int, default=8, help="episodes per rollout batch")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds of every env-bound setting")
    parser.add_argument("--web", action="store_true", help="also web/MiniWoB-v0 on 1 / 2 / 4 Ray workers")
    parser.add_argument("--async", dest="run_async", action="store_true", help="also async against sync training")
    parser.add_argument("--skip-env", action="store_true", help="skip the env-bound rows")
    parser.add_argument("--rl-steps", type=int, default=5, help="RL steps per async/sync trial")
    parser.add_argument("--sft-steps", type=int, default=300, help="warm-start steps (trained once)")
    parser.add_argument("--warm-model", help="a model directory to start RL from instead of training a warm start "
                                             "(e.g. the sft_model/ of an earlier run of this benchmark)")
    parser.add_argument("--rollout-workers", type=int, default=2, help="Ray rollout workers of the async/sync trials")
    parser.add_argument("--async-repeats", type=int, default=2, help="interleaved rounds of async and sync")
    parser.add_argument("--in-process", action="store_true",
                        help="also the single-process trainer (no rollout workers, every core) as a third mode")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="recipe overrides of the async/sync trials (both modes), e.g. model.num_threads=1 "
                             "cluster.worker_threads=1")
    args = parser.parse_args()
    torch.set_num_threads(1)
    # Ray workers inherit this process's environment: let them import this module (the env id above).
    os.environ["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    sys.path.insert(0, str(Path(__file__).parent))
    from rlvr_gym.workers import ensure_ray

    ensure_ray(None, num_cpus=16)  # logical CPUs: every pool's workers are placed at once
    if not args.skip_env:
        env_bound_rows(args)
    if args.web:
        web_rows(args)
    if args.run_async:
        async_rows(args)
    import ray

    ray.shutdown()


def _table(title: str, times: dict[str, list[float]], baselines: dict[str, str]) -> None:
    print(title)
    header = "".join(f"{'x ' + b:>14}" for b in baselines)
    print(f"{'setting':<28}{'min s':>8}{'median s':>10}{'max s':>8}{header}")
    for name, values in times.items():
        median = statistics.median(values)
        ratios = "".join(f"{statistics.median(times[ref]) / median:>13.2f}x" for ref in baselines.values())
        print(f"{name:<28}{min(values):>8.2f}{median:>10.2f}{max(values):>8.2f}{ratios}")


def _tiny_policy() -> tuple[TransformersPolicy, ChatFormat]:
    texts = [f"Say the word: {w}" for w in WORDS] + [f"say {w}" for w in WORDS] + ["Correct.", "Wrong."]
    policy = TransformersPolicy.from_pretrained(str(save_tiny_policy(texts, Path(tempfile.mkdtemp()) / "m",
                                                                     tokenizer="word")))
    return policy, ChatFormat.for_policy(policy)


def _rollout(policy: TransformersPolicy, chat: ChatFormat, tasks: list[Any], factory: Callable[..., Any],
             threads: int, max_turns: int | None = None) -> tuple[float, list[list[int]]]:
    executor = ThreadPoolExecutor(max_workers=threads) if threads else None
    began = time.monotonic()
    trajectories = run_episodes(policy, chat, tasks, SamplingParams(temperature=0.0, max_new_tokens=4),
                                env_factory=factory, step_executor=executor, max_turns=max_turns)
    elapsed = time.monotonic() - began
    if executor is not None:
        executor.shutdown()
    return elapsed, [t.token_ids for t in trajectories]


def env_bound_rows(args: argparse.Namespace) -> None:
    from rlvr_gym.workers import EnvPool

    policy, chat = _tiny_policy()
    tasks = echo_tasks(args.episodes)

    def local(env_id: str, **kwargs: Any) -> Any:
        return SlowEchoEnv(step_delay_s=args.step_delay_s, **kwargs)

    pools = {n: EnvPool(n, remote=("*SlowEcho*",), worker_num_cpus=0.5) for n in (1, 2, 4)}

    def remote(pool: EnvPool) -> Callable[..., Any]:
        return lambda env_id, **kwargs: pool.make(SLOW_ECHO, step_delay_s=args.step_delay_s, **kwargs)

    settings: dict[str, tuple[Callable[..., Any], int]] = {"serial (in process)": (local, 0)}
    settings.update({f"{n} threads (in process)": (local, n) for n in (2, 4, 8)})
    settings.update({f"{n} Ray worker{'s' * (n > 1)}": (remote(pool), args.episodes) for n, pool in pools.items()})
    for name, (factory, threads) in settings.items():  # warm-up: Ray workers start, envs are built once
        if "Ray" in name:
            _rollout(policy, chat, tasks, factory, threads)
    times: dict[str, list[float]] = {name: [] for name in settings}
    reference = None
    for _ in range(args.repeats):
        for name, (factory, threads) in settings.items():
            elapsed, ids = _rollout(policy, chat, tasks, factory, threads)
            reference = reference or ids
            if ids != reference:
                raise SystemExit(f"{name}: trajectories differ from the serial run")
            times[name].append(elapsed)
    for pool in pools.values():
        pool.close()
    _table(f"{args.episodes} episodes of bench/SlowEcho-v0 (testing/Echo-v0 with steps of {args.step_delay_s} s), "
           f"{args.repeats} rounds", times, {"serial": "serial (in process)", "1 worker": "1 Ray worker"})


def web_rows(args: argparse.Namespace) -> None:
    from rlvr_gym import load_suite
    from rlvr_gym.workers import EnvPool

    policy, chat = _tiny_policy()
    tasks = [t for t in load_suite("web/miniwob") if t.split == "train"][: args.episodes]
    pools = {n: EnvPool(n, remote=("web/*",), worker_num_cpus=0.5) for n in (1, 2, 4)}
    settings = {f"{n} Ray worker{'s' * (n > 1)} (web)": pool.make for n, pool in pools.items()}
    for factory in settings.values():  # warm-up: each worker launches its Chromium
        _rollout(policy, chat, tasks, factory, args.episodes, max_turns=3)
    times: dict[str, list[float]] = {name: [] for name in settings}
    for _ in range(args.repeats):
        for name, factory in settings.items():
            times[name].append(_rollout(policy, chat, tasks, factory, args.episodes, max_turns=3)[0])
    for pool in pools.values():
        pool.close()
    _table(f"{len(tasks)} episodes of web/MiniWoB-v0 (3 turns at most), {args.repeats} rounds", times,
           {"1 worker": "1 Ray worker (web)"})


def async_rows(args: argparse.Namespace) -> None:
    from rlvr_gym_agents.config import load_config
    from rlvr_gym_agents.train import train

    root = Path(tempfile.mkdtemp(prefix="async-bench-"))
    small = ["train.tasks_per_step=8", "train.group_size=8", "eval.num_tasks=100", "eval.k=1", "eval.greedy=false",
             "output.progress=false", "output.tensorboard=false", "train.max_time_s=null", "train.run_budget_s=null",
             "model.corpus_episodes=100"]
    began = time.monotonic()
    if args.warm_model is None:
        train(load_config(QUICKSTART, [*small, f"sft.max_steps={args.sft_steps}", "sft.max_time_s=100000",
                                       "train.num_steps=0", f"output.dir={root / 'warm'}"]))
        print(f"warm start ({args.sft_steps} SFT steps) in {time.monotonic() - began:.0f} s")
    model = args.warm_model or root / "warm" / "sft_model"
    warm = [*small, f"model.path_or_id={model}", "sft.enabled=false",
            f"train.num_steps={args.rl_steps}", f"cluster.rollout_workers={args.rollout_workers}", *args.set]
    modes = {"sync": ["cluster.async=false"], "async": ["cluster.async=true"]}
    if args.in_process:  # the single-process trainer on all cores: what async must beat to be worth its workers
        modes["in-process"] = ["cluster.rollout_workers=0", f"model.num_threads={os.cpu_count() or 1}"]
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    overall: dict[str, list[float]] = {mode: [] for mode in modes}
    success: dict[str, list[float]] = {mode: [] for mode in modes}
    for round_index in range(args.async_repeats):
        for mode, mode_overrides in modes.items():
            run_dir = root / f"{mode}-{round_index}"
            summary = train(load_config(QUICKSTART, [*warm, *mode_overrides, f"output.dir={run_dir}"]))
            steps = [r for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
                     if r["phase"] == "rl"]
            step_s = [r["step_s"] for r in steps]
            rates[mode].append((len(step_s) - 1) / sum(step_s[1:]))
            overall[mode].append(len(step_s) / sum(step_s))
            success[mode].append(summary["after"]["pass@1_sampled"])
            print(f"  {mode} round {round_index}: step_s {[round(s, 1) for s in step_s]}, pass@1 after "
                  f"{success[mode][-1]:.3f}", flush=True)
    print(f"quickstart (small) on {args.rollout_workers} rollout workers, {args.rl_steps} RL steps, "
          f"{args.async_repeats} rounds, overrides {args.set or 'none'}")
    print(f"{'mode':<11}{'steps/s 2..N min':>18}{'median':>9}{'max':>8}{'all N median':>14}{'pass@1 after':>16}")
    for mode, values in rates.items():
        print(f"{mode:<11}{min(values):>18.3f}{statistics.median(values):>9.3f}{max(values):>8.3f}"
              f"{statistics.median(overall[mode]):>14.3f}  {'  '.join(f'{s:.3f}' for s in success[mode]):>14}")
    for baseline in [mode for mode in modes if mode != "async"]:
        print(f"async / {baseline} (medians, steps 2..N): "
              f"{statistics.median(rates['async']) / statistics.median(rates[baseline]):.2f}x; over all N: "
              f"{statistics.median(overall['async']) / statistics.median(overall[baseline]):.2f}x")


if __name__ == "__main__":
    main()
