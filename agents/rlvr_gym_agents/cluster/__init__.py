"""Scale-out on Ray (issue 27): rollout workers with weight broadcast and async sampling
(:mod:`.rollout_workers`). The single-process path stays the default (``cluster.rollout_workers = 0``)."""

from rlvr_gym_agents.cluster.rollout_workers import AsyncRollouts, RolloutWorker, RolloutWorkers, drop_stale

__all__ = ["AsyncRollouts", "RolloutWorker", "RolloutWorkers", "drop_stale"]
