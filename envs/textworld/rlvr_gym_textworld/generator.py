"""Seeded procedural generation of households and goals.

All randomness comes from the ``numpy.random.Generator`` passed in, drawn in a fixed order, so the same
generator state, difficulty, layout and task type always give the same world.

Generation order: task type -> layout (room templates, a kitchen first) -> goal object type -> target
receptacle type (or lamp type) -> object counts -> object placement -> which openable receptacles start
closed -> the starting room. The goal never holds in the initial state: goal objects never start in a
receptacle of the target type.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from rlvr_gym_textworld.world import (
    APPLIANCE,
    OBJECT_KINDS,
    OPENABLE_TYPES,
    ROOM_KINDS,
    ROOM_TEMPLATES,
    TASK_TYPES,
    TREATMENT,
    Goal,
    House,
    ObjectKind,
    RoomTemplate,
    WorldState,
    entity_type,
    natural_key,
)


@dataclasses.dataclass(frozen=True)
class Difficulty:
    """The knobs of the generator.

    Attributes:
        name: a label (``easy``, ``medium``, ``hard`` for the presets).
        num_rooms: inclusive range of the number of rooms (1-4; the first is always a kitchen).
        num_objects: inclusive range of the number of pickable objects, goal objects included.
        closed_fraction: probability in [0, 1] that an openable receptacle (fridge, microwave, cabinet,
            drawer, safe) starts closed.
        task_types: the task types drawn from (uniformly) when a task does not name one.
        contents_in_sight: when True, a room's description also lists what lies in or on each of its open
            receptacles (nothing is hidden but what closed receptacles hold); ALFWorld shows contents only on
            arrival (False).
    """

    name: str
    num_rooms: tuple[int, int]
    num_objects: tuple[int, int]
    closed_fraction: float
    task_types: tuple[str, ...]
    contents_in_sight: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.num_rooms[0] <= self.num_rooms[1] <= len(ROOM_KINDS):
            raise ValueError(f"num_rooms must be a range within [1, {len(ROOM_KINDS)}], got {self.num_rooms}")
        if not 2 <= self.num_objects[0] <= self.num_objects[1]:
            raise ValueError(f"num_objects must be a range with minimum >= 2, got {self.num_objects}")
        if not 0.0 <= self.closed_fraction <= 1.0:
            raise ValueError(f"closed_fraction must be in [0, 1], got {self.closed_fraction}")
        unknown = set(self.task_types) - set(TASK_TYPES)
        if unknown or not self.task_types:
            raise ValueError(f"task_types must be a non-empty subset of {TASK_TYPES}, got {self.task_types}")
        if "look_at_obj_in_light" in self.task_types and self.num_rooms[0] < 2:
            raise ValueError("look_at_obj_in_light needs a lamp, hence a second room: set num_rooms >= 2")


SHORT_TASK_TYPES = ("pick_and_place", "pick_cool_then_place", "pick_heat_then_place", "pick_clean_then_place")

DIFFICULTIES: dict[str, Difficulty] = {
    # The world of the pitfalls calibration run: everything in sight (no closed receptacles), two task types.
    "starter": Difficulty("starter", (1, 1), (3, 4), 0.0, ("pick_and_place", "pick_cool_then_place"),
                          contents_in_sight=True),
    "easy": Difficulty("easy", (1, 1), (3, 6), 0.5, SHORT_TASK_TYPES),
    "medium": Difficulty("medium", (2, 2), (6, 10), 0.5, TASK_TYPES),
    "hard": Difficulty("hard", (3, 4), (10, 16), 0.8, TASK_TYPES),
}
"""The presets behind ``ALFWorld-Starter-v0`` (one kitchen, 3-4 objects, nothing closed and every object in
sight from the first observation, put and cool-then-put tasks), ``ALFWorld-Easy-v0`` (one kitchen of 4-6 receptacles, 3-6 objects, four short task
types), ``ALFWorld-v0`` and ``ALFWorld-Hard-v0``."""


def get_difficulty(difficulty: str | Difficulty | dict[str, Any]) -> Difficulty:
    """Returns a preset by name, ``difficulty`` itself, or a :class:`Difficulty` built from a dict of its
    fields (lists become tuples; ``name`` defaults to ``"custom"``).

    Raises:
        ValueError: on an unknown preset name, unknown fields, or invalid knob values.
    """
    if isinstance(difficulty, Difficulty):
        return difficulty
    if isinstance(difficulty, dict):
        fields = {f.name for f in dataclasses.fields(Difficulty)}
        unknown = sorted(set(difficulty) - fields)
        if unknown:
            raise ValueError(f"unknown difficulty field(s) {unknown}; known: {sorted(fields)}")
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in difficulty.items()}
        return Difficulty(**{"name": "custom", **values})
    if difficulty not in DIFFICULTIES:
        raise ValueError(f"unknown difficulty {difficulty!r}; expected one of {', '.join(DIFFICULTIES)}")
    return DIFFICULTIES[difficulty]


def generate_world(
    rng: np.random.Generator,
    difficulty: str | Difficulty = "medium",
    *,
    layout: str | None = None,
    task_type: str | None = None,
    held_out: bool = False,
) -> WorldState:
    """Generates one household and goal.

    Args:
        rng: the only source of randomness.
        difficulty: a preset name or a :class:`Difficulty`.
        layout: room template ids joined by ``+`` (``kitchen-3+bedroom-1``); drawn when None.
        task_type: one of :data:`~rlvr_gym_textworld.world.TASK_TYPES`; drawn from the difficulty's types
            when None.
        held_out: when drawing the layout, draw from the held-out (test-only) templates instead of the
            training ones.

    Returns:
        The initial :class:`WorldState`, the agent in the middle of a room holding nothing.

    Raises:
        ValueError: on an unknown layout or task type, or a layout that cannot host the task type.
    """
    level = get_difficulty(difficulty)
    if task_type is None:
        task_type = str(level.task_types[int(rng.integers(len(level.task_types)))])
    elif task_type not in TASK_TYPES:
        raise ValueError(f"unknown task type {task_type!r}; expected one of {', '.join(TASK_TYPES)}")
    templates = parse_layout(layout) if layout is not None else _draw_layout(rng, level, task_type, held_out)
    house_rooms, receptacle_types, lamp_types = _build_rooms(templates)
    goal = _draw_goal(rng, task_type, templates, receptacle_types, lamp_types)
    objects = _draw_objects(rng, level, goal, templates)
    contents = _place_objects(rng, objects, goal, house_rooms, receptacle_types, templates)
    openable = [r for r in receptacle_types if receptacle_types[r] in OPENABLE_TYPES]
    is_open = {r: not bool(rng.random() < level.closed_fraction) for r in openable}
    start_room = templates[int(rng.integers(len(templates)))].kind
    lamps = {lamp: host for host, lamp in lamp_types.items()}
    house = House(
        layout="+".join(t.id for t in templates),
        rooms=tuple(t.kind for t in templates),
        room_receptacles={room: tuple(recs) for room, recs in house_rooms.items()},
        receptacle_room={r: room for room, recs in house_rooms.items() for r in recs},
        lamps=lamps,
        objects=tuple(sorted(objects, key=natural_key)),
        contents_in_sight=level.contents_in_sight,
    )
    return WorldState(house, goal, start_room, start_room, None, contents, is_open, {lamp: False for lamp in lamps})


def parse_layout(layout: str) -> list[RoomTemplate]:
    """``"kitchen-3+bedroom-1"`` -> its templates.

    Raises:
        ValueError: on an unknown template id, a repeated room kind, or a layout not starting with a kitchen.
    """
    ids = [part.strip() for part in layout.split("+")]
    unknown = [i for i in ids if i not in ROOM_TEMPLATES]
    if unknown:
        raise ValueError(f"unknown room template(s) {unknown} in layout {layout!r}; known: {sorted(ROOM_TEMPLATES)}")
    templates = [ROOM_TEMPLATES[i] for i in ids]
    kinds = [t.kind for t in templates]
    if kinds[0] != "kitchen" or len(set(kinds)) != len(kinds):
        raise ValueError(f"layout {layout!r} must start with a kitchen and have at most one room of each kind")
    return templates


def layout_templates(kind: str, held_out: bool) -> list[RoomTemplate]:
    """The templates of one room kind, training ones (``held_out=False``) or held-out ones."""
    return [t for t in ROOM_TEMPLATES.values() if t.kind == kind and t.held_out == held_out]


def _draw_layout(rng: np.random.Generator, level: Difficulty, task_type: str, held_out: bool) -> list[RoomTemplate]:
    num_rooms = int(rng.integers(level.num_rooms[0], level.num_rooms[1] + 1))
    others = ["livingroom", "bedroom", "bathroom"]
    kinds = ["kitchen"]
    if task_type == "look_at_obj_in_light":  # the lamp lives in a living room or a bedroom
        if num_rooms < 2:
            raise ValueError("look_at_obj_in_light needs at least two rooms (a lamp is never in a kitchen)")
        kinds.append(others.pop(int(rng.integers(2))))
    while len(kinds) < num_rooms:
        kinds.append(others.pop(int(rng.integers(len(others)))))
    templates = []
    for kind in kinds:
        pool = layout_templates(kind, held_out)
        templates.append(pool[int(rng.integers(len(pool)))])
    return templates


def _build_rooms(
    templates: list[RoomTemplate],
) -> tuple[dict[str, list[str]], dict[str, str], dict[str, str]]:
    """Names receptacles and lamps: returns (room -> receptacles, receptacle -> type, host -> lamp)."""
    counters: dict[str, int] = {}
    rooms: dict[str, list[str]] = {}
    types: dict[str, str] = {}
    lamps: dict[str, str] = {}
    for template in templates:
        names = []
        for kind in template.receptacles:
            counters[kind] = counters.get(kind, 0) + 1
            names.append(f"{kind} {counters[kind]}")
            types[names[-1]] = kind
        if template.lamp is not None:
            host_index, lamp_type = template.lamp
            counters[lamp_type] = counters.get(lamp_type, 0) + 1
            lamps[names[host_index]] = f"{lamp_type} {counters[lamp_type]}"
        rooms[template.kind] = sorted(names, key=natural_key)
    return rooms, types, lamps


def _fits(kind: ObjectKind, task_type: str) -> bool:
    if task_type == "look_at_obj_in_light":
        return kind.lightable
    return {
        "pick_clean_then_place": kind.cleanable,
        "pick_heat_then_place": kind.heatable,
        "pick_cool_then_place": kind.coolable,
    }.get(task_type, True)


def _draw_goal(
    rng: np.random.Generator,
    task_type: str,
    templates: list[RoomTemplate],
    receptacle_types: dict[str, str],
    lamps: dict[str, str],
) -> Goal:
    room_kinds = {t.kind for t in templates}
    candidates = sorted(k.name for k in OBJECT_KINDS.values() if k.room_kind in room_kinds and _fits(k, task_type))
    if not candidates:
        raise ValueError(f"layout {'+'.join(t.id for t in templates)} has no object fit for {task_type}")
    object_type = candidates[int(rng.integers(len(candidates)))]
    if task_type == "look_at_obj_in_light":
        lamp_types = sorted({entity_type(lamp) for lamp in lamps.values()})
        if not lamp_types:
            raise ValueError(f"layout {'+'.join(t.id for t in templates)} has no lamp for look_at_obj_in_light")
        return Goal(task_type, object_type, lamp_type=lamp_types[int(rng.integers(len(lamp_types)))])
    home = _receptacle_types_of(templates, OBJECT_KINDS[object_type].room_kind)
    treatment = TREATMENT.get(task_type)
    excluded = {APPLIANCE[treatment]} if treatment else set()
    # a target type must leave somewhere else in the object's home room for it to start
    targets = sorted(t for t in set(receptacle_types.values()) - excluded if home - {t})
    target = targets[int(rng.integers(len(targets)))]
    return Goal(task_type, object_type, receptacle_type=target, num_objects=2 if "two" in task_type else 1)


def _receptacle_types_of(templates: list[RoomTemplate], room_kind: str) -> set[str]:
    return {r for t in templates if t.kind == room_kind for r in t.receptacles}


def _draw_objects(rng: np.random.Generator, level: Difficulty, goal: Goal, templates: list[RoomTemplate]) -> list[str]:
    """Names the goal objects first, then the distractors (never of the goal's type)."""
    room_kinds = {t.kind for t in templates}
    total = int(rng.integers(level.num_objects[0], level.num_objects[1] + 1))
    total = max(total, goal.num_objects + 1)
    pool = sorted(k.name for k in OBJECT_KINDS.values() if k.room_kind in room_kinds and k.name != goal.object_type)
    kinds = [goal.object_type] * goal.num_objects
    kinds += [pool[int(i)] for i in rng.integers(len(pool), size=total - goal.num_objects)]
    counters: dict[str, int] = {}
    names = []
    for kind in kinds:
        counters[kind] = counters.get(kind, 0) + 1
        names.append(f"{kind} {counters[kind]}")
    return names


def _place_objects(
    rng: np.random.Generator,
    objects: list[str],
    goal: Goal,
    rooms: dict[str, list[str]],
    receptacle_types: dict[str, str],
    templates: list[RoomTemplate],
) -> dict[str, list[str]]:
    contents: dict[str, list[str]] = {r: [] for recs in rooms.values() for r in recs}
    for obj in objects:
        kind = entity_type(obj)
        spots = rooms[OBJECT_KINDS[kind].room_kind]
        if kind == goal.object_type:
            spots = [r for r in spots if receptacle_types[r] != goal.receptacle_type]
        contents[spots[int(rng.integers(len(spots)))]].append(obj)
    return contents
