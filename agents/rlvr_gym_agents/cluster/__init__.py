"""Scale-out on Ray (issue 27): the learner group (:mod:`.learner`). The single-process path stays the default
(``cluster.learners = 1``)."""

from rlvr_gym_agents.cluster.learner import LearnerGroup, LearnerRank, TorchDistributedSync, shard_rows

__all__ = ["LearnerGroup", "LearnerRank", "TorchDistributedSync", "shard_rows"]
