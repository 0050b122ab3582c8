"""Web envs on the Ray env-worker pool: gold through the evaluation harness, forced worker kills, leaks.

The leak test plays many episodes with random actions, kills a worker every few episodes, and checks that
every killed episode ends with ENV_CRASH, the next one works, the browsers' memory stays bounded, and no
Chromium outlives the pool.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest
from rlvr_gym_web.browser import _alive, chromium_processes, marked_browsers
from rlvr_gym_web.observation import parse_tree

from rlvr_gym import FailureKind, Task, load_suite
from rlvr_gym.evaluation import evaluate
from rlvr_gym.testing.agents import GoldAgent
from rlvr_gym.workers import EnvPool, RemoteEnv


def browser_rss_mb(owners: set[int]) -> float:
    """Resident memory (MiB) of the process groups of the browsers owned by ``owners``."""
    groups = {os.getpgid(pid) for pid, owner in marked_browsers().items() if owner in owners}
    total_kb = 0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) in groups:
                    status = (entry / "status").read_text()
                    total_kb += int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS")))
            except (OSError, StopIteration):
                continue
    return total_kb / 1024


def orphans() -> list[int]:
    """Marked browsers whose owner died, plus Chromium processes re-parented to init."""
    dead_owner = [pid for pid, owner in marked_browsers().items() if not _alive(owner)]
    return dead_owner + [pid for pid in chromium_processes() if _ppid(pid) == 1]


def _ppid(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError):
        return -1


def random_action(obs: str, rng: random.Random) -> str:
    bids = [node.bid for node in parse_tree(obs)] or ["1"]
    choices = [f'click("{rng.choice(bids)}")', f'fill("{rng.choice(bids)}", "x{rng.randint(0, 99)}")',
               "scroll(0, 200)", "noop()", "not an action", f'press("{rng.choice(bids)}", "Enter")', "done()"]
    return rng.choice(choices)


@pytest.mark.browser
def test_gold_through_the_evaluation_harness_on_the_pool() -> None:
    tasks = list(load_suite("web/miniwob").filter(split="train"))[:3] + list(load_suite("web/mail"))[:2]
    with EnvPool(num_workers=2) as pool:
        report = evaluate(GoldAgent(), tasks, env_factory=pool.make, progress=False)
    assert report.metrics["pass@1"] == 1.0, report.metrics


def run_leak_test(num_episodes: int, kill_every: int) -> None:
    rng = random.Random(0)
    tasks: list[Task] = list(load_suite("web/miniwob")) + list(load_suite("web/files"))
    crashes = killed = 0
    memory: list[float] = []
    with EnvPool(num_workers=2, call_timeout_s=60) as pool:
        for episode in range(num_episodes):
            task = tasks[episode % len(tasks)]
            env = pool.make(task.env_id)
            assert isinstance(env, RemoteEnv)
            obs, _ = env.reset(options={"task": task})
            for turn in range(4):
                if episode % kill_every == kill_every - 1 and turn == 1:
                    pool.kill_worker(pool.worker_pids().index(env.worker_pid))  # type: ignore[attr-defined]
                    killed += 1
                    time.sleep(0.3)
                result = env.step(random_action(obs, rng))
                obs = result.observation
                if result.info.get("failure") is not None and result.info["failure"].kind is FailureKind.ENV_CRASH:
                    crashes += 1
                    assert result.terminated
                if result.terminated or result.truncated:
                    break
            env.close()
            pids = pool.worker_pids()
            if episode % 5 == 4 and None not in pids:  # skip samples right after a kill (slot not restarted)
                memory.append(browser_rss_mb(set(pids)))  # type: ignore[arg-type]
        assert pool.restarts == killed
        # the run went on: a fresh episode after the last kill still solves its task
        last = load_suite("web/miniwob")[0]
        env = pool.make(last.env_id)
        env.reset(options={"task": last})
        results = [env.step(a) for a in last.gold or []]
        assert results[-1].reward == 1.0
        env.close()
    assert crashes == killed > 0
    print(f"{num_episodes} episodes, {killed} worker kills; browser RSS (MiB) every 5 episodes: {memory}")
    assert max(memory) < 2 * memory[0] + 300, memory  # bounded: no growth with the number of episodes
    deadline = time.monotonic() + 10
    while orphans() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert orphans() == []


@pytest.mark.browser
def test_leak_and_worker_kills_20_episodes() -> None:
    run_leak_test(num_episodes=20, kill_every=7)


@pytest.mark.slow  # not marked browser, so that `-m browser` (the CI browser tier) leaves it out
def test_leak_and_worker_kills_200_episodes() -> None:
    run_leak_test(num_episodes=200, kill_every=10)
