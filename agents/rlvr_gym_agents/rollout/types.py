"""The records that flow from rollouts to credit assignment and the update: Turn, Trajectory, RolloutBatch.

Each episode's context is ``prompt ids | turn 1 generated ids | observation 1 ids | turn 2 generated ids | ...``.
The loss mask is 1 exactly on generated ids (the end-of-turn id the policy emitted included) and 0 on prompt
and observation ids (algorithms.md §7.1). Per-turn spans of generated ids are kept for turn-level credit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from rlvr_gym import Failure

if TYPE_CHECKING:
    from rlvr_gym_agents.policy import Generation
    from rlvr_gym_agents.rollout.tree import RolloutTree


@dataclasses.dataclass
class Turn:
    """One turn of an episode.

    Attributes:
        observation: the observation the action answered.
        action: the decoded action text sent to the env.
        span: ``(start, end)`` token indices of the generated ids of this turn in ``Trajectory.token_ids``.
        reward: the env's reward for this step.
        failure: the step's typed failure, or None.
        finish_reason: ``"stop"`` or ``"length"`` (see :class:`Generation`).
        state_key: the env's ``info["state_key"]`` of the state the turn started from (None when the env gives
            none); the anchor of GiGPO's step groups.
    """

    observation: str
    action: str
    span: tuple[int, int]
    reward: float = 0.0
    failure: Failure | None = None
    finish_reason: str = "stop"
    state_key: str | None = None


@dataclasses.dataclass
class Trajectory:
    """One episode, as ids the trainer can train on.

    Attributes:
        task_id / env_id: what was run.
        token_ids: the whole context (N ids).
        loss_mask: N ints, 1 on policy-generated ids, 0 on prompt and observation ids.
        logps: N floats, the sampling log-probs of generated ids (0.0 where the mask is 0).
        entropies: N floats, next-token entropies (nats) of generated ids (0.0 where the mask is 0).
        prompt_length: number of prompt ids.
        turns: the turns in order.
        reward: the episode return (sum of step rewards).
        success: ``info["success"]`` of the last step (False when absent).
        terminated / truncated: how the episode ended (both False only if it never started).
        failures: every typed failure, in order (step failures, context overflow, env crash).
        group: index of the group (same task) this trajectory belongs to; set by the caller.
        last_observation: the observation the env returned with the step that ended the episode ("" otherwise).
        policy_version: the version of the weights that generated it: the RL step whose update produced them (0:
            the weights before RL); None until the sampler's caller stamps it. Async training measures staleness
            against it (:mod:`rlvr_gym_agents.cluster`).
    """

    task_id: str
    env_id: str
    token_ids: list[int] = dataclasses.field(default_factory=list)
    loss_mask: list[int] = dataclasses.field(default_factory=list)
    logps: list[float] = dataclasses.field(default_factory=list)
    entropies: list[float] = dataclasses.field(default_factory=list)
    prompt_length: int = 0
    turns: list[Turn] = dataclasses.field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    terminated: bool = False
    truncated: bool = False
    failures: list[Failure] = dataclasses.field(default_factory=list)
    group: int = 0
    last_observation: str = ""
    policy_version: int | None = None

    @property
    def turn_spans(self) -> list[tuple[int, int]]:
        """``(start, end)`` of each turn's generated ids."""
        return [t.span for t in self.turns]

    @property
    def num_generated_tokens(self) -> int:
        return sum(self.loss_mask)

    def truncate(self, length: int) -> None:
        """Keeps the first ``length`` context ids (and their mask, log-probs and entropies)."""
        for name in ("token_ids", "loss_mask", "logps", "entropies"):
            del getattr(self, name)[length:]

    def append(self, ids: Sequence[int], trained: bool, generation: Generation | None = None, *,
               logps: Sequence[float] | None = None, entropies: Sequence[float] | None = None) -> None:
        """Appends context ids; generated ones carry their log-probs and entropies (from ``generation``, or given
        as ``logps`` / ``entropies``; 0.0 otherwise)."""
        if generation is not None:
            logps, entropies = generation.logps, generation.entropies
        self.token_ids.extend(int(i) for i in ids)
        self.loss_mask.extend([int(trained)] * len(ids))
        self.logps.extend(logps if logps is not None else [0.0] * len(ids))
        self.entropies.extend(entropies if entropies is not None else [0.0] * len(ids))


@dataclasses.dataclass
class RolloutBatch:
    """One RL step's rollouts, as the sampler hands them to credit assignment and the update.

    Attributes:
        trajectories: B episodes, each group's in a row (flat: ``group_size`` per task; tree: each tree's leaves).
        trees: the rollout trees the trajectories are the leaves of (tree sampler), else None.
        metrics: the sampler's scalars for the step log (tree metrics under ``tree/``; empty for flat).
        tokens_generated: ids the policy generated (a tree's shared prefixes counted once).
    """

    trajectories: list[Trajectory]
    trees: list[RolloutTree] | None = None
    metrics: dict[str, Any] = dataclasses.field(default_factory=dict)
    tokens_generated: int = 0

    def stamp_policy_version(self, version: int) -> None:
        """Records ``version`` as the policy version of every trajectory that has none yet."""
        for trajectory in self.trajectories:
            if trajectory.policy_version is None:
                trajectory.policy_version = version

    @property
    def groups(self) -> torch.Tensor:
        """(B,) long: each trajectory's group (task) index."""
        return torch.tensor([t.group for t in self.trajectories], dtype=torch.long)
