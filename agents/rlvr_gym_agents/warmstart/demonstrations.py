"""Demonstrations for the warm start: experts, one demonstrated episode with injected mistakes, their token ids.

Demonstrations: an expert (oracle) picks each action; with probability ``mistake_rate`` a random admissible
action is taken instead and the expert recovers from the state it leads to; with probability
``invalid_rate`` an action the env rejects (``sft.invalid_actions``), so the demonstrations show the env's
failure feedback and a recovery from it, as a policy's own invalid actions will. Mistakes stay in the context
(the policy learns to recover) but out of the loss (it never learns to make them), unless
``sft.train_on_mistakes`` makes the warm start imitate them too (a noisy expert).

An expert is a callable ``(env) -> action`` reading the env's current state; ``"gold"`` replays the task's
gold actions (no recovery, so it only works with ``mistake_rate=0``), ``"oracle"`` asks the env's
``oracle_action()`` planner, and ``"module:function"`` names any importable expert (e.g. a text world's planner).
Episodes are stepped through :class:`rlvr_gym.episode.EnvEpisode`, the env side's one stepping owner.
"""

from __future__ import annotations

import dataclasses
import importlib
import random
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import rlvr_gym
import rlvr_gym.registry
from rlvr_gym import Env, Task
from rlvr_gym.episode import EnvEpisode
from rlvr_gym_agents.policy.chat import ChatFormat

if TYPE_CHECKING:
    from rlvr_gym_agents.config import EnvConfig, SFTConfig

Expert = Callable[[Env], str]


@dataclasses.dataclass
class Demonstration:
    """One demonstrated episode.

    Attributes:
        observations: ``observations[i]`` is what the agent saw before ``actions[i]``.
        actions: the actions taken.
        trained: per action, False for an injected mistake left out of the loss (kept in context).
        success: whether the episode ended in success.
    """

    observations: list[str]
    actions: list[str]
    trained: list[bool]
    success: bool


def gold_expert(env: Env) -> str:
    """Replays the task's gold actions in order (cannot recover from a mistake)."""
    gold = getattr(env.task, "gold", None)
    if not gold or env.turn >= len(gold):
        raise ValueError(f"task {getattr(env.task, 'id', None)!r} has no gold action for turn {env.turn + 1}")
    return str(gold[env.turn])


def oracle_expert(env: Env) -> str:
    """Asks the env's own planner (``env.oracle_action()``, e.g. the text world's), which replans from the
    current state and so recovers from mistakes.

    Raises:
        TypeError: when the env has no ``oracle_action`` method.
        ValueError: when the oracle has no action (the goal already holds).
    """
    oracle = getattr(env, "oracle_action", None)
    if oracle is None:
        raise TypeError(f"{type(env).__name__} has no oracle_action(); use sft.expert=gold or module:function")
    action = oracle()
    if action is None:
        raise ValueError(f"the oracle has no action for task {getattr(env.task, 'id', None)!r} (goal already holds)")
    return str(action)


def load_expert(name: str) -> Expert:
    """``"oracle"`` (the env's ``oracle_action()``), ``"gold"`` or ``"package.module:function"``.

    Raises:
        ValueError: on a name of neither form; ImportError / AttributeError when the target is missing.
    """
    if name == "gold":
        return gold_expert
    if name == "oracle":
        return oracle_expert
    if ":" not in name:
        raise ValueError(f"expert {name!r} must be 'gold', 'oracle' or 'package.module:function'")
    return import_callable(name, "expert")  # type: ignore[no-any-return]


def import_callable(target: str, setting: str) -> Any:
    """The object named by ``"package.module:function"`` (a recipe's pluggable expert or task generator).

    Raises:
        ValueError: naming ``setting`` when ``target`` has no ``:``; ImportError / AttributeError when the
            module or function is missing.
    """
    module, sep, attr = target.partition(":")
    if not sep:
        raise ValueError(f"{setting} {target!r} must be 'package.module:function'")
    return getattr(importlib.import_module(module), attr)


def demonstrate(task: Task, expert: Expert, mistake_rate: float, rng: random.Random,
                env_factory: Callable[..., Env] = rlvr_gym.make, max_turns: int | None = None,
                train_on_mistakes: bool = False, invalid_rate: float = 0.0,
                invalid_actions: Callable[[Env], list[str]] | None = None,
                mistake_actions: Callable[[Env], list[str]] | None = None,
                mistake_streak: float | None = None) -> Demonstration:
    """Runs one episode with ``expert``, random admissible mistakes and actions the env rejects.

    Each turn draws one uniform number u: u < ``invalid_rate`` takes a random action of
    ``invalid_actions(env)``, one with the expert's first word (its verb) when there is one (never imitated:
    the demonstration shows its failure feedback and the expert's recovery); u < ``invalid_rate +
    mistake_rate`` takes a random admissible action other than the expert's; otherwise the expert's action.
    With ``mistake_streak`` set, a turn right after an admissible mistake uses ``mistake_streak`` in place of
    ``mistake_rate``, and a mistake is never one the episode already made (with none left, the expert's action):
    mistakes come in runs, as a confused expert's do.

    Args:
        task: the task to run.
        expert: picks the next action from the env's state.
        mistake_rate: probability in [0, 1) of taking a random admissible action (other than the expert's).
        rng: the random generator of mistakes.
        env_factory: builds the env.
        max_turns: overrides the env's turn limit.
        train_on_mistakes: mark the admissible mistakes ``trained`` too (imitated), not only kept in context.
        invalid_rate: probability in [0, 1) of an action the env rejects; needs ``invalid_actions``.
        invalid_actions: lists the actions the env's current state rejects.
        mistake_actions: lists the mistakes to draw from; None: ``info["admissible_actions"]``.
        mistake_streak: probability in [0, 1] that the turn after an admissible mistake is another one; None: every
            turn draws at ``mistake_rate``.
    """
    episode, failure = EnvEpisode.start(task, env_factory, max_turns)
    if episode is None:
        raise RuntimeError(f"cannot demonstrate task {task.id}: {failure.message if failure else 'no env'}")
    demo = Demonstration([], [], [], False)
    mistakes: list[str] = []  # the episode's admissible mistakes, in order
    in_streak = False
    try:
        while not episode.done:
            assert episode.env is not None
            rate = mistake_rate if mistake_streak is None or not in_streak else mistake_streak
            action, trained, mistaken = _demonstrated_action(
                episode.env, episode.info, expert, rng, rate, invalid_rate, invalid_actions, train_on_mistakes,
                mistake_actions, avoid=mistakes if mistake_streak is not None else [])
            if mistaken:
                mistakes.append(action)
            in_streak = mistaken
            demo.observations.append(episode.observation)
            demo.actions.append(action)
            demo.trained.append(trained)
            outcome = episode.step(action)
            if outcome.done:  # a crash ends the demonstration like any other end (never imitated past it)
                demo.success = outcome.success
                demo.observations.append(outcome.observation)
        return demo
    finally:
        episode.close()


def _demonstrated_action(env: Env, info: dict[str, Any], expert: Expert, rng: random.Random, mistake_rate: float,
                         invalid_rate: float, invalid_actions: Callable[[Env], list[str]] | None,
                         train_on_mistakes: bool, mistake_actions: Callable[[Env], list[str]] | None = None,
                         avoid: list[str] | None = None) -> tuple[str, bool, bool]:
    """The action of one demonstrated turn, whether it is imitated and whether it is an admissible mistake (see
    :func:`demonstrate`); the mistake is none of ``avoid``."""
    action = expert(env)
    draw = rng.random()
    if draw < invalid_rate and invalid_actions is not None:
        rejected = invalid_actions(env)
        verb = action.split(" ", 1)[0]
        alike = [a for a in rejected if a.split(" ", 1)[0] == verb]  # a slip on the expert's own command
        if rejected:
            return rng.choice(alike or rejected), False, False
    if invalid_rate <= draw < invalid_rate + mistake_rate:
        offered = info.get("admissible_actions", []) if mistake_actions is None else mistake_actions(env)
        choices = [a for a in offered if a != action and a not in (avoid or [])]
        if choices:
            return rng.choice(choices), train_on_mistakes, True
    return action, True, False


CONTEXT, ACTION, UNTRAINED_ACTION = 0, 1, 2
"""Token roles of :func:`demonstration_ids`: the prompt and observations, an action imitated, an action left out of
the loss (an injected mistake, kept in context)."""


def demonstration_ids(demo: Demonstration, chat: ChatFormat) -> tuple[list[int], list[int]]:
    """Token ids of a demonstration and each id's role: :data:`ACTION` on the imitated actions' ids and end-of-turn
    ids, :data:`UNTRAINED_ACTION` on those of injected mistakes, :data:`CONTEXT` on the prompt and observations."""
    ids = chat.prompt_ids(demo.observations[0])
    roles = [CONTEXT] * len(ids)
    for turn, (action, trained) in enumerate(zip(demo.actions, demo.trained)):
        action_ids = chat.encode(action) + [chat.end_of_turn_id]
        ids += action_ids
        roles += [ACTION if trained else UNTRAINED_ACTION] * len(action_ids)
        if turn + 1 < len(demo.actions):
            obs_ids = chat.observation_ids(demo.observations[turn + 1])
            ids += obs_ids
            roles += [CONTEXT] * len(obs_ids)
    return ids, roles


def collect_demonstrations(sft: SFTConfig, env: EnvConfig, tasks: list[Task] | None, num_episodes: int,
                           seed: int) -> list[Demonstration]:
    """``num_episodes`` expert episodes with injected mistakes (``sft``), cycling over ``tasks`` (or seeded tasks of
    ``env.env_id``), in task order.

    Envs that declare :attr:`rlvr_gym.Env.concurrent_steps` (their steps wait on a sandbox or a simulator) are
    demonstrated on :meth:`EnvConfig.step_thread_count` threads, each demonstration drawing its mistakes from its
    own generator seeded by (``seed``, its index): the same demonstrations for any thread count, 0 included. Other
    envs run one after another from one generator seeded by ``seed``.
    """
    expert = load_expert(sft.expert)
    invalid = None if sft.invalid_actions is None else import_callable(sft.invalid_actions, "sft.invalid_actions")
    mistakes = None if sft.mistake_actions is None else import_callable(sft.mistake_actions, "sft.mistake_actions")
    pool = tasks or [Task(id=f"demo-{i}", env_id=env.env_id, options={"seed": 3_000_000 + i})
                     for i in range(num_episodes)]
    order = [pool[i % len(pool)] for i in range(num_episodes)]

    def run(task: Task, rng: random.Random) -> Demonstration:
        return demonstrate(task, expert, sft.mistake_rate, rng, env_factory=env.factory(), max_turns=env.max_turns,
                           train_on_mistakes=sft.train_on_mistakes, invalid_rate=sft.invalid_rate,
                           invalid_actions=invalid, mistake_actions=mistakes, mistake_streak=sft.mistake_streak)

    if not rlvr_gym.registry.spec(env.env_id).concurrent_steps:
        rng = random.Random(seed)
        return [run(task, rng) for task in order]
    rngs = [random.Random(seed * 1_000_003 + i) for i in range(len(order))]
    threads = env.step_thread_count()
    if threads == 0:  # env.step_threads=0: one after another, the same demonstrations
        return list(map(run, order, rngs))
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="demonstrate") as executor:
        return list(executor.map(run, order, rngs))


def demonstration_variants(sft: SFTConfig, demos: list[Demonstration], seed: int) -> list[Demonstration]:
    """``sft.variants_per_demo`` rewrites of each demonstration by ``sft.demo_variants`` (none when unset), drawn
    from one generator seeded by ``seed``; each keeps its demonstration's ``trained`` flags and outcome.

    Raises:
        ValueError: when ``sft.demo_variants`` is not ``package.module:function``, or a variant changes the number
            of observations or actions.
    """
    if sft.demo_variants is None or sft.variants_per_demo == 0:
        return []
    rewrite, rng, variants = import_callable(sft.demo_variants, "sft.demo_variants"), random.Random(seed), []
    for demo in demos:
        for _ in range(sft.variants_per_demo):
            observations, actions = rewrite(list(demo.observations), list(demo.actions), rng)
            if (len(observations), len(actions)) != (len(demo.observations), len(demo.actions)):
                raise ValueError(f"{sft.demo_variants} changed an episode's length: {len(demo.observations)} "
                                 f"observations and {len(demo.actions)} actions became {len(observations)} and "
                                 f"{len(actions)}")
            variants.append(dataclasses.replace(demo, observations=list(observations), actions=list(actions)))
    return variants


def demonstration_tasks(sft: SFTConfig, env: EnvConfig, train_tasks: list[Task] | None) -> list[Task] | None:
    """The tasks demonstrated in the warm start: ``train_tasks``, or ``sft.num_demos`` tasks from the generator
    named by ``sft.demo_tasks`` (training split, seeds after the train suite's).

    Raises:
        ValueError: when ``sft.demo_tasks`` is not ``package.module:function``.
    """
    if sft.demo_tasks is None:
        return train_tasks
    generate = import_callable(sft.demo_tasks, "sft.demo_tasks")
    return list(generate(env.env_id, "train", sft.num_demos, len(train_tasks or [])))
