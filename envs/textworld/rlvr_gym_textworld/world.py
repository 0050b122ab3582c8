"""The household world's vocabulary and state: room templates, object kinds, the goal and the world state.

Modelled on ALFWorld (Shridhar et al., "ALFWorld: Aligning Text and Embodied Environments for Interactive
Learning", ICLR 2021): locations are receptacles (``countertop 1``, ``fridge 1``), some of them openable;
objects lie in or on receptacles; the agent holds at most one object; appliances change an object's state
(sinkbasin cleans, microwave heats, fridge cools) and lamps light it. Unlike ALFWorld, a house may have
several rooms: ``go to <room>`` moves between rooms and ``go to <receptacle>`` only reaches receptacles of the
current room.

The state is split in two: :class:`House` (what never changes during an episode: rooms, receptacles, object
kinds, lamps; shared between forks) and :class:`WorldState` (what actions change: where the agent is, what
it holds, what lies where, what is open, lit, clean, hot or cool), which :meth:`WorldState.copy` copies in
microseconds.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

TASK_TYPES: tuple[str, ...] = (
    "pick_and_place",
    "look_at_obj_in_light",
    "pick_clean_then_place",
    "pick_heat_then_place",
    "pick_cool_then_place",
    "pick_two_obj_and_place",
)
"""The six ALFWorld task types."""

TREATMENT: dict[str, str] = {
    "pick_clean_then_place": "clean",
    "pick_heat_then_place": "heat",
    "pick_cool_then_place": "cool",
}
"""Task type -> the verb that must be applied to the object before placing it."""

APPLIANCE: dict[str, str] = {"clean": "sinkbasin", "heat": "microwave", "cool": "fridge"}
"""Treatment verb -> the receptacle type that performs it."""

TREATED_ADJECTIVE: dict[str, str] = {"clean": "clean", "heat": "hot", "cool": "cool"}

OPENABLE_TYPES: frozenset[str] = frozenset({"fridge", "microwave", "cabinet", "drawer", "safe"})

IN_TYPES: frozenset[str] = frozenset(
    {"fridge", "microwave", "cabinet", "drawer", "safe", "sinkbasin", "garbagecan", "bathtubbasin"}
)
"""Receptacle types one puts things *in*; the others one puts things *on*."""

LAMP_TYPES: tuple[str, ...] = ("desklamp", "floorlamp")


@dataclasses.dataclass(frozen=True)
class RoomTemplate:
    """One room arrangement ("layout"): the receptacle types in it and, optionally, a lamp.

    Attributes:
        id: ``<kind>-<n>``, e.g. ``kitchen-3``.
        kind: ``kitchen``, ``livingroom``, ``bedroom`` or ``bathroom`` (also the room's name in the text).
        receptacles: receptacle types; a repeated type gives ``cabinet 1``, ``cabinet 2``.
        lamp: ``(index into receptacles of the lamp's host, lamp type)`` or None.
        held_out: True for layouts that appear only in the test split.
    """

    id: str
    kind: str
    receptacles: tuple[str, ...]
    lamp: tuple[int, str] | None = None
    held_out: bool = False


def _room(id: str, receptacles: str, lamp: tuple[int, str] | None = None, held_out: bool = False) -> RoomTemplate:
    return RoomTemplate(id, id.split("-")[0], tuple(receptacles.split()), lamp, held_out)


ROOM_TEMPLATES: dict[str, RoomTemplate] = {
    t.id: t
    for t in (
        _room("kitchen-1", "countertop fridge microwave sinkbasin"),
        _room("kitchen-2", "countertop cabinet fridge microwave sinkbasin"),
        _room("kitchen-3", "cabinet drawer fridge microwave sinkbasin"),
        _room("kitchen-4", "countertop countertop drawer fridge microwave sinkbasin"),
        _room("kitchen-5", "diningtable cabinet fridge microwave sinkbasin stoveburner"),
        _room("kitchen-6", "countertop cabinet cabinet fridge microwave sinkbasin"),
        _room("kitchen-7", "shelf drawer fridge microwave sinkbasin"),
        _room("kitchen-8", "diningtable countertop drawer fridge microwave sinkbasin"),
        _room("kitchen-9", "garbagecan cabinet drawer fridge microwave sinkbasin", held_out=True),
        _room("kitchen-10", "shelf diningtable fridge microwave sinkbasin", held_out=True),
        _room("livingroom-1", "sofa coffeetable sidetable", lamp=(2, "desklamp")),
        _room("livingroom-2", "armchair shelf sidetable drawer", lamp=(2, "floorlamp")),
        _room("livingroom-3", "sofa tvstand coffeetable cabinet sidetable", lamp=(4, "desklamp")),
        _room("livingroom-4", "armchair coffeetable dresser drawer", lamp=(2, "desklamp"), held_out=True),
        _room("bedroom-1", "bed desk drawer", lamp=(1, "desklamp")),
        _room("bedroom-2", "bed dresser shelf drawer", lamp=(1, "desklamp")),
        _room("bedroom-3", "bed sidetable desk drawer garbagecan", lamp=(1, "desklamp")),
        _room("bedroom-4", "bed desk safe shelf", lamp=(1, "floorlamp"), held_out=True),
        _room("bathroom-1", "sinkbasin countertop cabinet toilet"),
        _room("bathroom-2", "sinkbasin bathtubbasin cabinet garbagecan"),
        _room("bathroom-3", "sinkbasin countertop drawer toilet towelholder", held_out=True),
    )
}
"""Every room layout. Held-out layouts appear only in test tasks ("layouts never seen in training")."""

ROOM_KINDS: tuple[str, ...] = ("kitchen", "livingroom", "bedroom", "bathroom")


@dataclasses.dataclass(frozen=True)
class ObjectKind:
    """What can be done with one object type.

    Attributes:
        name: the type, e.g. ``apple``.
        room_kind: the kind of room where it spawns.
        cleanable / heatable / coolable: which treatments apply to it.
        lightable: whether it can be the object of a ``look_at_obj_in_light`` task.
    """

    name: str
    room_kind: str
    cleanable: bool = False
    heatable: bool = False
    coolable: bool = False
    lightable: bool = False


def _kinds(room_kind: str, names: str, **flags: bool) -> list[ObjectKind]:
    return [ObjectKind(name, room_kind, **flags) for name in names.split()]


OBJECT_KINDS: dict[str, ObjectKind] = {
    k.name: k
    for k in (
        *_kinds("kitchen", "apple bread egg potato tomato", cleanable=True, heatable=True, coolable=True),
        *_kinds("kitchen", "lettuce", cleanable=True, coolable=True),
        *_kinds("kitchen", "mug cup plate", cleanable=True, heatable=True, coolable=True),
        *_kinds("kitchen", "bowl pan pot", cleanable=True, coolable=True),
        *_kinds("kitchen", "spoon fork knife spatula", cleanable=True),
        *_kinds("livingroom", "book remotecontrol vase watch keychain", lightable=True),
        *_kinds("livingroom", "pillow newspaper", lightable=True),
        *_kinds("bedroom", "alarmclock cellphone creditcard cd pen pencil", lightable=True),
        *_kinds("bathroom", "soapbar cloth", cleanable=True),
        *_kinds("bathroom", "spraybottle toiletpaper candle"),
    )
}
"""Every pickable object type, keyed by name."""


def preposition(receptacle_type: str) -> str:
    """``"in"`` for containers (fridge, drawer, sinkbasin, ...), ``"on"`` for surfaces."""
    return "in" if receptacle_type in IN_TYPES else "on"


def entity_type(name: str) -> str:
    """``"apple 1"`` -> ``"apple"``."""
    return name.rsplit(" ", 1)[0]


def natural_key(name: str) -> tuple[str, int]:
    """Sort key putting ``drawer 2`` before ``drawer 10``."""
    kind, _, number = name.rpartition(" ")
    return (kind, int(number)) if number.isdigit() else (name, 0)


@dataclasses.dataclass(frozen=True)
class Goal:
    """What the agent must achieve, on object *types* as in ALFWorld (any apple in any fridge counts).

    Attributes:
        task_type: one of :data:`TASK_TYPES`.
        object_type: the object type to move (or to look at), e.g. ``apple``.
        receptacle_type: where to put it (placement tasks), else None.
        lamp_type: which lamp to look under (``look_at_obj_in_light``), else None.
        num_objects: how many objects of ``object_type`` must end in one receptacle (2 for pick_two).
    """

    task_type: str
    object_type: str
    receptacle_type: str | None = None
    lamp_type: str | None = None
    num_objects: int = 1

    def __post_init__(self) -> None:
        if self.task_type not in TASK_TYPES:
            raise ValueError(f"unknown task type {self.task_type!r}; expected one of {', '.join(TASK_TYPES)}")

    @property
    def treatment(self) -> str | None:
        """``clean``, ``heat`` or ``cool`` for the treat-then-place types, else None."""
        return TREATMENT.get(self.task_type)

    def text(self) -> str:
        """The task sentence shown to the agent, in ALFWorld's wording."""
        obj, rec = self.object_type, self.receptacle_type or ""
        where = f"{preposition(rec)} {rec}"
        if self.task_type == "look_at_obj_in_light":
            return f"look at {obj} under the {self.lamp_type}."
        if self.task_type == "pick_two_obj_and_place":
            return f"put two {obj} {where}."
        if self.treatment is not None:
            return f"{self.treatment} some {obj} and put it {where}."
        return f"put a {obj} {where}."

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict; :meth:`from_dict` inverts it."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Goal:
        """Builds a goal from :meth:`to_dict` output. Raises ``ValueError``/``TypeError`` on bad fields."""
        return cls(**data)


@dataclasses.dataclass(frozen=True)
class House:
    """The static part of a world: never changed by actions, shared by forks.

    Attributes:
        layout: the layout id, room template ids joined by ``+`` (``kitchen-3+bedroom-1``).
        rooms: room names in layout order.
        room_receptacles: room -> its receptacles, in natural order.
        receptacle_room: receptacle -> its room.
        lamps: lamp name -> the receptacle it stands on (lamps cannot be taken).
        objects: every pickable object, in natural order.
        contents_in_sight: a room's description lists the contents of its open receptacles
            (:attr:`Difficulty.contents_in_sight <rlvr_gym_textworld.generator.Difficulty>`).
    """

    layout: str
    rooms: tuple[str, ...]
    room_receptacles: dict[str, tuple[str, ...]]
    receptacle_room: dict[str, str]
    lamps: dict[str, str]
    objects: tuple[str, ...]
    contents_in_sight: bool = False

    def receptacles(self) -> list[str]:
        """All receptacles of the house, room by room."""
        return [r for room in self.rooms for r in self.room_receptacles[room]]


@dataclasses.dataclass
class WorldState:
    """The full state of one episode: the static :class:`House` plus everything actions change.

    Attributes:
        house: the static part (shared between copies).
        goal: the episode's goal.
        room: the room the agent is in.
        location: where the agent stands: a receptacle name, or the room name (the middle of the room).
        holding: the object in the agent's hands, or None.
        contents: receptacle -> the objects in/on it, in the order they were put there.
        is_open: openable receptacle -> whether it is open.
        lamp_on: lamp -> whether it is switched on.
        clean / hot / cool: the objects in that state.
        observed: the receptacles whose inside the agent has seen (it knows their contents, since only the
            agent moves objects); used by the exploring oracle.
    """

    house: House
    goal: Goal
    room: str
    location: str
    holding: str | None
    contents: dict[str, list[str]]
    is_open: dict[str, bool]
    lamp_on: dict[str, bool]
    clean: set[str] = dataclasses.field(default_factory=set)
    hot: set[str] = dataclasses.field(default_factory=set)
    cool: set[str] = dataclasses.field(default_factory=set)
    observed: set[str] = dataclasses.field(default_factory=set)

    def copy(self) -> WorldState:
        """An independent copy of the mutable part; the house and goal (immutable) are shared."""
        return WorldState(
            self.house,
            self.goal,
            self.room,
            self.location,
            self.holding,
            {r: list(objs) for r, objs in self.contents.items()},
            dict(self.is_open),
            dict(self.lamp_on),
            set(self.clean),
            set(self.hot),
            set(self.cool),
            set(self.observed),
        )

    def key(self) -> str:
        """A 16-hex-digit digest of everything commands change: room, location, what is held, where each
        object lies (in order), open receptacles, lamps and treated objects. Two states of one house with equal
        keys answer every command alike; ``observed`` (what the agent has seen) is left out. The dicts are
        hashed in their own order: their keys are fixed by the house when it is generated (commands only
        reassign values), which saves sorting them on every step (~5 us instead of ~9 us)."""
        parts = (self.room, self.location, self.holding, self.contents, self.is_open, self.lamp_on,
                 sorted(self.clean), sorted(self.hot), sorted(self.cool))
        return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()

    def where(self, obj: str) -> str | None:
        """The receptacle holding ``obj``, or None when the agent holds it."""
        for receptacle, objs in self.contents.items():
            if obj in objs:
                return receptacle
        return None

    def accessible(self, receptacle: str) -> bool:
        """True when the receptacle's inside can be reached: not openable, or open."""
        return self.is_open.get(receptacle, True)

    def has(self, obj: str, treatment: str) -> bool:
        """Whether ``obj`` has been cleaned / heated / cooled (``treatment`` is the verb)."""
        return obj in {"clean": self.clean, "heat": self.hot, "cool": self.cool}[treatment]
