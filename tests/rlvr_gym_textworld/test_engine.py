"""The command interpreter: every command kind, its feedback, and invalid commands."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rlvr_gym_textworld.engine import admissible_actions, apply_command, listing, normalize, parse
from rlvr_gym_textworld.generator import generate_world
from rlvr_gym_textworld.world import WorldState

from rlvr_gym.failures import FailureKind

StateFactory = Callable[[], WorldState]
FUZZ_WORLD = generate_world(np.random.default_rng(0), "medium", task_type="look_at_obj_in_light")


def run(state: WorldState, *actions: str) -> str:
    """Applies actions that must all succeed; returns the last observation."""
    obs = ""
    for action in actions:
        outcome = apply_command(state, action)
        assert outcome.failure is None, (action, outcome.observation)
        obs = outcome.observation
    return obs


def test_listing_follows_alfworld() -> None:
    assert listing([]) == "nothing"
    assert listing(["apple 1"]) == "a apple 1"
    assert listing(["apple 1", "egg 2", "mug 1"]) == "a apple 1, a egg 2, and a mug 1"


def test_normalize_accepts_case_articles_and_glued_numbers() -> None:
    assert normalize("  Go To the Fridge1. ") == "go to fridge 1"


def test_go_to_receptacle_describes_it(state: WorldState) -> None:
    assert run(state, "go to countertop 1") == "You arrive at the countertop 1. On the countertop 1, you see a apple 1."
    assert state.location == "countertop 1"
    assert run(state, "go to fridge 1") == "You arrive at the fridge 1. The fridge 1 is closed."
    assert (
        run(state, "go to microwave 1")
        == "You arrive at the microwave 1. The microwave 1 is open. In it, you see nothing."
    )


def test_go_to_room_moves_between_rooms(state: WorldState) -> None:
    obs = run(state, "go to bedroom")
    assert (
        obs
        == "You arrive at the bedroom. Looking around, you see a bed 1, and a desk 1. You can also go to the kitchen."
    )
    assert (state.room, state.location) == ("bedroom", "bedroom")
    outcome = apply_command(state, "go to fridge 1")
    assert outcome.failure is not None and outcome.failure.kind is FailureKind.INVALID_ACTION
    assert outcome.observation == "There is no fridge 1 in the bedroom."


def test_open_take_close_put(state: WorldState) -> None:
    assert (
        run(state, "go to fridge 1", "open fridge 1")
        == "You open the fridge 1. The fridge 1 is open. In it, you see a mug 1."
    )
    assert run(state, "take mug 1 from fridge 1") == "You pick up the mug 1 from the fridge 1."
    assert state.holding == "mug 1" and state.contents["fridge 1"] == []
    assert run(state, "close fridge 1") == "You close the fridge 1."
    assert state.is_open["fridge 1"] is False
    assert run(state, "go to countertop 1", "put mug 1 on countertop 1") == "You put the mug 1 on the countertop 1."
    assert state.contents["countertop 1"] == ["apple 1", "mug 1"] and state.holding is None


def test_move_and_in_on_forms_are_accepted(state: WorldState) -> None:
    run(state, "go to countertop 1", "take apple 1 from countertop 1", "go to microwave 1")
    assert run(state, "move apple 1 to microwave 1") == "You put the apple 1 in the microwave 1."
    run(state, "take apple 1 from microwave 1")
    assert run(state, "put apple 1 in/on microwave 1") == "You put the apple 1 in the microwave 1."


@pytest.mark.parametrize(
    ("verb", "appliance", "flag"),
    [("clean", "sinkbasin 1", "clean"), ("heat", "microwave 1", "hot"), ("cool", "fridge 1", "cool")],
)
def test_treatments_change_the_object(state: WorldState, verb: str, appliance: str, flag: str) -> None:
    run(state, "go to countertop 1", "take apple 1 from countertop 1", f"go to {appliance}")
    assert run(state, f"{verb} apple 1 with {appliance}") == f"You {verb} the apple 1 using the {appliance}."
    assert "apple 1" in getattr(state, flag)
    assert run(state, "examine apple 1") == f"This is a {'hot' if verb == 'heat' else verb} apple 1."


def test_heating_undoes_cooling(state: WorldState) -> None:
    run(state, "go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "cool apple 1 with fridge 1")
    run(state, "go to microwave 1", "heat apple 1 with microwave 1")
    assert state.hot == {"apple 1"} and state.cool == set()


def test_use_lamp_toggles_and_examine_under_light(state: WorldState) -> None:
    run(state, "go to bedroom", "go to desk 1", "take pen 1 from desk 1")
    assert run(state, "use desklamp 1") == "You turn on the desklamp 1."
    assert run(state, "examine pen 1") == "You look at the pen 1 under the desklamp 1."
    assert run(state, "use desklamp 1") == "You turn off the desklamp 1."
    assert run(state, "examine pen 1") == "There is nothing special about the pen 1."


def test_look_inventory_examine(state: WorldState) -> None:
    assert run(state, "look").startswith("You are in the kitchen. Looking around, you see a countertop 1,")
    assert run(state, "inventory") == "You are not carrying anything."
    run(state, "go to countertop 1")
    assert run(state, "look") == "You are at the countertop 1 in the kitchen. On the countertop 1, you see a apple 1."
    assert run(state, "examine countertop 1") == "On the countertop 1, you see a apple 1."
    run(state, "take apple 1 from countertop 1")
    assert run(state, "inventory") == "You are carrying: a apple 1."


@pytest.mark.parametrize(
    ("actions", "last", "kind", "message"),
    [
        ([], "grab apple 1", FailureKind.PARSE_ERROR, "Unknown command 'grab'. Try: go to"),
        ([], "", FailureKind.PARSE_ERROR, "You did not type a command."),
        ([], "take apple 1", FailureKind.PARSE_ERROR, "I do not understand 'take apple 1'. Use: take X from Y."),
        (
            [],
            "take apple 1 from countertop 1",
            FailureKind.INVALID_ACTION,
            "You are not at the countertop 1; go to it first.",
        ),
        (
            ["go to fridge 1"],
            "take mug 1 from fridge 1",
            FailureKind.INVALID_ACTION,
            "The fridge 1 is closed; open it first.",
        ),
        (
            ["go to countertop 1"],
            "take egg 1 from countertop 1",
            FailureKind.INVALID_ACTION,
            "There is no egg 1 on the countertop 1.",
        ),
        (
            ["go to countertop 1"],
            "put apple 1 on countertop 1",
            FailureKind.INVALID_ACTION,
            "You are not carrying anything.",
        ),
        (
            ["go to countertop 1"],
            "open countertop 1",
            FailureKind.INVALID_ACTION,
            "The countertop 1 cannot be opened or closed.",
        ),
        (["go to microwave 1"], "open microwave 1", FailureKind.INVALID_ACTION, "The microwave 1 is already open."),
        (
            ["go to countertop 1"],
            "go to countertop 1",
            FailureKind.INVALID_ACTION,
            "You are already at the countertop 1.",
        ),
        ([], "go to kitchen", FailureKind.INVALID_ACTION, "You are already in the kitchen."),
        ([], "go to garage", FailureKind.INVALID_ACTION, "There is no place called garage."),
        ([], "use apple 1", FailureKind.INVALID_ACTION, "You cannot use apple 1; only a desklamp"),
        ([], "use desklamp 1", FailureKind.INVALID_ACTION, "The desklamp 1 is not here."),
        (
            ["go to countertop 1", "take apple 1 from countertop 1"],
            "heat apple 1 with countertop 1",
            FailureKind.INVALID_ACTION,
            "You can only heat things with a microwave.",
        ),
        (
            ["go to countertop 1", "take apple 1 from countertop 1", "go to fridge 1", "open fridge 1"],
            "take mug 1 from fridge 1",
            FailureKind.INVALID_ACTION,
            "You are already carrying the apple 1; put it somewhere first.",
        ),
        (
            ["go to bedroom", "go to desk 1"],
            "take desklamp 1 from desk 1",
            FailureKind.INVALID_ACTION,
            "You cannot take",
        ),
        ([], "examine pen 1", FailureKind.INVALID_ACTION, "There is no pen 1 here."),
    ],
)
def test_invalid_commands_explain_and_leave_state_unchanged(
    actions: list[str], last: str, kind: FailureKind, message: str, new_state: StateFactory
) -> None:
    state = new_state()
    run(state, *actions)
    before = state.copy()
    outcome = apply_command(state, last)
    assert outcome.failure is not None and outcome.failure.kind is kind
    assert outcome.observation.startswith(message), outcome.observation
    assert state == before


def test_admissible_actions_are_sorted_and_all_succeed(state: WorldState, new_state: StateFactory) -> None:
    for path in (
        [],
        ["go to fridge 1"],
        ["go to fridge 1", "open fridge 1"],
        ["go to countertop 1", "take apple 1 from countertop 1", "go to microwave 1"],
    ):
        current = new_state()
        run(current, *path)
        actions = admissible_actions(current)
        assert actions == sorted(actions)
        for action in actions:
            assert apply_command(current.copy(), action).failure is None, action
    assert admissible_actions(state) == [
        "go to bedroom",
        "go to countertop 1",
        "go to drawer 1",
        "go to fridge 1",
        "go to microwave 1",
        "go to sinkbasin 1",
        "inventory",
        "look",
    ]


def test_parse_returns_arguments() -> None:
    assert parse("clean apple 1 with sinkbasin 1") == (
        "treat",
        {"verb": "clean", "obj": "apple 1", "rec": "sinkbasin 1"},
    )


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_fuzzed_commands_never_raise(text: str) -> None:
    state = FUZZ_WORLD.copy()
    before = state.copy()
    outcome = apply_command(state, text)
    assert isinstance(outcome.observation, str) and outcome.observation
    if outcome.failure is not None:
        assert outcome.failure.kind in (FailureKind.PARSE_ERROR, FailureKind.INVALID_ACTION)
        assert state == before


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "go to",
                "take",
                "put",
                "open",
                "clean",
                "use",
                "examine",
                "apple 1",
                "fridge 1",
                "from",
                "with",
                "in",
                "desklamp 1",
                "bedroom",
                "countertop 1",
            ]
        ),
        max_size=6,
    )
)
def test_fuzzed_word_salad_never_raises(words: list[str]) -> None:
    outcome = apply_command(FUZZ_WORLD.copy(), " ".join(words))
    assert outcome.observation


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.lists(st.integers(0, 10_000), min_size=1, max_size=40))
def test_random_play_keeps_world_invariants(seed: int, choices: list[int]) -> None:
    """Whatever is done, every object is in exactly one place, and every admissible command succeeds."""
    state = generate_world(np.random.default_rng(seed), "hard")
    for choice in choices:
        actions = admissible_actions(state)
        assert apply_command(state, actions[choice % len(actions)]).failure is None
        placed = [o for objects in state.contents.values() for o in objects]
        held = [state.holding] if state.holding is not None else []
        assert sorted(placed + held) == sorted(state.house.objects)
        assert state.location in (state.room, *state.house.room_receptacles[state.room])
