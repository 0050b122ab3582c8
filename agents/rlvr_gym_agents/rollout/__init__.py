"""The rollout stage: episodes as token-in/token-out trajectories, flat or as trees.

:mod:`.types` holds the records (Turn, Trajectory, RolloutBatch); :mod:`.episode` is the one episode runner
(env stepping, the context-window policy, typed failures) that the flat sampler (:mod:`.flat`), the tree sampler
(:mod:`.tree_sampler`), evaluation and demonstrations use.
"""

from rlvr_gym_agents.rollout.flat import run_episodes
from rlvr_gym_agents.rollout.types import Trajectory, Turn

__all__ = ["Trajectory", "Turn", "run_episodes"]
