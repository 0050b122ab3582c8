"""The command interpreter: parses ALFWorld-style commands, applies them to a :class:`WorldState`, writes the
feedback, and lists the admissible commands.

Grammar (ALFWorld's ``alfred.twl2`` templates; case, extra spaces, a final period and the word "the" are
ignored, ``apple1`` reads as ``apple 1``)::

    go to <receptacle or room>      take <object> from <receptacle>    put <object> in/on <receptacle>
    move <object> to <receptacle>   open <receptacle>                  close <receptacle>
    use <lamp>                      clean|heat|cool <object> with <receptacle>
    examine <thing>                 look                               inventory

A command that cannot be parsed yields a :data:`FailureKind.PARSE_ERROR`; a parsed command that is not
possible in the current state (wrong place, closed receptacle, hands full, ...) yields an
:data:`FailureKind.INVALID_ACTION`. Either way the state is unchanged and the observation says what was wrong
and how to fix it. Feedback sentences come from a small fixed set, in ALFWorld's wording.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym_textworld.world import APPLIANCE, TREATED_ADJECTIVE, WorldState, entity_type, natural_key, preposition

COMMAND_HINT = "Try: go to, take, put, open, close, use, clean, heat, cool, examine, look, inventory."


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The result of one command: the feedback text and, when the command failed, why."""

    observation: str
    failure: Failure | None = None


def _usage(form: str) -> str:
    return f"Use: {form}."


_GRAMMAR: dict[str, tuple[re.Pattern[str], str]] = {
    "go": (re.compile(r"^go to (?P<target>.+)$"), "go to X"),
    "take": (re.compile(r"^(?:take|pick up) (?P<obj>.+?) from (?P<rec>.+)$"), "take X from Y"),
    "put": (re.compile(r"^(?:put|move) (?P<obj>.+?) (?:in/on|in|on|into|onto|to) (?P<rec>.+)$"), "put X in/on Y"),
    "open": (re.compile(r"^open (?P<rec>.+)$"), "open X"),
    "close": (re.compile(r"^close (?P<rec>.+)$"), "close X"),
    "use": (re.compile(r"^use (?P<lamp>.+)$"), "use X"),
    "treat": (re.compile(r"^(?P<verb>clean|heat|cool) (?P<obj>.+?) with (?P<rec>.+)$"), "clean X with Y"),
    "examine": (re.compile(r"^examine (?P<target>.+)$"), "examine X"),
    "look": (re.compile(r"^look$"), "look"),
    "inventory": (re.compile(r"^(?:inventory|inv)$"), "inventory"),
}
_FIRST_WORD = {
    "go": "go",
    "take": "take",
    "pick": "take",
    "put": "put",
    "move": "put",
    "open": "open",
    "close": "close",
    "use": "use",
    "clean": "treat",
    "heat": "treat",
    "cool": "treat",
    "examine": "examine",
    "look": "look",
    "inventory": "inventory",
    "inv": "inventory",
}


def normalize(action: str) -> str:
    """Lower-cases, drops "the" and a final period, collapses spaces, and splits ``apple1`` into ``apple 1``."""
    text = action.lower().strip().rstrip(".!")
    text = re.sub(r"\bthe\b", " ", text)
    text = re.sub(r"\b([a-z]+)(\d+)\b", r"\1 \2", text)
    return " ".join(text.split())


def parse(action: str) -> tuple[str, dict[str, str]] | Failure:
    """Parses a command into ``(kind, arguments)``, or returns a PARSE_ERROR :class:`Failure`."""
    text = normalize(action)
    if not text:
        return Failure(FailureKind.PARSE_ERROR, f"You did not type a command. {COMMAND_HINT}")
    first = text.split()[0]
    kind = _FIRST_WORD.get(first)
    if kind is None:
        return Failure(FailureKind.PARSE_ERROR, f"Unknown command '{first[:24]}'. {COMMAND_HINT}")
    pattern, form = _GRAMMAR[kind]
    match = pattern.match(text)
    if match is None:
        return Failure(FailureKind.PARSE_ERROR, f"I do not understand '{text[:40]}'. {_usage(form)}")
    return kind, match.groupdict()


def apply_command(state: WorldState, action: str) -> Outcome:
    """Parses ``action`` and applies it to ``state`` in place (only when it is possible).

    Returns:
        The feedback; ``failure`` is set (and ``state`` untouched) when the command was malformed or
        impossible. Never raises on any string.
    """
    parsed = parse(action)
    if isinstance(parsed, Failure):
        return Outcome(parsed.message, parsed)
    kind, args = parsed
    return _HANDLERS[kind](state, **args)


def _invalid(message: str) -> Outcome:
    return Outcome(message, Failure(FailureKind.INVALID_ACTION, message))


def _name(text: str) -> str:
    return text[:40]


# -- descriptions -----------------------------------------------------------------------------------------
def listing(names: list[str]) -> str:
    """ALFWorld's enumeration: ``a apple 1, a egg 2, and a mug 1`` (``nothing`` when empty)."""
    if not names:
        return "nothing"
    items = [f"a {name}" for name in names]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f", and {items[-1]}"


def show_receptacle(state: WorldState, receptacle: str) -> str:
    """What the agent sees at a receptacle: closed, or its lamps and objects (then the receptacle is added to
    ``state.observed``, the receptacles whose contents the agent knows)."""
    if not state.accessible(receptacle):
        return f"The {receptacle} is closed."
    if receptacle in state.is_open:
        return f"The {receptacle} is open. In it, you see {_look_inside(state, receptacle)}."
    return _seen_on_or_in(state, receptacle)


def _look_inside(state: WorldState, receptacle: str) -> str:
    """The listing of an accessible receptacle's lamps and objects; the receptacle becomes observed."""
    state.observed.add(receptacle)
    return listing([lamp for lamp, host in state.house.lamps.items() if host == receptacle] + state.contents[receptacle])


def _seen_on_or_in(state: WorldState, receptacle: str) -> str:
    """``On the shelf 1, you see nothing.`` / ``In the drawer 1, you see a spatula 1.``"""
    return f"{preposition(entity_type(receptacle)).capitalize()} the {receptacle}, you see {_look_inside(state, receptacle)}."


def describe_room(state: WorldState, arriving: bool) -> str:
    """The receptacles of the agent's room, and the other rooms when there are several."""
    room = state.room
    head = f"You arrive at the {room}." if arriving else f"You are in the {room}."
    text = f"{head} Looking around, you see {listing(list(state.house.room_receptacles[room]))}."
    if state.house.contents_in_sight:
        text += _contents_in_sight(state)
    others = [r for r in state.house.rooms if r != room]
    if others:
        text += f" You can also go to {_the_listing(others)}."
    return text


def _contents_in_sight(state: WorldState) -> str:
    """`` In the drawer 1, you see a spatula 1. On the shelf 1, you see nothing.`` for the room's open
    receptacles, which become observed."""
    receptacles = state.house.room_receptacles[state.room]
    return "".join(f" {_seen_on_or_in(state, r)}" for r in receptacles if state.accessible(r))


def _the_listing(names: list[str]) -> str:
    items = [f"the {name}" for name in names]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f", and {items[-1]}"


def describe_object(state: WorldState, obj: str) -> str:
    """``examine <object>``: the object's states, or the lit view when a lamp is on here."""
    lamps = [lamp for lamp, host in state.house.lamps.items() if host == state.location and state.lamp_on[lamp]]
    if lamps and state.holding == obj:
        return f"You look at the {obj} under the {lamps[0]}."
    states = [TREATED_ADJECTIVE[t] for t in ("clean", "heat", "cool") if state.has(obj, t)]
    if not states:
        return f"There is nothing special about the {obj}."
    return f"This is a {' '.join(states)} {obj}."


# -- handlers ---------------------------------------------------------------------------------------------
def _go(state: WorldState, target: str) -> Outcome:
    house = state.house
    if target in house.rooms:
        if target == state.room:
            return _invalid(f"You are already in the {target}.")
        state.room = state.location = target
        return Outcome(describe_room(state, arriving=True))
    if target not in house.receptacle_room:
        return _invalid(f"There is no place called {_name(target)}. Go to a receptacle or a room.")
    if house.receptacle_room[target] != state.room:
        return _invalid(f"There is no {target} in the {state.room}.")
    if state.location == target:
        return _invalid(f"You are already at the {target}.")
    state.location = target
    return Outcome(f"You arrive at the {target}. {show_receptacle(state, target)}")


def _at_receptacle(state: WorldState, receptacle: str, inside: bool) -> Outcome | None:
    """Checks that the agent stands at ``receptacle`` (and, if ``inside``, that it is open)."""
    if receptacle not in state.house.receptacle_room:
        return _invalid(f"There is no receptacle called {_name(receptacle)}.")
    if state.location != receptacle:
        return _invalid(f"You are not at the {receptacle}; go to it first.")
    if inside and not state.accessible(receptacle):
        return _invalid(f"The {receptacle} is closed; open it first.")
    return None


def _take(state: WorldState, obj: str, rec: str) -> Outcome:
    problem = _at_receptacle(state, rec, inside=True)
    if problem is not None:
        return problem
    if state.house.lamps.get(obj) == rec:
        return _invalid(f"You cannot take the {obj}; use it instead.")
    if obj not in state.contents[rec]:
        return _invalid(f"There is no {_name(obj)} {preposition(entity_type(rec))} the {rec}.")
    if state.holding is not None:
        return _invalid(f"You are already carrying the {state.holding}; put it somewhere first.")
    state.contents[rec].remove(obj)
    state.holding = obj
    return Outcome(f"You pick up the {obj} from the {rec}.")


def _not_carrying(state: WorldState, obj: str) -> Outcome | None:
    if state.holding == obj:
        return None
    if state.holding is None:
        return _invalid("You are not carrying anything.")
    return _invalid(f"You are not carrying the {_name(obj)}; you are carrying the {state.holding}.")


def _put(state: WorldState, obj: str, rec: str) -> Outcome:
    problem = _at_receptacle(state, rec, inside=True) or _not_carrying(state, obj)
    if problem is not None:
        return problem
    state.contents[rec].append(obj)
    state.holding = None
    return Outcome(f"You put the {obj} {preposition(entity_type(rec))} the {rec}.")


def _open_or_close(state: WorldState, rec: str, opening: bool) -> Outcome:
    problem = _at_receptacle(state, rec, inside=False)
    if problem is not None:
        return problem
    if rec not in state.is_open:
        return _invalid(f"The {rec} cannot be opened or closed.")
    if state.is_open[rec] == opening:
        return _invalid(f"The {rec} is already {'open' if opening else 'closed'}.")
    state.is_open[rec] = opening
    if opening:
        return Outcome(f"You open the {rec}. {show_receptacle(state, rec)}")
    return Outcome(f"You close the {rec}.")


def _use(state: WorldState, lamp: str) -> Outcome:
    host = state.house.lamps.get(lamp)
    if host is None:
        return _invalid(f"You cannot use {_name(lamp)}; only a desklamp or a floorlamp can be used.")
    if host != state.location:
        return _invalid(f"The {lamp} is not here.")
    state.lamp_on[lamp] = not state.lamp_on[lamp]
    return Outcome(f"You turn {'on' if state.lamp_on[lamp] else 'off'} the {lamp}.")


def _treat(state: WorldState, verb: str, obj: str, rec: str) -> Outcome:
    problem = _at_receptacle(state, rec, inside=False) or _not_carrying(state, obj)
    if problem is not None:
        return problem
    appliance = APPLIANCE[verb]
    if entity_type(rec) != appliance:
        return _invalid(f"You can only {verb} things with a {appliance}.")
    if verb == "clean":
        state.clean.add(obj)
    elif verb == "heat":
        state.hot.add(obj)
        state.cool.discard(obj)
    else:
        state.cool.add(obj)
        state.hot.discard(obj)
    return Outcome(f"You {verb} the {obj} using the {rec}.")


def _examine(state: WorldState, target: str) -> Outcome:
    if target == state.location and target in state.house.receptacle_room:
        return Outcome(show_receptacle(state, target))
    if target == state.room:
        return Outcome(describe_room(state, arriving=False))
    if target in state.house.receptacle_room:
        return _invalid(f"You are not at the {target}; go to it first.")
    if state.house.lamps.get(target) == state.location:
        return Outcome(f"The {target} is {'on' if state.lamp_on[target] else 'off'}.")
    visible = state.location in state.contents and state.accessible(state.location)
    if target == state.holding or (visible and target in state.contents[state.location]):
        return Outcome(describe_object(state, target))
    return _invalid(f"There is no {_name(target)} here.")


def _look(state: WorldState) -> Outcome:
    if state.location == state.room:
        return Outcome(describe_room(state, arriving=False))
    return Outcome(f"You are at the {state.location} in the {state.room}. {show_receptacle(state, state.location)}")


def _inventory(state: WorldState) -> Outcome:
    if state.holding is None:
        return Outcome("You are not carrying anything.")
    return Outcome(f"You are carrying: a {state.holding}.")


_HANDLERS: dict[str, Callable[..., Outcome]] = {
    "go": _go,
    "take": _take,
    "put": _put,
    "open": lambda state, rec: _open_or_close(state, rec, opening=True),
    "close": lambda state, rec: _open_or_close(state, rec, opening=False),
    "use": _use,
    "treat": _treat,
    "examine": _examine,
    "look": _look,
    "inventory": _inventory,
}


# -- admissible commands ----------------------------------------------------------------------------------
def admissible_actions(state: WorldState) -> list[str]:
    """Every command that is possible in ``state`` (sorted). Each one succeeds if applied."""
    house, here, held = state.house, state.location, state.holding
    actions = ["inventory", "look"]
    actions += [f"go to {room}" for room in house.rooms if room != state.room]
    actions += [f"go to {r}" for r in house.room_receptacles[state.room] if r != here]
    if held is not None:
        actions.append(f"examine {held}")
    if here in house.receptacle_room:
        actions += _actions_at_receptacle(state, here, held)
    return sorted(actions)


def _actions_at_receptacle(state: WorldState, here: str, held: str | None) -> list[str]:
    actions = [f"examine {here}"]
    if here in state.is_open:
        actions.append(f"{'close' if state.is_open[here] else 'open'} {here}")
    lamps = [lamp for lamp, host in state.house.lamps.items() if host == here]
    actions += [f"use {lamp}" for lamp in lamps] + [f"examine {lamp}" for lamp in lamps]
    if held is not None:
        actions += [f"{verb} {held} with {here}" for verb, kind in APPLIANCE.items() if entity_type(here) == kind]
    if state.accessible(here):
        in_view = sorted(state.contents[here], key=natural_key)
        actions += [f"examine {obj}" for obj in in_view]
        if held is None:
            actions += [f"take {obj} from {here}" for obj in in_view]
        else:
            actions.append(f"put {held} {preposition(entity_type(here))} {here}")
    return actions
