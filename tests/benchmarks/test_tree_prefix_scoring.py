"""benchmarks/tree_prefix_scoring.py: the ids its forward passes run, counted on a hand-made batch."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from rlvr_gym_agents.rollout import Trajectory


def test_forward_ids_count_each_shared_prefix_once(load_benchmark: Callable[[str], ModuleType]) -> None:
    bench = load_benchmark("tree_prefix_scoring")
    # prompt [1, 2] for all; rows 0-2 share [3, 4, 5] after it, rows 0-1 share [6] more; row 3 has its own prompt
    rows = [[1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 8, 9], [1, 2, 3, 4, 5, 10], [7, 2, 3]]
    batch = [Trajectory("t", "e", token_ids=r, prompt_length=2) for r in rows]
    # per leaf: prompts [1, 2] and [7, 2] once, then 5 + 6 + 4 + 1 continuation ids
    assert bench.forward_ids(batch, None) == 4 + 16
    # shared: prompts 4, [3, 4, 5] 3, [6] 1, then 1 + 2 + 1 + 1 ids
    assert bench.forward_ids(batch, 1) == 4 + 3 + 1 + 5
    # [6] is too short for a node of its own at 2: rows 0 and 1 score it themselves
    assert bench.forward_ids(batch, 2) == 4 + 3 + 2 + 3 + 1 + 1
