"""Scale-out on Ray (issue 27): rollout workers with weight broadcast and async sampling (:mod:`.rollout_workers`),
and the learner group (:mod:`.learner`; how its ranks combine gradients: :mod:`.sync`). The single-process path stays the default (``cluster.rollout_workers = 0``,
``cluster.learners = 1``)."""

from rlvr_gym_agents.cluster.learner import LearnerGroup, LearnerRank, shard_rows
from rlvr_gym_agents.cluster.rollout_workers import AsyncRollouts, RolloutWorker, RolloutWorkers, drop_stale
from rlvr_gym_agents.cluster.sync import TorchDistributedSync

__all__ = ["AsyncRollouts", "LearnerGroup", "LearnerRank", "RolloutWorker", "RolloutWorkers",
           "TorchDistributedSync", "drop_stale", "shard_rows"]
