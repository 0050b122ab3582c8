"""Training rollouts on the Ray env pool (``env.num_workers > 0``): a worker killed mid-rollout costs only the
episodes it held (an ``ENV_CRASH`` failure in their trajectories) and the training step still completes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from agent_helpers import collect_rollouts
from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout.tree_sampler import TreeSampler
from rlvr_gym_agents.train import env_factory_of, rollout_metrics, train, update_config
from rlvr_gym_agents.update.ppo import ppo_update

from rlvr_gym import Env, FailureKind
from rlvr_gym.testing.toy import echo_tasks
from rlvr_gym.workers import EnvPool, RemoteEnv

pytestmark = pytest.mark.slow  # a local Ray instance and two worker processes: ~10-20 s on a loaded 2-core box


def test_a_tree_training_run_on_env_workers(tiny_model_dir: Path, tmp_path: Path, echo_tree_run: Any) -> None:
    """``train`` end to end with ``env.num_workers=2``: rollouts, forks and evaluations run in the workers, and
    the pool (with the Ray instance it started) is gone afterwards."""
    import ray

    ray_was_running = ray.is_initialized()
    summary = train(load_config(None, echo_tree_run(tiny_model_dir, tmp_path, "run", 1, "env.num_workers=2",
                                                    "env.remote=[testing/*]")))
    steps = [r for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
             if r["phase"] == "rl"]
    assert steps[0]["tree/leaves_per_task"] == [4, 4] and steps[0]["tree/branches"] >= 1
    assert "failures/env_crash" not in steps[0] and summary["after"]["num_tasks"] == 4
    assert ray.is_initialized() == ray_was_running  # a pool that started Ray stops it


@pytest.fixture(scope="module")
def pool() -> Iterator[EnvPool]:
    with EnvPool(2, remote=("testing/*",), call_timeout_s=60) as env_pool:
        yield env_pool


def _killing_factory(pool: EnvPool, victims: list[RemoteEnv]) -> Any:
    """``pool.make``, except that the first env built SIGKILLs its own worker just before its first step."""

    def make(env_id: str, **kwargs: Any) -> Env:
        env = pool.make(env_id, **kwargs)
        assert isinstance(env, RemoteEnv)
        if not victims:
            victims.append(env)
            step = env.step

            def step_after_kill(action: str) -> Any:
                if env.step is step_after_kill:
                    env.step = step  # type: ignore[method-assign]  # kill once
                    pool.kill_worker(env._slot)
                return step(action)

            env.step = step_after_kill  # type: ignore[method-assign]
        return env

    return make


@pytest.mark.parametrize("sampler", ["flat", "tree"])
def test_a_worker_killed_mid_rollout_costs_only_its_episodes(
    pool: EnvPool, tiny_policy: TransformersPolicy, sampler: str
) -> None:
    config = load_config(None, [
        "env.env_id=testing/Echo-v0", "env.num_workers=2", "train.group_size=4", f"rollout.sampler={sampler}",
        "algorithm.epochs=1", "algorithm.num_minibatches=1", "algorithm.drop_zero_variance_groups=false",
    ])
    chat, victims = ChatFormat(tiny_policy.tokenizer), list[RemoteEnv]()
    factory = _killing_factory(pool, victims)
    tree_sampler = TreeSampler(tiny_policy, chat, config.rollout.tree, factory) if sampler == "tree" else None
    restarts = pool.restarts
    rollouts = collect_rollouts(config, tiny_policy, chat, echo_tasks(2), SamplingParams(max_new_tokens=4), 1,
                                factory, tree_sampler)
    crashed = [t for t in rollouts.trajectories if any(f.kind is FailureKind.ENV_CRASH for f in t.failures)]
    assert pool.restarts == restarts + 1 and victims
    assert crashed and len(crashed) < len(rollouts.trajectories)  # the other worker's episodes were untouched
    assert all(t.reward == 0.0 and not t.success for t in crashed)
    assert rollout_metrics(rollouts.trajectories)["failures/env_crash"] > 0
    optimizer = torch.optim.AdamW(tiny_policy.model.parameters(), lr=1e-3)
    update = ppo_update(tiny_policy.model, optimizer, rollouts.trajectories, rollouts.advantages, update_config(config), None,
                        tiny_policy.pad_token_id)
    assert torch.isfinite(torch.tensor(update["loss"]))
    # the replaced worker serves the next step
    if tree_sampler is not None:
        tree_sampler.env_factory = pool.make
    again = collect_rollouts(config, tiny_policy, chat, echo_tasks(2), SamplingParams(max_new_tokens=4), 2,
                             pool.make, tree_sampler)
    assert not any(f.kind is FailureKind.ENV_CRASH for t in again.trajectories for f in t.failures)


def test_env_factory_of_runs_remote_envs_and_closes_its_pool() -> None:
    config = load_config(None, ["env.env_id=testing/Echo-v0", "env.num_workers=1", "env.remote=[testing/*]"])
    with env_factory_of(config) as make:
        env = make("testing/Echo-v0")
        assert isinstance(env, RemoteEnv)
        pool = env.pool
        observation, _ = env.reset(options={"task": echo_tasks(1)[0]})
        assert observation.startswith("Say the word:")
        env.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.make("testing/Echo-v0")

