"""Entropy-balanced branching decisions (ARPO + AEPO) as pure functions.

Specification: ``shared/reference/algorithms.md`` §1, §2, §8.1. A tree rollout starts ``m`` global samples
from the task prompt and spends the rest of its budget of ``n`` leaves on branches at turn boundaries: after
an observation, a path whose next turn starts with higher entropy than the path's first turn is more
likely to be split, and a path that just branched is less likely to branch again.

- Segment entropy: mean full-distribution entropy (nats) of the first ``k`` generated tokens of a turn
  (ARPO's code sums a top-10 truncated entropy over <= 20 tokens divided by log|V|, which depends on the
  segment length; we take the per-token mean of the exact entropy, as the spec recommends).
- P_branch = clip((alpha + w * dH) * (1 - lambda * l), 0, 1), dH = H_t - H_init (spec §8.1 item 3).
- Budget split (AEPO pre-monitoring): m = clip(floor(n * sigmoid(beta * (H_root - mean H_tool))) + 1, 1, n).

Reference-code bugs fixed here and in :mod:`rlvr_gym_agents.rollout.tree_sampler` (algorithms.md §1.5, §2.5):

1. Stale H_init: ARPO keeps the initial-entropy dict on the rollout worker forever and re-numbers slots each
   call, so from the second step on dH compares against another prompt. :class:`BranchState` is created per
   sampler call and keyed by path, never reused.
2. One-step lag: ARPO decides after observation t from the entropy of the segment that *ended* at t. The
   sampler first generates the next turn of the path (which it keeps), and decides whether to branch at the
   boundary *before* that turn from its first k tokens, i.e. the entropy after observation t.
3. Children's H_init: ARPO re-initialises it from the child's first post-branch segment; a child inherits
   its parent's H_init here (the spec's recommendation).
4. Per-prompt consecutive-branch counter: AEPO counts per prompt and counts refills as branches; ``l`` is
   per path here and only branching increments it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlvr_gym_agents.rollout.tree import RolloutTree


def segment_entropy(entropies: Sequence[float], num_tokens: int = 20) -> float:
    """Mean entropy (nats) of the first ``num_tokens`` tokens of a segment; 0.0 for an empty segment.

    Args:
        entropies: per-token entropies of the full next-token distribution, in generation order.
        num_tokens: k, the probe window (ARPO/AEPO: 20).

    Raises:
        ValueError: num_tokens < 1.
    """
    if num_tokens < 1:
        raise ValueError(f"num_tokens must be >= 1, got {num_tokens}")
    window = list(entropies[:num_tokens])
    return sum(window) / len(window) if window else 0.0


def branch_probability(
    delta_entropy: float,
    consecutive_branches: int,
    alpha: float = 0.5,
    entropy_weight: float = 0.2,
    consecutive_penalty: float = 0.05,
) -> float:
    """P_branch = clip((alpha + w * dH) * (1 - lambda * l), 0, 1).

    Args:
        delta_entropy: dH = H_t - H_init, nats.
        consecutive_branches: l >= 0, branchings in a row on this path just before this boundary.
        alpha: base probability (ARPO's ``branch_probability`` 0.5).
        entropy_weight: w (ARPO/AEPO scripts 0.2; paper sweep best about 0.4). Per nat of entropy here.
        consecutive_penalty: lambda (AEPO 0.05); P = 0 once l >= 1 / lambda.

    Returns:
        A probability in [0, 1], non-decreasing in dH (for w >= 0) and non-increasing in l.
    """
    if consecutive_branches < 0:
        raise ValueError(f"consecutive_branches must be >= 0, got {consecutive_branches}")
    damping = max(0.0, 1.0 - consecutive_penalty * consecutive_branches)
    return min(1.0, max(0.0, (alpha + entropy_weight * delta_entropy) * damping))


def paced_rate(leaves_left: int, turns_left: int, running_paths: int) -> float:
    """The base branch probability that spends a task's budget evenly over the rounds left: ``leaves_left`` children
    over ``turns_left`` boundaries (the turn limit minus the turns played: the rounds a path may still run), shared
    by ``running_paths`` paths, r = leaves_left / (turns_left * running_paths), clipped to [0, 1]. At the last
    boundary (``turns_left`` 1) r = 1 while leaves are left: it is this path's last chance to start a branch in
    flight, and the other running paths may be past theirs, so sharing the leaves among them would leave some to
    fallback branches (which start only after the task's last path ends, in rounds of their own).

    With one global sample, 7 leaves left and 9 turns left the first boundary branches with 7/9; branch depths come
    out spread over the whole episode, and every branch starts while its path runs. Raises ValueError for a count
    below 0 (or below 1 for ``turns_left`` and ``running_paths``)."""
    if leaves_left < 0 or turns_left < 1 or running_paths < 1:
        raise ValueError(f"need leaves_left >= 0, turns_left >= 1 and running_paths >= 1, got {leaves_left}, "
                         f"{turns_left}, {running_paths}")
    if turns_left == 1:
        return 1.0 if leaves_left > 0 else 0.0
    return min(1.0, leaves_left / (turns_left * running_paths))


def global_sample_count(num_leaves: int, root_entropy: float, mean_turn_entropy: float, beta: float = 0.5) -> int:
    """AEPO entropy pre-monitoring: how many of ``num_leaves`` to start from the prompt.

    m = clip(floor(n * sigmoid(beta * (H_root - mean H_tool))) + 1, 1, n): the more uncertain the first turn
    is relative to turns after observations, the more of the budget goes to global samples.

    Returns:
        m in [1, n]; m = floor(n / 2) + 1 when the entropies are equal.
    """
    if num_leaves < 1:
        raise ValueError(f"num_leaves must be >= 1, got {num_leaves}")
    share = 1.0 / (1.0 + math.exp(-beta * (root_entropy - mean_turn_entropy)))
    return min(num_leaves, max(1, math.floor(num_leaves * share) + 1))


@dataclass
class BranchConfig:
    """Branching hyper-parameters (a tree recipe's ``rollout.tree`` section)."""

    alpha: float = 0.5
    """Base branch probability."""
    entropy_weight: float = 0.2
    """w: probability added per nat of entropy increase."""
    consecutive_penalty: float = 0.05
    """lambda: multiplicative penalty per consecutive branching on a path."""
    probe_tokens: int = 20
    """k: tokens at the start of a turn whose mean entropy is the turn's entropy."""
    max_children_per_boundary: int = 1
    """Children created at one boundary when the decision is positive (ARPO beam_size - 1)."""
    at_boundary: bool = False
    """Decide at the boundary, before the turn is generated, from the entropy of the first token's distribution (a
    probe of one token, instead of ``probe_tokens`` of the generated turn): a child then decodes in its parent's
    round, from a copy of the parent's row, instead of one round later, so branching does not add rounds (each level
    of nesting did). Needs the transformers engine with ``reuse_kv_cache``; other engines decide after the turn."""
    pace: bool = False
    """Spend the budget in flight: the base probability at a boundary is at least :func:`paced_rate` (the task's
    leaves left spread evenly over the turns its running paths have left), so a tree whose paths reach the turn
    limit is complete then, not after a second phase of fallback branches (whose rounds, and model passes, come on
    top of the paths'). Fallback still spends what paths that end early leave."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0 or self.consecutive_penalty < 0 or self.probe_tokens < 1:
            raise ValueError("need 0 <= alpha <= 1, consecutive_penalty >= 0 and probe_tokens >= 1")
        if self.max_children_per_boundary < 1:
            raise ValueError(f"max_children_per_boundary must be >= 1, got {self.max_children_per_boundary}")


@dataclass
class BranchState:
    """Per-call branching state: H_init and the consecutive-branch count l of every path.

    Create one per sampler call (never reuse across calls: the ARPO stale-H_init bug).
    """

    initial_entropy: dict[int, float] = field(default_factory=dict)
    consecutive: dict[int, int] = field(default_factory=dict)

    def start_path(self, path: int, first_turn_entropy: float) -> None:
        """A global sample: H_init is the entropy of its first turn, l = 0."""
        self.initial_entropy[path] = first_turn_entropy
        self.consecutive[path] = 0

    def decide(self, path: int, turn_entropy: float, uniform: float, config: BranchConfig,
               base: float | None = None) -> bool:
        """Whether to branch ``path`` at the boundary before a turn whose probe entropy is ``turn_entropy``.

        ``uniform`` is a draw from U(0, 1) supplied by the caller (the sampler's seeded generator); ``base`` replaces
        ``config.alpha`` when given (a paced rate). Updates l: +1 after a branching, reset to 0 otherwise.
        """
        delta = turn_entropy - self.initial_entropy[path]
        alpha = config.alpha if base is None else base
        p = branch_probability(delta, self.consecutive[path], alpha, config.entropy_weight, config.consecutive_penalty)
        branch = uniform < p
        self.consecutive[path] = self.consecutive[path] + 1 if branch else 0
        return branch

    def fork_path(self, parent: int, child: int) -> None:
        """A child inherits its parent's H_init and (already incremented) consecutive count."""
        self.initial_entropy[child] = self.initial_entropy[parent]
        self.consecutive[child] = self.consecutive[parent]


@dataclass(frozen=True)
class FallbackBranchPoint:
    """A turn boundary of a finished tree to branch at again, with its score."""

    score: float
    """dH (or the surprisal) of the turn that followed the boundary minus ``consecutive_penalty`` per existing
    child."""
    node: int
    """The node (turn boundary) to branch at."""
    first_child: int
    """The node of the turn that followed it first (its recorded observation checks a replayed env)."""
    initial_entropy: float
    """H_init of the path through ``node``: the entropy of its first turn (nats)."""


FALLBACK_SCORES = ("entropy", "surprisal")


def fallback_branch_points(tree: RolloutTree, config: BranchConfig, score: str = "entropy") -> list[FallbackBranchPoint]:
    """The turn boundaries of a tree whose paths all ended under budget, best first (TreeRL EPTree-style).

    TreeRL's EPTree forks at the top-entropy positions of the existing tree; here the candidates are the
    interior, not-done nodes, scored by the turns that followed them (the largest over the node's children),
    minus ``config.consecutive_penalty`` per child the node already has:

    - ``"entropy"``: dH = H(next turn) - H_init, the mean entropy of its first ``config.probe_tokens`` tokens
      against the path's first turn (nats).
    - ``"surprisal"``: -log pi(a | s) = -sum of the sampled log-probs of the next turn's action (nats): the
      boundary before the least likely action a path took, where re-sampling most often changes the action.
      A policy that imitates a noisy expert fails mostly through such draws (our addition; not in TreeRL).

    Returns:
        Candidates sorted by score, highest first (ties: the higher node index first); empty when no node of
        the tree has a child.

    Raises:
        ValueError: ``score`` is not one of :data:`FALLBACK_SCORES`.
    """
    if score not in FALLBACK_SCORES:
        raise ValueError(f"score must be one of {FALLBACK_SCORES}, got {score!r}")
    children: dict[int, list[int]] = {}
    for node in tree.nodes[1:]:
        children.setdefault(node.parent, []).append(node.index)
    points = []
    for node in tree.nodes[1:]:
        if node.done or node.index not in children:
            continue
        h_init = segment_entropy(tree.nodes[tree.path(node.index)[1]].entropies, config.probe_tokens)
        if score == "surprisal":
            best = max(-sum(tree.nodes[c].logps) for c in children[node.index])
        else:
            best = max(segment_entropy(tree.nodes[c].entropies, config.probe_tokens) for c in children[node.index]) - h_init
        value = best - config.consecutive_penalty * len(children[node.index])
        points.append(FallbackBranchPoint(value, node.index, children[node.index][0], h_init))
    return sorted(points, key=lambda p: (p.score, p.node), reverse=True)
