"""A small hand-built house shared by the text-world tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rlvr_gym_textworld.world import Goal, House, WorldState


def make_state(goal: Goal | None = None) -> WorldState:
    """Kitchen: countertop 1 (apple 1), drawer 1 (closed, empty), fridge 1 (closed, mug 1), microwave 1 (open),
    sinkbasin 1. Bedroom: desk 1 (desklamp 1, pen 1), bed 1. The agent stands in the middle of the kitchen."""
    house = House(
        layout="test",
        rooms=("kitchen", "bedroom"),
        room_receptacles={
            "kitchen": ("countertop 1", "drawer 1", "fridge 1", "microwave 1", "sinkbasin 1"),
            "bedroom": ("bed 1", "desk 1"),
        },
        receptacle_room={
            **{r: "kitchen" for r in ("countertop 1", "drawer 1", "fridge 1", "microwave 1", "sinkbasin 1")},
            "bed 1": "bedroom",
            "desk 1": "bedroom",
        },
        lamps={"desklamp 1": "desk 1"},
        objects=("apple 1", "mug 1", "pen 1"),
    )
    contents = {r: [] for r in house.receptacle_room}
    contents["countertop 1"] = ["apple 1"]
    contents["fridge 1"] = ["mug 1"]
    contents["desk 1"] = ["pen 1"]
    return WorldState(
        house=house,
        goal=goal or Goal("pick_heat_then_place", "apple", receptacle_type="fridge"),
        room="kitchen",
        location="kitchen",
        holding=None,
        contents=contents,
        is_open={"drawer 1": False, "fridge 1": False, "microwave 1": True},
        lamp_on={"desklamp 1": False},
    )


@pytest.fixture
def state() -> WorldState:
    return make_state()


@pytest.fixture
def new_state() -> Callable[[], WorldState]:
    """A factory of fresh copies of the hand-built house."""
    return make_state
