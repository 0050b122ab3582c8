"""Text the agent can see, for training a word-level tokenizer on this world.

A tiny policy's tokenizer must contain every word the environment can show (a missing word becomes
``<unk>``). :func:`corpus_texts` plays episodes with the oracle, random admissible detours and random
*impossible* commands naming things of the house (so every failure message appears too), and returns every
observation and action text, plus the parse-error messages of each command form and the feedback to commands
naming things the house does not have (a policy can name any word it knows).
"""

from __future__ import annotations

import numpy as np

from rlvr_gym_textworld.engine import COMMAND_HINT, admissible_actions, apply_command, parse
from rlvr_gym_textworld.generator import generate_world, get_difficulty
from rlvr_gym_textworld.oracle import oracle_next_action
from rlvr_gym_textworld.suites import ENV_DIFFICULTY
from rlvr_gym_textworld.verifier import verify
from rlvr_gym_textworld.world import APPLIANCE, WorldState, entity_type, preposition

MALFORMED_COMMANDS = ("", "grab", "go", "take apple 1", "put apple 1", "clean apple 1", "look around", "use")


def all_commands(state: WorldState, receptacles: list[str] | None = None) -> list[str]:
    """Every well-formed command naming this house's rooms, receptacles, objects and lamps (most impossible).

    Args:
        state: the world whose names are used.
        receptacles: restrict the receptacle-specific commands to these (default: all).
    """
    house = state.house
    things = [*house.objects, *house.lamps]
    commands = ["look", "inventory", *(f"go to {place}" for place in (*house.rooms, *house.receptacles()))]
    for receptacle in house.receptacles() if receptacles is None else receptacles:
        commands += [f"open {receptacle}", f"close {receptacle}", f"examine {receptacle}"]
        for thing in things:
            commands.append(f"take {thing} from {receptacle}")
            commands.append(f"put {thing} {preposition(entity_type(receptacle))} {receptacle}")
            commands += [f"{verb} {thing} with {receptacle}" for verb in APPLIANCE]
    commands += [f"use {thing}" for thing in things] + [f"examine {thing}" for thing in things]
    return commands


def feedback_catalogue(state: WorldState) -> list[str]:
    """The distinct feedback of every command naming a receptacle, tried at every receptacle of the house
    with empty hands and with an object in hand: every feedback template, instantiated on this house."""
    messages: set[str] = set()
    held = state.house.objects[0]
    for receptacle in state.house.receptacles():
        for holding in (None, held):
            probe = _holding(state, holding)
            probe.room, probe.location = probe.house.receptacle_room[receptacle], receptacle
            for command in all_commands(probe, [receptacle]):
                messages.add(apply_command(probe.copy(), command).observation)
    return sorted(messages)


def absent_feedback(state: WorldState) -> list[str]:
    """The distinct feedback of commands naming a receptacle and an object that this house does not
    have (``<type> 20``, as a policy that names things of other houses would), with empty hands and holding."""
    receptacle = f"{entity_type(state.house.receptacles()[0])} 20"
    thing = f"{entity_type(state.house.objects[0])} 20"
    messages: set[str] = set()
    for holding in (None, state.house.objects[0]):
        probe = _holding(state, holding)
        commands = [f"go to {receptacle}", f"use {thing}", f"examine {thing}", *all_commands(probe, [receptacle])]
        messages.update(apply_command(probe.copy(), command).observation for command in commands)
    return sorted(messages)


def _holding(state: WorldState, thing: str | None) -> WorldState:
    """A copy of ``state`` with ``thing`` taken from wherever it lies into the agent's hands (None: empty)."""
    probe = state.copy()
    if thing is not None and probe.where(thing) is not None:
        probe.contents[str(probe.where(thing))].remove(thing)
    probe.holding = thing
    return probe


def corpus_texts(
    env_id: str = "textworld/ALFWorld-Easy-v0",
    num_episodes: int = 200,
    seed: int = 0,
    detour_rate: float = 0.25,
    impossible_rate: float = 0.15,
    max_steps: int = 60,
) -> list[str]:
    """Observation and action texts from ``num_episodes`` generated episodes.

    Args:
        env_id: which difficulty to generate (a registered text-world id).
        num_episodes: episodes to play, each on a world generated from ``seed + i``.
        seed: the first world seed; also seeds the choice of detours.
        detour_rate: probability in [0, 1] of a random admissible command instead of the oracle's.
        impossible_rate: probability in [0, 1] of a random impossible command (its failure message is kept).
        max_steps: steps per episode at most.

    Returns:
        Texts in play order: for each episode the first observation (room and task sentence), then each
        command and its feedback; then :func:`feedback_catalogue` and :func:`absent_feedback` of the first two
        worlds, the malformed-command
        messages, the admissible-actions prefix and the numbers 1-20 (object and receptacle numbers).

    Raises:
        ValueError: on an unknown env id.
    """
    if env_id not in ENV_DIFFICULTY:
        raise ValueError(f"no text-world env {env_id!r}; expected one of {', '.join(ENV_DIFFICULTY)}")
    level = get_difficulty(ENV_DIFFICULTY[env_id])
    rng = np.random.default_rng(seed)
    texts: list[str] = []
    for episode in range(num_episodes):
        # every fourth world uses held-out layouts: their words must be in the vocabulary too
        held_out = episode % 4 == 3
        state = generate_world(np.random.default_rng(seed + episode), level, held_out=held_out)
        texts.append(f"Your task is to: {state.goal.text()}")
        texts += _play(state, rng, detour_rate, impossible_rate, max_steps)
    for episode in range(min(num_episodes, 2)):
        world = generate_world(np.random.default_rng(seed + episode), level)
        texts += feedback_catalogue(world) + absent_feedback(world)
    for command in MALFORMED_COMMANDS:
        failure = parse(command)
        texts += [command, failure.message if not isinstance(failure, tuple) else ""]
    texts += [COMMAND_HINT, "Admissible actions: look.", " ".join(str(n) for n in range(1, 21))]
    return [text for text in texts if text]


def _play(
    state: WorldState, rng: np.random.Generator, detour_rate: float, impossible_rate: float, max_steps: int
) -> list[str]:
    texts = [apply_command(state, "look").observation]
    for _ in range(max_steps):
        if verify(state.goal, state).success:
            break
        draw = rng.random()
        if draw < impossible_rate:
            options = all_commands(state)
        elif draw < impossible_rate + detour_rate:
            options = admissible_actions(state)
        else:
            options = [str(oracle_next_action(state))]
        action = options[int(rng.integers(len(options)))]
        texts += [action, apply_command(state, action).observation]
    return texts
