"""code/Synth-v0 numbers: the oracle's success, the sandbox time per judgement, the length of an episode.

* Oracle: the gold agent through the evaluation harness on ``code/synth-test`` (must be 1.0).
* Judge time: wall-clock seconds of one ``env.step`` (gold program, six hidden cases) in a fresh sandbox per
  step vs the env's persistent batch sandbox (``persistent_sandbox=True``) vs a new env per episode inside
  ``hold_shared_resources()`` (the shared judge pool the trainer and evaluations use), interleaved,
  min/median/max.
* Episode length: the longest three-turn failing episode (prompt, three near misses, the two feedbacks
  between them) of the first ``--num-tasks`` training tasks, in characters and, when the tiny builder offers
  byte-level BPE (``build_tokenizer(texts, kind="bpe")``), in tokens of a BPE trained on those episodes.

    .venv/bin/python benchmarks/synth_code.py --num-tasks 100 --repeats 20
"""

from __future__ import annotations

import argparse
import statistics
import time

import rlvr_gym
from rlvr_gym.evaluation import evaluate
from rlvr_gym.testing import GoldAgent


def judge_times(repeats: int) -> dict[str, list[float]]:
    """Seconds per gold step, interleaved over the first test tasks: a fresh sandbox per step, the env's own
    persistent sandbox, and a new env per episode inside ``hold_shared_resources()`` (as the trainer and
    evaluations make them: the env borrows one of the process's shared warm sandboxes)."""
    tasks = rlvr_gym.load_suite("code/synth-test").tasks
    envs = {"fresh": rlvr_gym.make("code/Synth-v0", persistent_sandbox=False),
            "persistent": rlvr_gym.make("code/Synth-v0", persistent_sandbox=True)}
    times: dict[str, list[float]] = {name: [] for name in [*envs, "shared pool"]}
    try:
        with rlvr_gym.registry.spec("code/Synth-v0").hold_shared_resources():
            for name in [*envs, "shared pool"]:  # start the long-lived sandboxes outside the timing
                env = envs.get(name) or rlvr_gym.make("code/Synth-v0")
                env.reset(options={"task": tasks[0]})
                env.step(tasks[0].gold[0])  # type: ignore[index]
                if name not in envs:
                    env.close()
            for i in range(repeats):
                task = tasks[i % len(tasks)]
                for name, seconds in times.items():
                    env = envs.get(name) or rlvr_gym.make("code/Synth-v0")
                    env.reset(options={"task": task})
                    start = time.perf_counter()
                    reward = env.step(task.gold[0]).reward  # type: ignore[index]
                    seconds.append(time.perf_counter() - start)
                    if name not in envs:
                        env.close()
                    assert reward == 1.0, (name, task.id)
    finally:
        for env in envs.values():
            env.close()
    return times


def failing_episodes(num_tasks: int) -> list[list[str]]:
    """Texts of a three-turn failing episode per task (prompt, near miss, feedback, ... as the policy sees them)."""
    env = rlvr_gym.make("code/Synth-v0")
    episodes = []
    try:
        for task in rlvr_gym.load_suite("code/synth-train").tasks[:num_tasks]:
            obs, _ = env.reset(options={"task": task})
            near = task.data["near_misses"]
            texts = [obs]
            for turn in range(3):
                action = near[turn % len(near)]
                texts.append(action)
                step = env.step(action)
                if turn < 2:
                    texts.append(step.observation)
            texts.append(task.gold[0])  # type: ignore[index]
            episodes.append(texts)
    finally:
        env.close()
    return episodes


def token_lengths(episodes: list[list[str]]) -> list[int] | None:
    """Tokens per failing episode under a byte-level BPE trained on them (None without BPE in the builder)."""
    from rlvr_gym_agents.warmstart import tiny

    try:
        tokenizer = tiny.build_tokenizer([t for e in episodes for t in e], kind="bpe")  # type: ignore[call-arg]
    except TypeError:
        return None
    # one chat message per text plus its role and end tokens, without the final gold answer
    return [sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) + 2 for t in e[:-1]) for e in episodes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num-tasks", type=int, default=100, help="training tasks whose episodes are measured")
    parser.add_argument("--repeats", type=int, default=20, help="timed steps per sandbox mode")
    args = parser.parse_args()
    test = rlvr_gym.load_suite("code/synth-test").tasks
    start = time.perf_counter()
    report = evaluate(GoldAgent(), test, progress=False)
    print(f"oracle (gold agent) pass@1 on code/synth-test ({len(test)} tasks): {report.metrics['pass@1']:.3f} "
          f"in {time.perf_counter() - start:.1f} s")
    for name, values in judge_times(args.repeats).items():
        print(f"judge time per step, {name:11s}: min {min(values) * 1e3:.1f} ms, median "
              f"{statistics.median(values) * 1e3:.1f} ms, max {max(values) * 1e3:.1f} ms ({len(values)} steps)")
    episodes = failing_episodes(args.num_tasks)
    chars = [sum(len(t) for t in e[:-1]) for e in episodes]
    print(f"three-turn failing episode, characters: min {min(chars)}, median {statistics.median(chars)}, "
          f"max {max(chars)}; the prompt alone: max {max(len(e[0]) for e in episodes)}")
    tokens = token_lengths(episodes)
    if tokens is None:
        print("tokens: the tiny builder has no byte-level BPE here (model.tokenizer: bpe not merged yet)")
    else:
        print(f"three-turn failing episode, BPE tokens: min {min(tokens)}, median {statistics.median(tokens)}, "
              f"max {max(tokens)}")


if __name__ == "__main__":
    main()
