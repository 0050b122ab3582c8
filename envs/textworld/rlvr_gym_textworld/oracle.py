"""The oracle: an expert that solves every generated task, from any state.

By default it is omniscient, like ALFWorld's expert: it walks straight to objects hidden in closed
receptacles. With ``explore=True`` it only uses what the agent has seen (``WorldState.observed``: it knows the
house's rooms and receptacle names, not their contents) and searches the unseen receptacles nearest first, so
its choices are a function of the observation history: a better teacher for behaviour cloning, at the price
of longer episodes.

:func:`oracle_next_action` replans from scratch on every call, so it recovers from any detour (an agent's
mistake, a random injected action): it drops a wrong object, reopens what was closed, fetches a new goal
object. Its choices are deterministic and do not depend on the agent's position in a way that could make it
oscillate (targets are chosen by name; objects, appliances and lamps by distance, which only shrinks while it
walks toward them).

:func:`oracle_plan` rolls it out to the goal (the gold trajectory); :func:`wrong_plan` derives a deliberately
wrong trajectory from it (untreated object, wrong receptacle, or no lamp) that never satisfies the goal.
"""

from __future__ import annotations

from rlvr_gym_textworld.engine import apply_command
from rlvr_gym_textworld.verifier import satisfies, verify
from rlvr_gym_textworld.world import APPLIANCE, WorldState, entity_type, natural_key, preposition

MAX_PLAN_STEPS = 200


class OracleError(RuntimeError):
    """The oracle produced an impossible command or did not reach the goal (a bug in the oracle)."""


def oracle_next_action(state: WorldState, explore: bool = False) -> str | None:
    """The expert's next command from ``state``, or None when the goal already holds.

    Args:
        state: any reachable state of an episode (not modified).
        explore: use only what the agent has observed (search unseen receptacles) instead of omniscience.

    Returns:
        A command that is admissible in ``state``, on a shortest-in-practice path to the goal.
    """
    if verify(state.goal, state).success:
        return None
    if state.goal.task_type == "look_at_obj_in_light":
        return _next_for_light(state, explore)
    return _next_for_placement(state, explore)


def oracle_plan(state: WorldState, max_steps: int = MAX_PLAN_STEPS, explore: bool = False) -> list[str]:
    """The gold trajectory: the oracle's commands from ``state`` (not modified) until the goal holds
    (``explore`` as in :func:`oracle_next_action`).

    Raises:
        OracleError: if a command fails or the goal is not reached within ``max_steps``.
    """
    state = state.copy()
    actions: list[str] = []
    while (action := oracle_next_action(state, explore)) is not None:
        outcome = apply_command(state, action)
        if outcome.failure is not None:
            raise OracleError(f"oracle command {action!r} failed: {outcome.observation}")
        actions.append(action)
        if len(actions) > max_steps:
            raise OracleError(f"oracle did not reach the goal in {max_steps} steps: {actions[-5:]}")
    return actions


def wrong_plan(state: WorldState) -> list[str]:
    """A deliberately wrong trajectory that looks like the gold one but never satisfies the goal.

    Treat-then-place tasks skip the treatment; light tasks examine the object without switching the lamp on;
    the other placement tasks put the last object into a receptacle of another type.
    """
    gold = oracle_plan(state)
    goal = state.goal
    if goal.treatment is not None:
        return [a for a in gold if not a.startswith(f"{goal.treatment} ")]
    before_last = state.copy()
    for action in gold[:-1]:
        apply_command(before_last, action)
    held = before_last.holding
    assert held is not None, "the gold plan always ends with the object in hand"
    if goal.task_type == "look_at_obj_in_light":
        return gold[:-1] + [f"examine {held}"]
    room_receptacles = before_last.house.room_receptacles[before_last.room]
    wrong = next(r for r in room_receptacles if entity_type(r) != goal.receptacle_type)
    tail = [f"go to {wrong}"]
    if not before_last.accessible(wrong):
        tail.append(f"open {wrong}")
    return gold[:-1] + tail + [f"put {held} {preposition(entity_type(wrong))} {wrong}"]


def _distance_key(state: WorldState, receptacle: str) -> tuple[bool, bool, tuple[str, int]]:
    room = state.house.receptacle_room[receptacle]
    return room != state.room, receptacle != state.location, natural_key(receptacle)


def _path_to(state: WorldState, receptacle: str) -> str | None:
    """The next move toward ``receptacle``, or None when already there."""
    if state.location == receptacle:
        return None
    room = state.house.receptacle_room[receptacle]
    return f"go to {room}" if room != state.room else f"go to {receptacle}"


def _reach(state: WorldState, receptacle: str, action: str, inside: bool = True) -> str:
    """``action`` if the agent is at ``receptacle`` (and it is open when ``inside``); else the step toward it."""
    step = _path_to(state, receptacle)
    if step is not None:
        return step
    if inside and not state.accessible(receptacle):
        return f"open {receptacle}"
    return action


def _explore(state: WorldState) -> str:
    """The next step toward seeing inside the nearest receptacle not yet seen."""
    unseen = [r for r in state.house.receptacles() if r not in state.observed]
    assert unseen, "some receptacle holds what is searched for, so it cannot have been seen"
    nearest = min(unseen, key=lambda r: _distance_key(state, r))
    return _reach(state, nearest, f"examine {nearest}")


def _fetch(state: WorldState, candidates: list[str], explore: bool) -> str:
    """The next step toward picking up the nearest of ``candidates`` (hands empty); when exploring, the
    nearest one seen so far, or the next receptacle to search."""
    assert candidates, "the generator always leaves an object of the goal type to fetch"
    if explore:
        candidates = [o for o in candidates if state.where(o) in state.observed]
        if not candidates:
            return _explore(state)
    located = [(state.where(obj), obj) for obj in candidates]
    receptacle, obj = min(located, key=lambda pair: (_distance_key(state, str(pair[0])), natural_key(pair[1])))
    assert receptacle is not None
    return _reach(state, receptacle, f"take {obj} from {receptacle}")


def _drop(state: WorldState) -> str:
    """The next step toward putting down a held object that is of no use."""
    here, held = state.location, state.holding
    if here not in state.house.receptacle_room:
        return f"go to {state.house.room_receptacles[state.room][0]}"
    return _reach(state, here, f"put {held} {preposition(entity_type(here))} {here}")


def _next_for_placement(state: WorldState, explore: bool) -> str:
    goal, house = state.goal, state.house
    targets = [r for r in house.receptacles() if entity_type(r) == goal.receptacle_type]
    target = min(targets, key=lambda r: (-sum(satisfies(goal, state, o) for o in state.contents[r]), natural_key(r)))
    held = state.holding
    if held is not None and entity_type(held) != goal.object_type:
        return _drop(state)
    if held is None:
        placed = {o for o in state.contents[target] if satisfies(goal, state, o)}
        candidates = [o for o in house.objects if entity_type(o) == goal.object_type and o != held]
        return _fetch(state, [o for o in candidates if o not in placed], explore)
    if goal.treatment is not None and not state.has(held, goal.treatment):
        kind = APPLIANCE[goal.treatment]
        appliance = min(
            (r for r in house.receptacles() if entity_type(r) == kind), key=lambda r: _distance_key(state, r)
        )
        return _reach(state, appliance, f"{goal.treatment} {held} with {appliance}", inside=False)
    return _reach(state, target, f"put {held} {preposition(entity_type(target))} {target}")


def _next_for_light(state: WorldState, explore: bool) -> str:
    goal, house = state.goal, state.house
    held = state.holding
    if held is not None and entity_type(held) != goal.object_type:
        return _drop(state)
    if held is None:
        return _fetch(state, [o for o in house.objects if entity_type(o) == goal.object_type], explore)
    lamps = [lamp for lamp in house.lamps if entity_type(lamp) == goal.lamp_type]
    if explore:
        lamps = [lamp for lamp in lamps if house.lamps[lamp] in state.observed]
        if not lamps:
            return _explore(state)
    lamp = min(lamps, key=lambda lp: (not state.lamp_on[lp], _distance_key(state, house.lamps[lp]), natural_key(lp)))
    return _reach(state, house.lamps[lamp], f"use {lamp}", inside=False)
