"""The pure verifier: does a world state satisfy a goal?

The goal predicates follow ALFWorld's PDDL goals (Shridhar et al., ICLR 2021), stated on object *types*:

- ``pick_and_place``: some receptacle of the target type contains an object of the goal type.
- ``pick_clean_then_place`` / ``pick_heat_then_place`` / ``pick_cool_then_place``: the same, with an object
  that is clean / hot / cool.
- ``pick_two_obj_and_place``: one receptacle of the target type contains two objects of the goal type.
- ``look_at_obj_in_light``: the agent holds an object of the goal type and stands at a switched-on lamp of the
  goal's lamp type.

The reward is binary: 1.0 when the predicate holds, else 0.0. The components report partial progress for
analysis only (they are not part of the reward).
"""

from __future__ import annotations

from rlvr_gym.verifier import RewardResult
from rlvr_gym_textworld.world import Goal, WorldState, entity_type


def satisfies(goal: Goal, state: WorldState, obj: str) -> bool:
    """Whether ``obj`` counts toward a placement goal: right type and, if needed, treated."""
    if entity_type(obj) != goal.object_type:
        return False
    return goal.treatment is None or state.has(obj, goal.treatment)


def placed_count(goal: Goal, state: WorldState) -> int:
    """The most objects counting toward ``goal`` in any one receptacle of the target type."""
    counts = [
        sum(satisfies(goal, state, obj) for obj in objs)
        for receptacle, objs in state.contents.items()
        if entity_type(receptacle) == goal.receptacle_type
    ]
    return max(counts, default=0)


def lit_lamp_here(goal: Goal, state: WorldState) -> bool:
    """Whether a switched-on lamp of the goal's lamp type stands where the agent is."""
    return any(
        host == state.location and state.lamp_on[lamp] and entity_type(lamp) == goal.lamp_type
        for lamp, host in state.house.lamps.items()
    )


def verify(goal: Goal, state: WorldState) -> RewardResult:
    """Scores ``state`` against ``goal``.

    Returns:
        ``RewardResult`` with value 1.0 (goal holds) or 0.0, components in [0, 1] (``placed``: fraction of
        the required objects in one target receptacle; ``treated``: whether any object of the goal type has
        been treated; for light tasks ``holding`` and ``lamp_on_here``), and a one-line reason.
    """
    if goal.task_type == "look_at_obj_in_light":
        holding = state.holding is not None and entity_type(state.holding) == goal.object_type
        lit = lit_lamp_here(goal, state)
        ok = holding and lit
        reason = (
            "holding the object at a lit lamp"
            if ok
            else (f"not holding a {goal.object_type}" if not holding else f"no lit {goal.lamp_type} here")
        )
        return RewardResult(float(ok), {"holding": float(holding), "lamp_on_here": float(lit)}, reason)
    placed = placed_count(goal, state)
    components = {"placed": min(placed, goal.num_objects) / goal.num_objects}
    if goal.treatment is not None:
        objects = [o for o in state.house.objects if entity_type(o) == goal.object_type]
        components["treated"] = float(any(state.has(o, goal.treatment) for o in objects))
    ok = placed >= goal.num_objects
    reason = "goal holds" if ok else f"{placed} of {goal.num_objects} required {goal.object_type} placed"
    return RewardResult(float(ok), components, reason)
