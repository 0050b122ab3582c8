"""Helpers shared by the learning side's tests (imported as ``agent_helpers``; conftest puts this folder on
``sys.path``, since pytest runs in importlib mode)."""

from __future__ import annotations


def collect_rollouts(config, policy, chat, tasks, sampling, step, env_factory=None, tree_sampler=None):  # type: ignore[no-untyped-def]
    """Stages 1-3 of the trainer's RL step for a test: sample (flat, or with ``tree_sampler``), credit, drop.

    Returns a namespace with ``batch``, ``trajectories``, ``advantages`` (B, T), ``keep`` (B,) and ``metrics``.
    """
    import types

    import torch
    from rlvr_gym_agents.credit import assign_credit, informative_groups
    from rlvr_gym_agents.rollout.flat import FlatSampler
    from rlvr_gym_agents.rollout.tree_sampler import TreeSampler
    from rlvr_gym_agents.train import credit_config

    import rlvr_gym

    factory = env_factory or rlvr_gym.make
    if tree_sampler is not None:
        tree_sampler.sampling = sampling
        batch = TreeSampler.sample_batch(tree_sampler, tasks, step)
    else:
        batch = FlatSampler(policy, chat, config.train.group_size, sampling, factory, config.env.max_turns,
                            config.rollout.reuse_kv_cache).sample_batch(tasks, step)
    credit = credit_config(config)
    keep = (informative_groups(batch, credit) if config.algorithm.drop_zero_variance_groups
            else torch.ones(len(batch.trajectories), dtype=torch.bool))
    return types.SimpleNamespace(batch=batch, trajectories=batch.trajectories, advantages=assign_credit(batch, credit),
                                 keep=keep, metrics=batch.metrics)



def tree_token_advantages(tree, mode="soft", estimator="grpo", gamma=0.95, omega=1.0, std_norm=False,  # type: ignore[no-untyped-def]
                          penalty=None, dedup=False):
    """One row per leaf of ``tree`` from the credit registry (the rows a one-tree batch gets, uncropped)."""
    from rlvr_gym_agents.credit import CREDIT, CreditConfig, check_credit
    from rlvr_gym_agents.credit.estimators import GiGPOConfig
    from rlvr_gym_agents.credit.rewards import Penalty
    from rlvr_gym_agents.rollout.types import RolloutBatch

    check_credit(mode, "tree")
    config = CreditConfig(mode, estimator, GiGPOConfig(gamma, omega, std_norm), penalty or Penalty(),
                          dedup_shared_prefix=dedup)
    return CREDIT[mode].fn(RolloutBatch(tree.trajectories(), [tree]), config)


def training_batch(rollout, credit="soft", estimator="grpo"):  # type: ignore[no-untyped-def]
    """``(leaf trajectories, per-token advantage rows)`` of a :class:`TreeRollout`, as the trainer credits them."""
    from rlvr_gym_agents.credit import CREDIT, CreditConfig
    from rlvr_gym_agents.rollout.types import RolloutBatch

    batch = RolloutBatch([t for tree in rollout.trees for t in tree.trajectories()], rollout.trees)
    return batch.trajectories, CREDIT[credit].fn(batch, CreditConfig(credit, estimator))


HANGING_ECHO = "tests.rlvr_gym_agents.hanging_env:testing/HangingEcho-v0"
"""The env id of ``hanging_env.HangingEchoEnv`` (imported by whoever makes it: a Ray rollout worker)."""


def hanging_tasks(num_tasks, started_file=None, split="train"):  # type: ignore[no-untyped-def]
    """``echo_tasks(num_tasks)`` on :data:`HANGING_ECHO` whose first step blocks forever, after creating
    ``started_file`` (a path, optional)."""
    from rlvr_gym.testing.toy import echo_tasks

    extra = {"hang": True, **({"started_file": str(started_file)} if started_file is not None else {})}
    return [task.model_copy(update={"id": f"hang-{task.id}", "env_id": HANGING_ECHO, "data": {**task.data, **extra}})
            for task in echo_tasks(num_tasks, split)]
