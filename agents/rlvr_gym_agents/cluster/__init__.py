"""Scale-out on Ray (issue 27): rollout workers with weight broadcast and async sampling (:mod:`.rollout_workers`),
and the learner group (:mod:`.learner`). The single-process path stays the default (``cluster.rollout_workers = 0``,
``cluster.learners = 1``)."""

from rlvr_gym_agents.cluster.learner import LearnerGroup, LearnerRank, TorchDistributedSync, shard_rows
from rlvr_gym_agents.cluster.rollout_workers import AsyncRollouts, RolloutWorker, RolloutWorkers, drop_stale

__all__ = ["AsyncRollouts", "LearnerGroup", "LearnerRank", "RolloutWorker", "RolloutWorkers",
           "TorchDistributedSync", "drop_stale", "shard_rows"]
