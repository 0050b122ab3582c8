"""Rollout workers on Ray (issue 27): sharding, ordering, weight broadcast, async staleness, a worker killed during a
flat and during a tree rollout, a hung worker given up after ``cluster.rollout_timeout_s`` (sync and async), and
``train`` end to end with ``cluster.rollout_workers`` (sync, async, resume).

One Ray session for the module (starting Ray costs seconds); the workers run the tiny Echo model. A worker is made to
hang (or to be killed mid-step) by a task of ``testing/HangingEcho-v0`` (``hanging_env.py``), whose first step blocks
forever after creating a file the test waits for."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from agent_helpers import hanging_tasks
from rlvr_gym_agents.cluster import AsyncRollouts, RolloutWorker, RolloutWorkers, drop_stale
from rlvr_gym_agents.cluster.rollout_workers import failed_batch, merge_batches, shard_bounds
from rlvr_gym_agents.config import TrainConfig, load_config
from rlvr_gym_agents.credit import assign_credit
from rlvr_gym_agents.policy import TransformersPolicy
from rlvr_gym_agents.policy.lora import merged_named_parameters
from rlvr_gym_agents.rollout.types import RolloutBatch, Trajectory
from rlvr_gym_agents.train import credit_config, train, update_config
from rlvr_gym_agents.update.ppo import ppo_update

from rlvr_gym import Failure, FailureKind
from rlvr_gym.testing.toy import echo_tasks

# -- pure parts ---------------------------------------------------------------------------------------------


def test_shards_are_contiguous_blocks_of_whole_tasks() -> None:
    assert shard_bounds(5, 2) == [(0, 3), (3, 5)]
    assert shard_bounds(2, 4) == [(0, 1), (1, 2), (2, 2), (2, 2)]
    assert shard_bounds(8, 4) == [(0, 2), (2, 4), (4, 6), (6, 8)]
    with pytest.raises(ValueError, match="num_workers >= 1"):
        shard_bounds(3, 0)


def _trajectory(group: int, version: int | None, tokens: int = 2) -> Trajectory:
    trajectory = Trajectory(f"t{group}", "testing/Echo-v0", group=group, policy_version=version)
    trajectory.append([1] * tokens, trained=True)
    return trajectory


def test_stale_groups_are_dropped_whole_and_the_rest_renumbered() -> None:
    # learner at version 5, k = 1: group 1 (version 3, two behind) goes; groups 0 (lag 0) and 2 (lag 1) stay.
    batch = RolloutBatch([_trajectory(0, 5), _trajectory(0, 5), _trajectory(1, 3), _trajectory(1, 3),
                          _trajectory(2, 4), _trajectory(2, None)], tokens_generated=12)
    kept = drop_stale(batch, learner_version=5, max_staleness=1)
    assert [t.group for t in kept.trajectories] == [0, 0, 1, 1]
    assert [t.policy_version for t in kept.trajectories] == [5, 5, 4, None]
    assert kept.metrics["async/stale_dropped"] == 2
    assert kept.metrics["async/staleness_mean"] == pytest.approx((0 + 0 + 2 + 2 + 1 + 0) / 6)
    assert kept.tokens_generated == 8
    fresh = drop_stale(batch, learner_version=5, max_staleness=2)
    assert fresh.metrics["async/stale_dropped"] == 0 and fresh.tokens_generated == 12


def test_the_trainer_stamps_only_trajectories_without_a_version() -> None:
    batch = RolloutBatch([_trajectory(0, None), _trajectory(0, 2)])
    batch.stamp_policy_version(4)  # rl_step: the in-process sampler used the weights of step - 1
    assert [t.policy_version for t in batch.trajectories] == [4, 2]


def test_a_failed_shard_has_every_episode_of_its_tasks_as_a_typed_failure() -> None:
    failure = Failure(FailureKind.ENV_CRASH, "rollout worker 1 died", {"rollout_worker": 1})
    tasks = echo_tasks(2)
    flat = failed_batch(tasks, group_offset=3, group_size=4, tree=False, failure=failure, version=7)
    assert [t.group for t in flat.trajectories] == [3] * 4 + [4] * 4
    assert all(t.failures == [failure] and t.truncated and not t.token_ids and t.policy_version == 7
               for t in flat.trajectories)
    tree = failed_batch(tasks, group_offset=3, group_size=4, tree=True, failure=failure, version=7)
    assert [t.group for t in tree.trees or []] == [3, 4] and len(tree.trajectories) == 8
    assert tree.metrics["tree/leaves_per_task"] == [4, 4] and tree.tokens_generated == 0
    assert all(t.failures == [failure] for t in tree.trajectories)


def test_merged_shards_keep_the_given_order() -> None:
    first = RolloutBatch([_trajectory(0, 1), _trajectory(1, 1)], tokens_generated=4)
    second = RolloutBatch([_trajectory(2, 1, tokens=3)], tokens_generated=3)
    merged = merge_batches([first, second], tree=False)
    assert [t.group for t in merged.trajectories] == [0, 1, 2] and merged.tokens_generated == 7


# -- on Ray ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    """One local Ray instance for the module (8 logical CPUs: several worker groups fit side by side)."""
    import ray

    from rlvr_gym.workers import ensure_ray

    started = ensure_ray(None, num_cpus=8)
    yield
    if started:
        ray.shutdown()


def _config(*overrides: str) -> TrainConfig:
    return load_config(None, ["env.env_id=testing/Echo-v0", "train.group_size=2", "rollout.max_new_tokens=4",
                              "cluster.rollout_workers=2", "seed=1", *overrides])


def _weights(model_dir: Path, noise: float = 0.0) -> dict[str, torch.Tensor]:
    policy = TransformersPolicy.from_pretrained(str(model_dir))
    generator = torch.Generator().manual_seed(0)
    return {name: p.detach() + noise * torch.randn(p.shape, generator=generator)
            for name, p in merged_named_parameters(policy.model)}


@pytest.fixture(scope="module")
def flat_workers(ray_session: None, tiny_model_dir: Path) -> Iterator[RolloutWorkers]:
    with RolloutWorkers(_config(), str(tiny_model_dir), num_threads=1, worker_num_cpus=1) as workers:
        yield workers


def _local_shards(config: TrainConfig, model_dir: Path, weights: dict[str, torch.Tensor], version: int,
                  tasks: list[Any], step: int) -> list[Trajectory]:
    """What worker 0 and worker 1 sample for their shards, computed in this process."""
    out = []
    for index, (start, end) in enumerate(shard_bounds(len(tasks), 2)):
        body = RolloutWorker(config, str(model_dir), index, num_threads=1)
        body.load_weights(version, weights)
        out += body.sample(tasks[start:end], step, start).trajectories
    return out


def test_the_batch_is_the_workers_shards_in_task_order(flat_workers: RolloutWorkers, tiny_model_dir: Path) -> None:
    weights = _weights(tiny_model_dir)
    flat_workers.sync_weights(weights.items(), version=0)
    tasks = echo_tasks(3)
    batch = flat_workers.sample_batch(tasks, step=1)
    assert [t.task_id for t in batch.trajectories] == [t.id for t in tasks for _ in range(2)]
    assert [t.group for t in batch.trajectories] == [0, 0, 1, 1, 2, 2]
    assert {t.policy_version for t in batch.trajectories} == {0}
    local = _local_shards(flat_workers.config, tiny_model_dir, weights, 0, tasks, step=1)
    assert [t.token_ids for t in batch.trajectories] == [t.token_ids for t in local]
    assert flat_workers.sample_batch(tasks, step=1).trajectories[3].token_ids == batch.trajectories[3].token_ids


def test_broadcast_weights_reach_every_worker_with_their_version(flat_workers: RolloutWorkers,
                                                                  tiny_model_dir: Path) -> None:
    tasks = echo_tasks(4)
    flat_workers.sync_weights(_weights(tiny_model_dir).items(), version=0)
    before = flat_workers.sample_batch(tasks, step=2)
    changed = _weights(tiny_model_dir, noise=0.5)
    flat_workers.sync_weights(changed.items(), version=5)
    after = flat_workers.sample_batch(tasks, step=2)
    assert {t.policy_version for t in after.trajectories} == {5}
    assert [t.token_ids for t in after.trajectories] != [t.token_ids for t in before.trajectories]
    local = _local_shards(flat_workers.config, tiny_model_dir, changed, 5, tasks, step=2)
    assert [t.logps for t in after.trajectories] == [t.logps for t in local]
    flat_workers.sync_weights(None, version=6)  # an empty update: only the version moves
    assert [t.token_ids for t in flat_workers.sample_batch(tasks, step=2).trajectories] == [
        t.token_ids for t in after.trajectories]


def _victim_tasks(started: Path) -> list[Any]:
    """4 tasks for 2 workers: worker 0's shard (groups 0 and 1) starts with a task whose first env step blocks forever
    (after creating ``started``), so it cannot finish on any machine; worker 1's two tasks are plain Echo."""
    return hanging_tasks(1, started) + echo_tasks(3)


def _wait_for(path: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} was not created within {timeout_s:g} s"
        time.sleep(0.05)


def _kill_during(workers: RolloutWorkers, tasks: list[Any], step: int, victim: int, started: Path) -> RolloutBatch:
    """Submits a step, SIGKILLs ``victim`` once its shard is inside an env step (``started`` exists; the step never
    returns), and collects the step."""
    workers.worker_pids()  # asked before the step: a busy worker answers only after it
    pending = workers.submit(tasks, step)
    _wait_for(started)
    workers.kill_worker(victim)
    return workers.collect(pending)


def _assert_only_the_victims_episodes_failed(batch: RolloutBatch, victim_groups: set[int],
                                             kind: FailureKind = FailureKind.ENV_CRASH) -> None:
    for trajectory in batch.trajectories:
        failed = [f for f in trajectory.failures if f.kind is kind]
        if trajectory.group in victim_groups:
            assert len(failed) == 1 and failed[0].details["rollout_worker"] == 0 and trajectory.truncated
            assert not trajectory.token_ids
        else:  # sampled: maybe a parse error of the untrained model, never a lost worker's failure
            assert not failed and trajectory.token_ids
            assert not any(f.kind in (FailureKind.ENV_CRASH, FailureKind.TIMEOUT) for f in trajectory.failures)


def test_a_worker_killed_during_a_flat_rollout_costs_its_episodes(flat_workers: RolloutWorkers,
                                                                   tiny_model_dir: Path, tmp_path: Path) -> None:
    flat_workers.sync_weights(_weights(tiny_model_dir).items(), version=3)
    old_pid, restarts = flat_workers.worker_pids()[0], flat_workers.restarts
    batch = _kill_during(flat_workers, _victim_tasks(tmp_path / "started"), step=4, victim=0,
                         started=tmp_path / "started")
    assert len(batch.trajectories) == 8 and flat_workers.restarts == restarts + 1
    _assert_only_the_victims_episodes_failed(batch, victim_groups={0, 1})
    assert flat_workers.worker_pids()[0] != old_pid
    again = flat_workers.sample_batch(echo_tasks(4), step=5)  # the new worker has the latest weights
    assert {t.policy_version for t in again.trajectories} == {3}
    assert not any(f.kind is FailureKind.ENV_CRASH for t in again.trajectories for f in t.failures)


def test_a_worker_killed_during_a_tree_rollout_and_the_step_completes(ray_session: None, tiny_model_dir: Path,
                                                                       tmp_path: Path) -> None:
    config = _config("rollout.sampler=tree", "algorithm.credit=treerl", "train.group_size=4",
                     "rollout.tree.branch.alpha=0.5", "algorithm.drop_zero_variance_groups=false")
    with RolloutWorkers(config, str(tiny_model_dir), num_threads=1, worker_num_cpus=1) as workers:
        weights = _weights(tiny_model_dir)
        workers.sync_weights(weights.items(), version=0)
        batch = _kill_during(workers, _victim_tasks(tmp_path / "started"), step=1, victim=0,
                             started=tmp_path / "started")
        assert workers.restarts == 1 and len(batch.trees or []) == 4
        assert batch.metrics["tree/leaves_per_task"] == [4] * 4
        _assert_only_the_victims_episodes_failed(batch, victim_groups={0, 1})
        advantages = assign_credit(batch, credit_config(config))  # the rest of the RL step runs on it
        policy = TransformersPolicy.from_pretrained(str(tiny_model_dir))
        optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-3)
        update = ppo_update(policy.model, optimizer, batch.trajectories, advantages, update_config(config), None,
                            policy.pad_token_id)
        assert torch.isfinite(torch.tensor(update["loss"]))


def test_async_sampling_runs_a_step_ahead_with_bounded_staleness(flat_workers: RolloutWorkers,
                                                                  tiny_model_dir: Path) -> None:
    drawn: list[int] = []

    def draw(step: int) -> list[Any]:
        drawn.append(step)
        return echo_tasks(2 + step)

    sampler = AsyncRollouts(flat_workers, draw, last_step=3, max_staleness=1)
    flat_workers.sync_weights(_weights(tiny_model_dir).items(), version=0)
    first = sampler.sample_batch(echo_tasks(3), step=1)  # nothing in flight: sampled now, then step 2 submitted
    assert drawn == [2] and {t.policy_version for t in first.trajectories} == {0}
    sampler.sync_weights(_weights(tiny_model_dir, noise=0.1).items(), version=1)  # does not wait
    second = sampler.sample_batch(echo_tasks(4), step=2)  # submitted before version 1: one version behind
    assert drawn == [2, 3] and {t.policy_version for t in second.trajectories} == {0}
    assert second.metrics["async/staleness_mean"] == 1.0 and second.metrics["async/stale_dropped"] == 0
    sampler.sync_weights(None, version=2)
    third = sampler.sample_batch(echo_tasks(5), step=3)  # the last step: nothing submitted beyond it
    assert drawn == [2, 3] and {t.policy_version for t in third.trajectories} == {1}
    assert len(third.trajectories) == 10


@pytest.fixture(scope="module")
def timeout_workers(ray_session: None, tiny_model_dir: Path) -> Iterator[RolloutWorkers]:
    """2 workers that give a shard up after 3 s."""
    config = _config(f"cluster.rollout_timeout_s={TIMEOUT_S}")
    with RolloutWorkers(config, str(tiny_model_dir), num_threads=1, worker_num_cpus=1) as workers:
        yield workers


TIMEOUT_S = 3.0


def test_a_hung_worker_is_killed_after_the_timeout_and_its_episodes_become_timeout_failures(
        timeout_workers: RolloutWorkers, tiny_model_dir: Path, tmp_path: Path) -> None:
    workers = timeout_workers
    workers.sync_weights(_weights(tiny_model_dir).items(), version=2)  # waits until the workers have started
    old_pid, restarts = workers.worker_pids()[0], workers.restarts
    began = time.monotonic()
    batch = workers.sample_batch(_victim_tasks(tmp_path / "started"), step=1)
    took = time.monotonic() - began
    assert (tmp_path / "started").exists() and TIMEOUT_S <= took < 120  # it waited for the hung shard, then no more
    assert workers.restarts == restarts + 1 and len(batch.trajectories) == 8
    _assert_only_the_victims_episodes_failed(batch, victim_groups={0, 1}, kind=FailureKind.TIMEOUT)
    failure = batch.trajectories[0].failures[0]
    assert failure.details == {"rollout_worker": 0, "timeout_s": TIMEOUT_S} and "hung" in failure.message
    assert {t.policy_version for t in batch.trajectories} == {2}
    _wait_until_gone(old_pid)  # ray.kill ended the hung process
    again = workers.sample_batch(echo_tasks(4), step=2)  # the restarted worker has the latest weights
    assert [t.group for t in again.trajectories] == [0, 0, 1, 1, 2, 2, 3, 3]
    _assert_only_the_victims_episodes_failed(again, victim_groups=set())
    assert {t.policy_version for t in again.trajectories} == {2} and workers.worker_pids()[0] != old_pid


def test_a_hung_worker_in_async_mode_and_the_next_step_is_resampled_on_its_successor(
        timeout_workers: RolloutWorkers, tiny_model_dir: Path, tmp_path: Path) -> None:
    workers = timeout_workers
    workers.sync_weights(_weights(tiny_model_dir).items(), version=0)
    restarts = workers.restarts
    sampler = AsyncRollouts(workers, lambda step: echo_tasks(4), last_step=2, max_staleness=1)
    first = sampler.sample_batch(_victim_tasks(tmp_path / "started"), step=1)  # step 2 goes in behind it
    assert workers.restarts == restarts + 1
    _assert_only_the_victims_episodes_failed(first, victim_groups={0, 1}, kind=FailureKind.TIMEOUT)
    sampler.sync_weights(_weights(tiny_model_dir, noise=0.1).items(), version=1)  # step 2 in flight: no wait
    second = sampler.sample_batch(echo_tasks(4), step=2)
    _assert_only_the_victims_episodes_failed(second, victim_groups=set())
    assert len(second.trajectories) == 8
    # worker 0's shard of step 2 had been queued on the killed worker: its successor sampled it after loading
    # version 1; worker 1 sampled its shard before that load
    assert [t.policy_version for t in second.trajectories] == [1] * 4 + [0] * 4
    assert second.metrics["async/stale_dropped"] == 0


def _wait_until_gone(pid: int, timeout_s: float = 30.0) -> None:
    import os

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        assert time.monotonic() < deadline, f"the hung worker's process {pid} still runs"
        time.sleep(0.1)


# -- train end to end -----------------------------------------------------------------------------------------


def _rl_records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["phase"] == "rl"]


def test_train_with_rollout_workers_async_and_resume(ray_session: None, tiny_model_dir: Path, tmp_path: Path,
                                                     echo_tree_run: Any) -> None:
    """``train`` with 2 async rollout workers for 2 steps, then resumed to 3: every step logged once, in order."""
    overrides = ["cluster.rollout_workers=2", "cluster.async=true", "rollout.sampler=flat", "algorithm.credit=soft"]
    train(load_config(None, echo_tree_run(tiny_model_dir, tmp_path, "run", 2, *overrides)))
    first = _rl_records(tmp_path / "run")
    assert [r["step"] for r in first] == [1, 2]
    assert first[1]["async/staleness_mean"] == 1.0 and first[0]["async/staleness_mean"] == 0.0
    summary = train(load_config(None, echo_tree_run(tiny_model_dir, tmp_path, "run", 3, *overrides)))
    assert [r["step"] for r in _rl_records(tmp_path / "run")] == [1, 2, 3]
    assert summary["after"]["num_tasks"] == 4


def test_train_with_rollout_workers(ray_session: None, tiny_model_dir: Path, tmp_path: Path,
                                    echo_tree_run: Any) -> None:
    """``train`` with 2 synchronous rollout workers and tree rollouts: each step sampled with the previous step's
    weights (no staleness metric: the sync path does not drop)."""
    train(load_config(None, echo_tree_run(tiny_model_dir, tmp_path, "run", 2, "cluster.rollout_workers=2")))
    records = _rl_records(tmp_path / "run")
    assert [r["step"] for r in records] == [1, 2] and records[0]["tree/leaves_per_task"] == [4, 4]
    assert "failures/env_crash" not in records[1] and "async/staleness_mean" not in records[1]


def test_ray_address_flag_sets_the_recipe_key(monkeypatch: pytest.MonkeyPatch) -> None:
    import rlvr_gym_agents.train as train_module
    from rlvr_gym_agents import cli

    seen: list[TrainConfig] = []
    monkeypatch.setattr(train_module, "check_recipe_inputs", lambda config: None)
    monkeypatch.setattr(train_module, "train", lambda config, started=None: seen.append(config))
    assert cli.train_main(["agents/recipes/quickstart.yaml", "cluster.rollout_workers=2",
                           "--ray-address", "ray://head:10001", "seed=4"]) == 0
    assert seen[0].cluster.ray_address == "ray://head:10001" and seen[0].cluster.rollout_workers == 2
    assert seen[0].seed == 4
