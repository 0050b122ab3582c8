"""The conformance checks of the rlvr_gym contract, run by :func:`rlvr_gym.testing.check_env`.

Each check takes a :class:`CheckContext` and either returns a note (str, possibly empty), raises
:class:`CheckFailed` with what went wrong and how to fix it, or raises :class:`CheckSkipped` with why it
does not apply. Every check builds its own envs with ``ctx.make()`` and closes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from rlvr_gym.core import Env, ForkNotSupportedError
from rlvr_gym.failures import Failure
from rlvr_gym.registry import EnvSpec
from rlvr_gym.tasks import Task
from rlvr_gym.testing import fuzz

HUGE_ACTION_CHARS = 200_000
"""Length of the oversized action sent by the malformed-action check, in characters."""
CHILD_EXIT_WAIT_S = 2.0
"""How long the process-leak check waits for children to exit after ``close()``, in seconds."""


class CheckFailed(Exception):
    """A check found a violation. ``fix`` says how to repair it."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem, self.fix = problem, fix


class CheckSkipped(Exception):
    """A check does not apply to this env (the message says why)."""


@dataclasses.dataclass
class CheckContext:
    """What every check needs: the env id, its spec, the tasks, the seed of random actions and options."""

    env_id: str
    spec: EnvSpec
    tasks: Sequence[Task]
    seed: int = 0
    surrogates: bool = True
    """Send lone-surrogate actions in the malformed-action check."""

    def make(self, **overrides: Any) -> Env:
        """Builds a fresh env of ``env_id``."""
        return self.spec.make(**overrides)

    def random_actions(self, count: int, salt: int = 0) -> list[str]:
        """``count`` random texts from the env's action space, seeded by ``seed`` and ``salt``."""
        space = self.probe.action_space
        space.seed(self.seed * 1000 + salt)
        return [space.sample() for _ in range(count)]

    @functools.cached_property
    def probe(self) -> Env:
        """One env, built once and closed at once, to read its action space, metadata and class attributes."""
        env = self.make()
        env.close()
        return env


@dataclasses.dataclass(frozen=True)
class Transition:
    """What one step returned, in comparable form."""

    observation: str
    reward: float
    terminated: bool
    truncated: bool


@dataclasses.dataclass
class Episode:
    """A played episode: the reset observation, the transitions, and the last info."""

    reset_observation: str
    transitions: list[Transition]
    last_info: dict[str, Any]

    @property
    def done(self) -> bool:
        return bool(self.transitions) and (self.transitions[-1].terminated or self.transitions[-1].truncated)

    @property
    def episode_return(self) -> float:
        return sum(t.reward for t in self.transitions)


@contextlib.contextmanager
def built(ctx: CheckContext, **overrides: Any) -> Iterator[Env]:
    """A fresh env that is closed on exit."""
    env = ctx.make(**overrides)
    try:
        yield env
    finally:
        env.close()


def play(env: Env, task: Task | None, actions: Sequence[str], seed: int | None = None) -> Episode:
    """Resets ``env`` on ``task`` and steps ``actions`` until they run out or the episode ends."""
    observation, info = env.reset(seed=seed, options={"task": task} if task is not None else None)
    transitions, last_info = continue_play(env, actions)
    return Episode(observation, transitions, last_info if transitions else info)


def continue_play(env: Env, actions: Sequence[str]) -> tuple[list[Transition], dict[str, Any]]:
    """Steps ``actions`` on an already reset env until they run out or the episode ends; returns the
    transitions and the info of the last step (empty when no step was taken)."""
    transitions: list[Transition] = []
    info: dict[str, Any] = {}
    for action in actions:
        observation, reward, terminated, truncated, info = env.step(action)
        transitions.append(Transition(observation, float(reward), bool(terminated), bool(truncated)))
        if terminated or truncated:
            break
    return transitions, info


def first_difference(a: Sequence[Transition], b: Sequence[Transition]) -> str | None:
    """Describes the first turn where two transition lists differ, or None when they are equal."""
    for turn, (x, y) in enumerate(zip(a, b), start=1):
        if x != y:
            return f"turn {turn}: {_short(x)} vs {_short(y)}"
    if len(a) != len(b):
        return f"one run lasted {len(a)} turns, the other {len(b)}"
    return None


def _short(value: Any, limit: int = 160) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "...'"


def _with_gold(tasks: Sequence[Task]) -> list[Task]:
    return [t for t in tasks if t.gold]


# -- our contract ---------------------------------------------------------------------------------------------
def _action_sequences(ctx: CheckContext, task: Task, salt: int) -> dict[str, list[str]]:
    sequences = {"random": ctx.random_actions(4, salt)}
    if task.gold:
        sequences["gold"] = list(task.gold)
    if task.wrong:
        sequences["wrong"] = list(task.wrong)
    return sequences


def check_seed_determinism(ctx: CheckContext) -> str:
    """The same task, seed and actions give the same observations, rewards and end flags in two envs. Each
    env plays every action sequence (gold, wrong, random), one in order and one in reverse order, so state
    that leaks from one episode into the next shows up as a difference too."""
    if ctx.spec.nondeterministic:
        raise CheckSkipped("the spec is registered nondeterministic=True")
    for index, task in enumerate(ctx.tasks):
        sequences = list(_action_sequences(ctx, task, index).items())
        with built(ctx) as forward_env, built(ctx) as backward_env:
            forward = {kind: play(forward_env, task, actions) for kind, actions in sequences}
            backward = {kind: play(backward_env, task, actions) for kind, actions in reversed(sequences)}
        for kind, run in forward.items():
            other = backward[kind]
            if run.reset_observation != other.reset_observation:
                raise CheckFailed(f"task {task.id}: reset observations differ: {_short(run.reset_observation)} "
                                  f"vs {_short(other.reset_observation)}", _DETERMINISM_FIX)
            difference = first_difference(run.transitions, other.transitions)
            if difference:
                raise CheckFailed(f"task {task.id}, {kind} actions: {difference}", _DETERMINISM_FIX)
    return f"{len(ctx.tasks)} task(s) x gold/wrong/random actions in two envs, in opposite orders"


_DETERMINISM_FIX = ("draw all randomness from self.np_random (seeded by reset), never from `random`, time or "
                    "global state; or register the env with nondeterministic=True")


def check_fork(ctx: CheckContext) -> str:
    """After ``fork()``, the same actions give the same transitions in both copies, matching an unforked run,
    and stepping the copy leaves the original unchanged."""
    if not ctx.probe.supports_fork:
        raise CheckSkipped("supports_fork is False; tree rollouts branch only at the root")
    for task in ctx.tasks:
        actions = list(task.gold or task.wrong or ctx.random_actions(4))
        with built(ctx) as reference_env, built(ctx) as env:
            for split_at in sorted({0, len(actions) // 2}):
                reference = play(reference_env, task, actions).transitions[split_at:]
                _check_fork_at(ctx, env, task, actions, split_at, reference)
    return f"forked at the root and mid-episode on {len(ctx.tasks)} task(s)"


def _check_fork_at(
    ctx: CheckContext, env: Env, task: Task, actions: list[str], split_at: int, reference: list[Transition]
) -> None:
    if play(env, task, actions[:split_at]).done:
        return
    state_before = (env.turn, env.last_observation, list(env.action_history))
    try:
        clone = env.fork()
    except ForkNotSupportedError as error:
        raise CheckFailed(f"fork() raised {error}", "set supports_fork = False or implement fork()") from None
    try:
        if clone is env:
            raise CheckFailed("fork() returned the env itself", "return a new env (deepcopy or fork_by_replay)")
        from_clone, _ = continue_play(clone, actions[split_at:])
    finally:
        clone.close()
    if (env.turn, env.last_observation, list(env.action_history)) != state_before:
        raise CheckFailed(f"task {task.id}: stepping the fork changed the original (turn/observation/history)",
                          "the fork must not share mutable state with the original: copy it in fork()")
    from_original, _ = continue_play(env, actions[split_at:])
    fix = "fork() must copy every piece of episode state (or replay the history with fork_by_replay())"
    for name, run in (("fork", from_clone), ("original after fork", from_original)):
        difference = None if ctx.spec.nondeterministic else first_difference(reference, run)
        if difference:
            raise CheckFailed(f"task {task.id}, fork after {split_at} action(s): {name} vs unforked run: "
                              f"{difference}", fix)
    difference = first_difference(from_clone, from_original)
    if difference:
        raise CheckFailed(f"task {task.id}, fork after {split_at} action(s): fork vs original: {difference}", fix)


def check_gold_and_wrong(ctx: CheckContext) -> str:
    """Gold actions end the episode with success and the final-step info conventions; wrong actions score
    less than gold and are not a success."""
    gold_tasks = _with_gold(ctx.tasks)
    if not gold_tasks:
        raise CheckFailed("none of the checked tasks has gold actions",
                          "add `gold` (and `wrong`) action lists to the tasks of the env's suite")
    num_wrong = 0
    for task in gold_tasks:
        with built(ctx) as env:
            gold = play(env, task, task.gold or [])
            _require_gold_success(task, gold)
            if not task.wrong:
                continue
            num_wrong += 1
            wrong = play(env, task, task.wrong)
            if wrong.last_info.get("success") or wrong.episode_return >= gold.episode_return:
                raise CheckFailed(f"task {task.id}: wrong actions scored {wrong.episode_return} (success="
                                  f"{wrong.last_info.get('success')}), gold {gold.episode_return}",
                                  "the verifier must give the wrong solution less than the maximum reward")
    note = f"gold succeeded on {len(gold_tasks)} task(s); wrong scored less on {num_wrong}"
    skipped = len(ctx.tasks) - len(gold_tasks)
    return note + (f"; {skipped} task(s) without gold" if skipped else "")


def _require_gold_success(task: Task, gold: Episode) -> None:
    if not gold.done:
        raise CheckFailed(f"task {task.id}: the {len(task.gold or [])} gold action(s) ran out before the episode "
                          "ended", "make the gold list end with the action that finishes the task")
    info = gold.last_info
    if "success" not in info or "reward_details" not in info:
        raise CheckFailed(f"task {task.id}: the last step's info lacks 'success' or 'reward_details' "
                          f"(keys: {sorted(info)})", "on the final step put info['reward_details'] = "
                          "RewardResult.to_dict() and info['success']")
    if not info["success"] or gold.transitions[-1].truncated:
        raise CheckFailed(f"task {task.id}: gold did not succeed (reward {gold.episode_return}, last observation "
                          f"{_short(gold.transitions[-1].observation)}, reason "
                          f"{_short(info['reward_details'].get('reason'))})",
                          "fix the verifier or the task's gold actions")
    if not all(math.isfinite(t.reward) for t in gold.transitions):
        raise CheckFailed(f"task {task.id}: a reward is not finite", "rewards must be finite floats")


def malformed_actions(ctx: CheckContext) -> dict[str, str]:
    """The generic malformed actions sent: random texts from the action space, empty, huge, and
    control/non-ASCII characters."""
    actions = {f"random text {i}": text for i, text in enumerate(ctx.random_actions(3, salt=99))}
    actions.update({"empty string": "", "huge string": "x(" * (HUGE_ACTION_CHARS // 2),
                    "control and non-ASCII": "\x00\x1b[31m ünïcødé ✓ 𝔘 \n\t<|im_end|>"})
    return actions


def check_malformed_actions(ctx: CheckContext) -> str:
    """Malformed and plausible-but-wrong actions never raise; each yields a text observation, a finite reward
    and, if any, a typed ``info["failure"]``. Sent, each right after a reset: :func:`malformed_actions`,
    :func:`rlvr_gym.testing.fuzz.plausible_actions` (the env's admissible actions and tools, and the task's
    gold actions, mutated: wrong ids, wrong types, truncated) and, unless ``ctx.surrogates`` is False,
    :func:`rlvr_gym.testing.fuzz.surrogate_actions` (lone surrogates). The generic ones each follow a reset;
    the others run in one episode, reset again whenever it ends (resets are slow in browser envs)."""
    task = ctx.tasks[0]
    with built(ctx) as env:
        _, info = env.reset(options={"task": task})
        actions = dict(malformed_actions(ctx))  # generic ones first: each gets its own reset
        actions.update(fuzz.plausible_actions(info, task.gold, np.random.default_rng(ctx.seed),
                                              PLAUSIBLE_ACTIONS_PER_CHECK))
        if ctx.surrogates:
            actions.update(fuzz.surrogate_actions(info, task.gold))
        generic = malformed_actions(ctx)
        done = True
        for name, action in actions.items():
            if done or name in generic:
                env.reset(options={"task": task})
            done = _step_malformed(env, name, action)
    surrogates = "" if ctx.surrogates else " (lone surrogates not sent: surrogates=False)"
    return f"{len(actions)} malformed or plausible-but-wrong actions{surrogates}"


PLAUSIBLE_ACTIONS_PER_CHECK = 16
"""How many mutated admissible/gold actions and tool calls the malformed-action check sends."""


def _step_malformed(env: Env, name: str, action: str) -> bool:
    """Steps one malformed action and checks what came back; returns whether the episode ended."""
    try:
        observation, reward, terminated, truncated, info = env.step(action)
    except Exception as error:
        raise CheckFailed(f"step() raised {type(error).__name__}: {error} on the action {name} = {_short(action)}",
                          "return an observation saying what was wrong and put a Failure in "
                          "info['failure'] instead of raising") from error
    if not isinstance(observation, str) or not observation:
        raise CheckFailed(f"step({name} = {_short(action)}) returned observation {_short(observation)}",
                          "return a non-empty text observation explaining the problem")
    failure = info.get("failure")
    if failure is not None and not isinstance(failure, Failure):
        raise CheckFailed(f"step({name} = {_short(action)}): info['failure'] is a {type(failure).__name__}",
                          "use rlvr_gym.Failure(FailureKind..., message)")
    if not math.isfinite(float(reward)):
        raise CheckFailed(f"step({name} = {_short(action)}) returned reward {reward}", "rewards must be finite floats")
    return bool(terminated or truncated)


def check_turn_limit(ctx: CheckContext) -> str:
    """With ``max_turns=2``, the episode ends by turn 2; if it was truncated the failure is ``turn_limit``."""
    try:
        env = ctx.make(max_turns=2)
    except TypeError as error:
        raise CheckFailed(f"make({ctx.env_id!r}, max_turns=2) raised {error}",
                          "accept max_turns in the constructor and pass it to rlvr_gym.Env.__init__") from None
    try:
        episode = play(env, ctx.tasks[0], ["", "", ""])
    finally:
        env.close()
    if len(episode.transitions) > 2 or not episode.done:
        raise CheckFailed(f"with max_turns=2 the episode lasted {len(episode.transitions)} turns without ending",
                          "do not override step(); implement _step() and let the base enforce max_turns")
    last = episode.transitions[-1]
    if last.truncated and not last.terminated:
        failure = episode.last_info.get("failure")
        if not isinstance(failure, Failure) or failure.kind.value != "turn_limit":
            raise CheckFailed(f"truncated at the turn limit with failure {failure!r}", "keep the base step()")
    return f"ended after {len(episode.transitions)} turn(s)"


def check_close(ctx: CheckContext) -> str:
    """``close()`` after a full episode leaves no child process running, and calling it twice, or before any
    reset, does not raise."""
    import psutil

    me = psutil.Process(os.getpid())
    before = {p.pid for p in me.children(recursive=True)}
    _close_twice(ctx.make(), "before any reset")
    task = (_with_gold(ctx.tasks) or list(ctx.tasks))[0]
    env = ctx.make()
    try:
        play(env, task, list(task.gold or ctx.random_actions(3)))
    finally:
        _close_twice(env, "after an episode")
    leaked = _wait_for_children(me, before)
    if leaked:
        raise CheckFailed(f"child processes still running after close(): {', '.join(leaked)}",
                          "terminate and wait() every process (group) the env started in close()")
    return "no child process left; close() twice is safe"


def _close_twice(env: Env, when: str) -> None:
    env.close()
    try:
        env.close()
    except Exception as error:
        raise CheckFailed(f"a second close() {when} raised {type(error).__name__}: {error}",
                          "make close() idempotent (e.g. set handles to None after releasing them)") from error


def _wait_for_children(me: Any, before: set[int]) -> list[str]:
    import psutil

    deadline = time.monotonic() + CHILD_EXIT_WAIT_S
    while True:
        alive = []
        for child in me.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.pid not in before and child.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"pid {child.pid} ({' '.join(child.cmdline())[:80] or child.name()})")
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def check_info_conventions(ctx: CheckContext) -> str:
    """Infos follow the conventions: ``task_id`` and ``turn`` (0 at reset, then 1, 2, ...); a list of str in
    ``admissible_actions``; OpenAI-style function schemas with a name in ``tools``. Notes gold actions that
    were not in the admissible list of their turn."""
    notes: list[str] = []
    for task in _with_gold(ctx.tasks) or list(ctx.tasks)[:1]:
        with built(ctx) as env:
            _, info = env.reset(options={"task": task})
            _require_info_shape(task, 0, info)
            outside = 0
            for turn, action in enumerate(task.gold or ctx.random_actions(2), start=1):
                admissible = info.get("admissible_actions") or []
                outside += bool(admissible) and action not in admissible
                _, _, terminated, truncated, info = env.step(action)
                _require_info_shape(task, turn, info)
                if terminated or truncated:
                    break
        if outside:
            notes.append(f"{task.id}: {outside} gold action(s) not in admissible_actions")
    return "; ".join(notes) or "task_id, turn, admissible_actions and tools as documented"


def _require_info_shape(task: Task, turn: int, info: dict[str, Any]) -> None:
    where = f"task {task.id}, turn {turn}"
    if info.get("turn") != turn or info.get("task_id") != task.id:
        raise CheckFailed(f"{where}: info has turn={info.get('turn')!r}, task_id={info.get('task_id')!r}",
                          "keep the base class reset()/step(), which set them")
    admissible = info.get("admissible_actions")
    if admissible is not None and not (isinstance(admissible, list) and all(isinstance(a, str) for a in admissible)):
        raise CheckFailed(f"{where}: admissible_actions is not a list of str: {_short(admissible)}",
                          "put the valid commands as a list of strings in info['admissible_actions']")
    for tool in info.get("tools") or []:
        function = tool.get("function", tool) if isinstance(tool, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise CheckFailed(f"{where}: a tool schema has no name: {_short(tool)}",
                              "declare tools as {'type': 'function', 'function': {'name', 'description', "
                              "'parameters'}} (OpenAI function format)")
