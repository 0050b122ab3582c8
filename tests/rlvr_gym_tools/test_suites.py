"""The generator of fresh easy multi-hop tasks (``sft.demo_tasks`` of ``tools-tiny.yaml``)."""

from __future__ import annotations

import pytest
from rlvr_gym_tools.suites import generate_easy_tasks

from rlvr_gym import load_suite


def test_easy_tasks_continue_the_easy_suites_beyond_their_indices() -> None:
    suite = list(load_suite("tools/multihop_easy_train"))
    again = generate_easy_tasks("tools/MultiHopQA-v0", "train", 4)
    assert [t.data for t in again] == [t.data for t in suite[:4]]  # same generator, same indices
    fresh = generate_easy_tasks("tools/MultiHopQA-v0", "train", 6, seed_offset=len(suite))
    assert {t.options["seed"] for t in fresh} == set(range(len(suite), len(suite) + 6))  # other knowledge bases
    assert [t.metadata["hops"] for t in fresh] == [1, 2, 1, 2, 1, 2]
    assert {t.metadata["kind"] for t in fresh} == {"entity"}
    test_seeds = {t.options["seed"] for t in load_suite("tools/multihop_easy_test")}
    assert min(test_seeds) >= 1_000_000  # train indices never reach the test split's seeds


def test_easy_tasks_reject_other_envs_and_seed_ranges() -> None:
    with pytest.raises(ValueError, match="tools/MultiHopQA-v0"):
        generate_easy_tasks("tools/Math-v0", "train", 1)
    with pytest.raises(ValueError, match="seed_offset"):
        generate_easy_tasks("tools/MultiHopQA-v0", "train", 2, seed_offset=999_999)
