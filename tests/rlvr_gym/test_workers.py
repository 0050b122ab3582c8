"""Tests of the Ray env-worker pool, with the toy Echo env running in real Ray actors.

One module-scoped pool: starting Ray costs about 4 s here, so all tests share it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

import rlvr_gym
from rlvr_gym import FailureKind
from rlvr_gym.testing import echo_tasks
from rlvr_gym.testing.toy import EchoEnv
from rlvr_gym.workers import EnvPool, RemoteEnv

pytest.importorskip("ray")


@pytest.fixture(scope="module")
def pool() -> Iterator[EnvPool]:
    with EnvPool(num_workers=2, remote=("testing/*",), call_timeout_s=60) as pool:
        yield pool


def test_cheap_env_stays_in_process() -> None:
    pool = EnvPool(remote=("web/*",))
    env = pool.make("testing/Echo-v0")
    assert isinstance(env, EchoEnv) and not isinstance(env, RemoteEnv)
    pool.close()


def test_unknown_id_fails_before_starting_ray() -> None:
    pool = EnvPool(remote=("*",))
    with pytest.raises(rlvr_gym.UnknownEnvError, match="Closest registered ids"):
        pool.make("testing/Ech-v0")
    assert pool.worker_pids() == [None, None]


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError, match="num_workers"):
        EnvPool(num_workers=0)
    with pytest.raises(ValueError, match="call_timeout_s"):
        EnvPool(call_timeout_s=0)


def test_remote_episode_matches_local(pool: EnvPool) -> None:
    task = echo_tasks(3)[2]
    local = rlvr_gym.make("testing/Echo-v0")
    remote = pool.make("testing/Echo-v0")
    assert isinstance(remote, RemoteEnv) and remote.max_turns == local.max_turns == 3
    assert remote.reset(options={"task": task}) == local.reset(options={"task": task})
    for action in ["hello", f"say {task.data['target']}"]:
        r, ref = remote.step(action), local.step(action)
        assert (r.observation, r.reward, r.terminated, r.truncated) == (ref.observation, ref.reward, ref.terminated,
                                                                        ref.truncated)
        assert r.info.get("failure") == ref.info.get("failure")
    assert r.reward == 1.0 and r.info["turn"] == 2
    with pytest.raises(RuntimeError, match="after the episode ended"):
        remote.step("say x")
    remote.close()
    remote.close()  # safe twice


def test_envs_spread_over_workers(pool: EnvPool) -> None:
    envs = [pool.make("testing/Echo-v0") for _ in range(4)]
    pids = {env.worker_pid for env in envs}  # type: ignore[attr-defined]
    assert len(pids) == 2 and set(pool.worker_pids()) == pids
    for env in envs:
        env.close()


def test_fork_is_independent(pool: EnvPool) -> None:
    task = echo_tasks(1)[0]
    env = pool.make("testing/Echo-v0")
    env.reset(options={"task": task})
    env.step("bad action")
    clone = env.fork()
    assert clone.turn == 1 and clone.action_history == ["bad action"]
    assert clone.step("say apple").reward == 1.0
    assert env.step("say bread").reward == 0.0  # the original is unaffected by the clone's success
    env.close()
    clone.close()


def test_killed_worker_gives_env_crash_and_the_run_goes_on(pool: EnvPool) -> None:
    task = echo_tasks(1)[0]
    env = pool.make("testing/Echo-v0")
    env.reset(options={"task": task})
    old_pid = env.worker_pid  # type: ignore[attr-defined]
    restarts = pool.restarts
    pool.kill_worker(pool.worker_pids().index(old_pid))
    time.sleep(0.5)
    crashed = env.step("say apple")
    assert crashed.terminated and crashed.reward == 0.0
    assert crashed.info["failure"].kind is FailureKind.ENV_CRASH and not crashed.info["success"]
    assert pool.restarts == restarts + 1
    # the same proxy starts a new episode on a fresh worker
    env.reset(options={"task": task})
    assert env.worker_pid != old_pid  # type: ignore[attr-defined]
    assert env.step("say apple").reward == 1.0
    env.close()


def test_fork_after_worker_death_replays_on_a_new_worker(pool: EnvPool) -> None:
    task = echo_tasks(2)[1]
    env = pool.make("testing/Echo-v0")
    env.reset(options={"task": task})
    env.step("oops")
    pool.kill_worker(pool.worker_pids().index(env.worker_pid))  # type: ignore[attr-defined]
    time.sleep(0.5)
    clone = env.fork()
    assert clone.turn == 1
    assert clone.step(f"say {task.data['target']}").reward == 1.0
    clone.close()
    env.close()


def test_closed_pool_refuses_new_envs() -> None:
    pool = EnvPool(remote=("testing/*",))
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.make("testing/Echo-v0")


def test_closed_envs_are_parked_and_reused(pool: EnvPool) -> None:
    first = pool.make("testing/Echo-v0")
    first.close()
    pool.make("testing/Echo-v0").close()  # ties go round-robin: this one ran on the other worker
    again = pool.make("testing/Echo-v0")  # back on the first env's worker: its parked env is taken back
    other_args = pool.make("testing/Echo-v0", max_turns=2)
    assert again.reused_parked_env and not other_args.reused_parked_env  # type: ignore[attr-defined]
    assert again.max_turns == 3 and other_args.max_turns == 2
    task = echo_tasks(1)[0]
    again.reset(options={"task": task})
    assert again.step("say apple").reward == 1.0
    again.close()
    other_args.close()


def test_envs_made_and_stepped_from_threads(pool: EnvPool) -> None:
    from concurrent.futures import ThreadPoolExecutor

    def run(task: rlvr_gym.Task) -> float:
        env = pool.make(task.env_id)
        env.reset(options={"task": task})
        reward = env.step(f"say {task.data['target']}").reward
        env.close()
        return reward

    with ThreadPoolExecutor(4) as executor:
        assert list(executor.map(run, echo_tasks(8))) == [1.0] * 8
    assert pool._load == [0, 0]  # every lease was given back
