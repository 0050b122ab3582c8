"""The shipped suites: regenerable, split-disjoint, held-out layouts only in test, gold checked."""

from __future__ import annotations

import pytest
from rlvr_gym_textworld.generator import parse_layout
from rlvr_gym_textworld.make_suites import SUITE_SIZES, build_suite
from rlvr_gym_textworld.suites import generate_tasks

import rlvr_gym
from rlvr_gym.tasks import TaskSuite, load_suite

DIFFICULTIES = ("easy", "medium", "hard")


@pytest.mark.parametrize("name", ["starter-test", "easy-test", "medium-dev", "hard-dev"])
def test_shipped_suite_equals_regenerated(name: str) -> None:
    difficulty, split = name.split("-")
    shipped = load_suite(f"textworld/{name}")
    assert shipped.checksum() == build_suite(difficulty, split).checksum()  # type: ignore[arg-type]


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_splits_are_disjoint_and_sized(difficulty: str) -> None:
    suites = {split: load_suite(f"textworld/{difficulty}-{split}") for split in ("train", "dev", "test")}
    seeds = {split: {t.seed for t in suite} for split, suite in suites.items()}
    for split, suite in suites.items():
        assert len(suite) == SUITE_SIZES[(difficulty, split)]  # type: ignore[index]
        assert {t.split for t in suite} == {split}
    assert not seeds["train"] & seeds["dev"] and not seeds["train"] & seeds["test"] and not seeds["dev"] & seeds["test"]


@pytest.mark.parametrize("difficulty", DIFFICULTIES)
def test_held_out_layouts_only_in_test(difficulty: str) -> None:
    def held_out(suite: TaskSuite) -> list[bool]:
        return [any(t.held_out for t in parse_layout(task.options["layout"])) for task in suite]

    for split in ("train", "dev"):
        assert not any(held_out(load_suite(f"textworld/{difficulty}-{split}")))
    test = load_suite(f"textworld/{difficulty}-test")
    flags = held_out(test)
    assert 0.4 < sum(flags) / len(flags) < 0.6
    assert flags == [task.metadata["held_out_layout"] for task in test]


@pytest.mark.parametrize("difficulty", ("starter", *DIFFICULTIES))
@pytest.mark.parametrize("first", [100, None])
def test_every_task_type_is_tested_in_seen_and_held_out_layouts(difficulty: str, first: int | None) -> None:
    # layout must not stand in for task type: in the whole suite and in its first 100 tasks (an evaluation
    # with eval.num_tasks=100), each type has 40-60% of its tasks in held-out layouts
    tasks = list(load_suite(f"textworld/{difficulty}-test"))[:first]
    by_type: dict[str, list[bool]] = {}
    for task in tasks:
        by_type.setdefault(task.metadata["task_type"], []).append(task.metadata["held_out_layout"])
    assert len(by_type) >= 2
    for flags in by_type.values():
        assert 0.4 <= sum(flags) / len(flags) <= 0.6


def test_easy_train_gold_solves_every_task() -> None:
    suite = load_suite("textworld/easy-train")
    env = rlvr_gym.make("textworld/ALFWorld-Easy-v0")
    for task in suite:
        env.reset(options={"task": task})
        results = [env.step(action) for action in task.gold or []]
        assert results[-1].terminated and results[-1].reward == 1.0, task.id


def test_generate_tasks_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="no text-world env"):
        generate_tasks("textworld/Nope-v0", "train", 1)
    with pytest.raises(ValueError, match="split"):
        generate_tasks("textworld/ALFWorld-v0", "val", 1)  # type: ignore[arg-type]


def test_seed_offset_gives_disjoint_tasks() -> None:
    first = generate_tasks("textworld/ALFWorld-v0", "train", 5)
    second = generate_tasks("textworld/ALFWorld-v0", "train", 5, seed_offset=5)
    assert not {t.seed for t in first} & {t.seed for t in second}
    assert [t.id for t in generate_tasks("textworld/ALFWorld-v0", "train", 10)] == [t.id for t in first + second]


@pytest.mark.slow
@pytest.mark.parametrize("name", [f"{d}-{s}" for d in DIFFICULTIES for s in ("train", "dev", "test")])
def test_every_shipped_suite_is_current_and_its_gold_solves(name: str) -> None:
    difficulty, split = name.split("-")
    shipped = load_suite(f"textworld/{name}")
    assert shipped.checksum() == build_suite(difficulty, split).checksum()  # type: ignore[arg-type]
    env = rlvr_gym.make(shipped[0].env_id)
    for task in shipped:
        env.reset(options={"task": task})
        results = [env.step(action) for action in task.gold or []]
        assert results[-1].terminated and results[-1].reward == 1.0, task.id
