"""``web/Widgets-v0``: reset and step time, tokens per page and per oracle episode, Chromium memory per page.

Run: ``python benchmarks/widgets_env.py [--episodes 40] [--corpus 200] [--pages 64]``

* Time: one env on a warm browser (``reuse_page``: one page, each reset restarts the app in it, as the trainer
  does), the oracle's actions on the first ``--episodes`` tasks of ``web/widgets-test``; reset and step
  wall times, min / median / max in ms. Baselines, interleaved episode by episode: the same env with
  ``restart_in_place=False`` (each reset loads the task's page again, as before the restart), the same env with
  ``strict_actionability=True`` (every action waits for Playwright's actionability checks, as before the
  forced actions), the same env with a new context per reset (``reuse_page=False``, as before it), and
  ``web/Settings-v0`` (the env of ``web-tree.yaml``) playing the gold of ``web/settings``; also its characters
  per observation against ours.
* Tokens: the tokenizer ``agents/recipes/web-tiny.yaml`` builds (byte-level BPE, ``model.vocab_size``) trained,
  as ``build_tiny_policy`` does, on ``--corpus`` oracle demonstrations of training tasks plus the held-out
  ones; then tokens per observation (the observation's chat message, role and end tokens included) and per
  demonstrated episode (every observation and action with the chat format's ids), over the held-out
  (``web/widgets-test``) oracle episodes without mistakes.
* Memory: ``--pages`` envs reset at once (one step's episodes); the proportional set size (PSS) of every
  Chromium process, before and after, in MiB.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.warmstart.demonstrations import collect_demonstrations, demonstration_ids
from rlvr_gym_agents.warmstart.tiny import build_tokenizer
from rlvr_gym_web.browser import chromium_processes, keep_browser_warm
from rlvr_gym_web.desktop.env import DesktopEnv

import rlvr_gym
from rlvr_gym import load_suite

RECIPE = Path(__file__).resolve().parents[1] / "agents" / "recipes" / "web-tiny.yaml"


def spread(values: list[float], unit: str = "") -> str:
    return f"{min(values):.1f} / {statistics.median(values):.1f} / {max(values):.1f}{unit} (n={len(values)})"


def _episode(env: rlvr_gym.Env, task: rlvr_gym.Task, times: dict[str, list[float]]) -> None:
    """Plays the task's gold, timing the reset and each step; records turns and observation sizes."""
    start = time.perf_counter()
    obs, _ = env.reset(options={"task": task})
    times["reset"].append(1000 * (time.perf_counter() - start))
    times["chars"].append(len(obs))
    for turn, action in enumerate(task.gold or [], start=1):
        start = time.perf_counter()
        result = env.step(action)
        times["step"].append(1000 * (time.perf_counter() - start))
        if result.terminated or result.truncated:
            assert result.reward == 1.0, task.id
            times["turns"].append(turn)
            return
        times["chars"].append(len(result.observation))


def timing(num_episodes: int) -> None:
    ours, theirs = list(load_suite("web/widgets-test"))[:num_episodes], list(load_suite("web/settings"))
    fresh = "Widgets-v0, new context per reset"
    strict = "Widgets-v0, strict_actionability"
    load = "Widgets-v0, page load per reset"
    runs: dict[str, dict[str, list[float]]] = {name: {"reset": [], "step": [], "turns": [], "chars": []}
                                               for name in ("Widgets-v0", load, strict, fresh, "Settings-v0")}
    with keep_browser_warm():
        envs = {"Widgets-v0": rlvr_gym.make("web/Widgets-v0"),  # reuse_page: one page, the app restarted per reset
                load: rlvr_gym.make("web/Widgets-v0", restart_in_place=False),  # one page, loaded again per reset
                strict: rlvr_gym.make("web/Widgets-v0", strict_actionability=True),  # Playwright's checks always
                fresh: DesktopEnv(app="widgets", page_header=False, max_turns=8),  # as before reuse_page
                "Settings-v0": rlvr_gym.make("web/Settings-v0")}
        try:
            envs["Widgets-v0"].reset(options={"task": ours[0]})  # starts Chromium outside the timed resets
            envs[load].reset(options={"task": ours[0]})
            for i, task in enumerate(ours):  # interleaved: A, B, C, D, E, A, B, C, D, E, ...
                _episode(envs["Widgets-v0"], task, runs["Widgets-v0"])
                _episode(envs[load], task, runs[load])
                _episode(envs[strict], task, runs[strict])
                _episode(envs[fresh], task, runs[fresh])
                _episode(envs["Settings-v0"], theirs[i % len(theirs)], runs["Settings-v0"])
        finally:
            for env in envs.values():
                env.close()
    for name, run in runs.items():
        print(f"web/{name}: reset ms {spread(run['reset'])}; step ms {spread(run['step'])}; "
              f"gold actions per episode {spread(run['turns'])}; characters per observation {spread(run['chars'])}")
    ratio = statistics.median(runs["Widgets-v0"]["reset"]) / statistics.median(runs[load]["reset"])
    print(f"reset, app restarted in the page / page loaded again: {ratio:.2f}x (medians)")
    ratio = statistics.median(runs["Widgets-v0"]["reset"]) / statistics.median(runs[fresh]["reset"])
    print(f"reset, app restarted in the page / new context: {ratio:.2f}x (medians)")
    ratio = statistics.median(runs["Widgets-v0"]["step"]) / statistics.median(runs[strict]["step"])
    print(f"step, forced where clear / strict_actionability: {ratio:.2f}x (medians)")


def tokens(num_corpus: int) -> None:
    config = load_config(RECIPE, ["sft.mistake_rate=0.0", "sft.invalid_rate=0.0"])
    test_tasks = list(load_suite(config.env.test_suite))
    train_tasks = list(load_suite(config.env.train_suite))
    demos = collect_demonstrations(config.sft, config.env, train_tasks, num_corpus, config.seed)
    held_out = collect_demonstrations(config.sft, config.env, test_tasks, len(test_tasks), config.seed + 1)
    assert all(d.success for d in demos + held_out)
    texts = [t for d in demos + held_out for t in d.observations + d.actions]
    tokenizer = build_tokenizer(texts, "bpe", vocab_size=config.model.vocab_size)
    chat = ChatFormat(tokenizer, system_prompt=config.env.system_prompt)
    pages = [len(chat.observation_ids(o)) for d in held_out for o in d.observations[:-1]]
    first = [len(chat.prompt_ids(d.observations[0])) for d in held_out]
    episodes = [len(demonstration_ids(d, chat)[0]) for d in held_out]
    actions = [len(chat.encode(a)) + 1 for d in held_out for a in d.actions]
    chars = [len(o) for d in held_out for o in d.observations[:-1]]
    print(f"BPE vocabulary {len(tokenizer)} (corpus {num_corpus} + {len(held_out)} held-out episodes)")
    print(f"tokens per observation (after the first) min/median/max: {spread([float(p) for p in pages])}")
    print(f"tokens of the first prompt min/median/max: {spread([float(p) for p in first])}")
    print(f"characters per observation min/median/max: {spread([float(c) for c in chars])}")
    print(f"tokens per oracle episode min/median/max: {spread([float(e) for e in episodes])}")
    print(f"tokens per action incl. end of turn min/median/max: {spread([float(a) for a in actions])}")


def _pss_mib() -> float:
    total = 0
    for pid in chromium_processes():
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


def memory(num_pages: int) -> None:
    tasks = list(load_suite("web/widgets-train"))[:num_pages]
    with keep_browser_warm():
        envs = [rlvr_gym.make("web/Widgets-v0") for _ in tasks]
        try:
            envs[0].reset(options={"task": tasks[0]})
            one = _pss_mib()
            for env, task in zip(envs[1:], tasks[1:]):
                env.reset(options={"task": task})
            time.sleep(1.0)
            every = _pss_mib()
        finally:
            for env in envs:
                env.close()
    print(f"Chromium PSS with 1 page: {one:.0f} MiB; with {num_pages} pages: {every:.0f} MiB "
          f"({(every - one) / max(1, num_pages - 1):.1f} MiB per extra page)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--corpus", type=int, default=200)
    parser.add_argument("--pages", type=int, default=64)
    parser.add_argument("--only", choices=["timing", "tokens", "memory"], default=None)
    args = parser.parse_args()
    if args.only in (None, "timing"):
        timing(args.episodes)
    if args.only in (None, "tokens"):
        tokens(args.corpus)
    if args.only in (None, "memory"):
        memory(args.pages)


if __name__ == "__main__":
    main()
