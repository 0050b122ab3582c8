"""The credit stage: a registry of credit methods, each ``fn(batch, CreditConfig) -> one advantage row per episode``.

A recipe selects a method by name (``algorithm.credit``); :func:`assign_credit` runs it and returns per-token
advantages, (B, T) right-padded with 0. Methods:

- ``soft``: a group estimator (``algorithm.estimator``: grpo, drgrpo, rloo) over the episode returns, the same
  value on every token of an episode (GRPO; ARPO's "soft" attribution on a tree's leaves).
- ``gigpo``: episode plus step advantages per turn (Feng et al. 2025). Anchors: the env's ``state_key`` (or the
  observation) with the flat sampler; the node a turn starts from with the tree sampler.
- ``treerl``, ``local``, ``global``, ``arpo_hard``: per-segment values of a rollout tree (TreeRL, ARPO hard).
- ``treepo``: TreePO's per-leaf advantages over a tree's ancestors.

Every method reads step rewards through :func:`rlvr_gym_agents.credit.rewards.turn_reward`, so the
per-turn penalty is applied once. :func:`check_credit` is the one validity check (a tree-only method needs
the tree sampler).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import Tensor
from torch.nn.utils.rnn import pad_sequence

from rlvr_gym_agents.credit import tree as tree_credit
from rlvr_gym_agents.credit.estimators import GiGPOConfig, group_advantages, nonzero_variance_groups
from rlvr_gym_agents.credit.rewards import Penalty, episode_return
from rlvr_gym_agents.credit.turns import gigpo_token_advantages
from rlvr_gym_agents.rollout.types import RolloutBatch


@dataclasses.dataclass
class CreditConfig:
    """What the credit stage reads (built from the recipe's ``algorithm`` section)."""

    name: str = "soft"
    """The method (a key of :data:`CREDIT`)."""
    estimator: str = "grpo"
    """The group estimator of ``soft``: grpo, drgrpo or rloo."""
    gigpo: GiGPOConfig = dataclasses.field(default_factory=GiGPOConfig)
    """GiGPO's step discount, step weight and normalisation."""
    penalty: Penalty = dataclasses.field(default_factory=Penalty)
    """What a turn loses from its step reward when it failed with a penalised kind (default: none)."""
    tree_baseline: str = "mean"
    """Baseline of the local term of the tree value modes: ``mean`` (V(parent), TreeRL) or ``loo`` (the parent's
    other leaves, unbiased)."""
    dedup_shared_prefix: bool = False
    """Tree modes: scale a segment shared by d leaf rows by 1/d, so it is credited once (ARPO hard), not d times."""


@dataclasses.dataclass(frozen=True)
class CreditMethod:
    """One registered credit method: ``fn(batch, config)`` -> one float32 row per trajectory (any length >= the
    trajectory's; cropped), and whether it needs rollout trees."""

    fn: Callable[[RolloutBatch, CreditConfig], list[Tensor]]
    needs_tree: bool


def _soft(batch: RolloutBatch, config: CreditConfig) -> list[Tensor]:
    adv = group_advantages(episode_returns(batch, config), batch.groups, config.estimator)
    rows = []
    for trajectory, value in zip(batch.trajectories, adv.tolist(), strict=True):
        row = torch.full((len(trajectory.token_ids),), value, dtype=torch.float32)
        row[: trajectory.prompt_length] = 0.0
        rows.append(row)
    return rows


def _gigpo(batch: RolloutBatch, config: CreditConfig) -> list[Tensor]:
    g, penalty = config.gigpo, config.penalty
    if batch.trees is not None:
        return [row for tree in batch.trees
                for row in tree_credit.gigpo_rows(tree, g.gamma, g.omega, g.std_norm, penalty)]
    return gigpo_token_advantages(batch.trajectories, g.gamma, g.omega, g.std_norm, penalty)


def _node_values(mode: str) -> Callable[[RolloutBatch, CreditConfig], list[Tensor]]:
    def fn(batch: RolloutBatch, config: CreditConfig) -> list[Tensor]:
        return [row for tree in batch.trees or []
                for row in tree_credit.node_value_rows(tree, mode, config.penalty,
                                                       config.tree_baseline, config.dedup_shared_prefix)]
    return fn


def _treepo(batch: RolloutBatch, config: CreditConfig) -> list[Tensor]:
    return [row for tree in batch.trees or []
            for row in tree_credit.treepo_rows(tree, config.penalty, config.dedup_shared_prefix)]


CREDIT: dict[str, CreditMethod] = {
    "soft": CreditMethod(_soft, needs_tree=False),
    "gigpo": CreditMethod(_gigpo, needs_tree=False),
    **{mode: CreditMethod(_node_values(mode), needs_tree=True) for mode in ("treerl", "local", "global", "arpo_hard")},
    "treepo": CreditMethod(_treepo, needs_tree=True),
}
"""Credit methods by the name a recipe gives in ``algorithm.credit``."""


def check_credit(name: str, sampler: str) -> None:
    """The one validity check of a credit choice.

    Raises:
        ValueError: ``name`` is not registered, or needs rollout trees and ``sampler`` is not ``tree``.
    """
    if name not in CREDIT:
        raise ValueError(f"algorithm.credit must be one of {sorted(CREDIT)}, got {name!r}")
    if CREDIT[name].needs_tree and sampler != "tree":
        flat = sorted(n for n, m in CREDIT.items() if not m.needs_tree)
        raise ValueError(f"algorithm.credit={name} needs rollout.sampler=tree (flat episodes share no segments); "
                         f"with the flat sampler use one of {flat}")


def episode_returns(batch: RolloutBatch, config: CreditConfig) -> Tensor:
    """(B,) float32 episode returns less the per-turn penalty: what groups are compared on."""
    return torch.tensor([episode_return(t, config.penalty) for t in batch.trajectories],
                        dtype=torch.float32)


def assign_credit(batch: RolloutBatch, config: CreditConfig) -> Tensor:
    """Per-token advantages of a batch, (B, T) float32 with T the longest trajectory, right-padded with 0.

    Raises:
        ValueError: an invalid method for the batch (:func:`check_credit`).
    """
    check_credit(config.name, "tree" if batch.trees is not None else "flat")
    rows = CREDIT[config.name].fn(batch, config)
    cropped = [row[: len(t.token_ids)].to(torch.float32) for row, t in zip(rows, batch.trajectories, strict=True)]
    return pad_sequence(cropped, batch_first=True, padding_value=0.0)


def sibling_advantage_metrics(batch: RolloutBatch, advantages: Tensor) -> dict[str, float]:
    """Step-log scalars of how the credit separates siblings in a batch of rollout trees ({} for flat batches):
    ``tree/sibling_adv_var`` (the population variance of the siblings' advantages per branch point, averaged
    over branch points; :func:`rlvr_gym_agents.credit.tree.sibling_advantages`), ``tree/branch_points`` and
    ``tree/branch_points_informative`` (the share of them whose siblings got different advantages).

    Args:
        batch: the step's rollouts; its trajectories are the trees' leaves, tree after tree.
        advantages: (B, T) per-token advantages of :func:`assign_credit` for ``batch``.
    """
    if batch.trees is None:
        return {}
    spreads, row = [], 0
    for tree in batch.trees:
        count = len(tree.leaves())
        spreads += [float(torch.tensor(values, dtype=torch.float64).var(unbiased=False))
                    for values in tree_credit.sibling_advantages(tree, list(advantages[row:row + count]))]
        row += count
    return {"tree/sibling_adv_var": sum(spreads) / len(spreads) if spreads else 0.0,
            "tree/branch_points": float(len(spreads)),
            "tree/branch_points_informative": sum(s > 1e-12 for s in spreads) / len(spreads) if spreads else 0.0}


def informative_groups(batch: RolloutBatch, config: CreditConfig) -> Tensor:
    """(B,) bool: False for the episodes of groups whose returns are all equal (zero advantage under every group
    estimator; DAPO's dynamic sampling drops them)."""
    return nonzero_variance_groups(episode_returns(batch, config), batch.groups)
