"""The individual conformance checks run by :func:`rlvr_gym.testing.check_env`.

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
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import gymnasium
from gymnasium.utils import env_checker, passive_env_checker

from rlvr_gym.core import Env, ForkNotSupportedError
from rlvr_gym.failures import Failure
from rlvr_gym.registry import EnvSpec
from rlvr_gym.tasks import Task

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
    """What every check needs: the env id, its spec, the tasks and a seeded generator for random actions."""

    env_id: str
    spec: EnvSpec
    tasks: Sequence[Task]
    seed: int = 0

    def make(self, **overrides: Any) -> Env:
        """Builds a fresh env of ``env_id``."""
        return self.spec.make(**overrides)

    def random_actions(self, count: int, salt: int = 0) -> list[str]:
        """``count`` random texts from the env's action space, seeded by ``seed`` and ``salt``."""
        space = self.action_space
        space.seed(self.seed * 1000 + salt)
        return [space.sample() for _ in range(count)]

    @functools.cached_property
    def action_space(self) -> gymnasium.spaces.Space[Any]:
        """The env's action space (built once)."""
        env = self.make()
        try:
            return env.action_space
        finally:
            env.close()


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


# -- Gymnasium's checker --------------------------------------------------------------------------------------
class _TaskInjector(gymnasium.Wrapper[str, str, str, str]):
    """Adds ``options["task"]`` to every ``reset`` so Gymnasium's checker can drive a task-driven env."""

    def __init__(self, env: Env, task: Task, gym_spec: gymnasium.envs.registration.EnvSpec | None) -> None:
        super().__init__(env)
        self._task, self._gym_spec = task, gym_spec

    @property
    def spec(self) -> gymnasium.envs.registration.EnvSpec | None:  # type: ignore[override]
        return self._gym_spec

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        options = dict(options or {})
        options.setdefault("task", self._task)
        return self.env.reset(seed=seed, options=options)


GYMNASIUM_NOT_APPLICABLE = (
    "the JAX/torch-to-numpy conversion (text envs have no arrays); the 'env is wrapped' warning (the checker "
    "wraps the env to inject the task into reset); render-mode and close checks through gymnasium.make "
    "(it resets without a task; the render and close checks here do the same on a task); "
    "check_step_determinism when max_turns == 1 (it asserts that one step does not truncate)"
)
"""The parts of ``gymnasium.utils.env_checker.check_env`` not run, and why."""


def check_gymnasium_api(ctx: CheckContext) -> str:
    """Gymnasium's ``env_checker`` functions that apply to text spaces, with the task injected into resets."""
    task = ctx.tasks[0]
    gym_spec = dataclasses.replace(gymnasium.spec(ctx.env_id), nondeterministic=ctx.spec.nondeterministic)
    with built(ctx) as bare, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if not isinstance(bare, gymnasium.Env):
            raise CheckFailed("the env is not a gymnasium.Env", "subclass rlvr_gym.Env")
        env = _TaskInjector(bare, task, gym_spec)
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("check_action_space", lambda: passive_env_checker.check_action_space(bare.action_space)),
            ("check_space_limit(action)", lambda: env_checker.check_space_limit(bare.action_space, "action")),
            ("check_observation_space", lambda: passive_env_checker.check_observation_space(bare.observation_space)),
            ("check_space_limit(observation)", lambda: env_checker.check_space_limit(
                bare.observation_space, "observation")),
            ("check_seed_deprecation", lambda: env_checker.check_seed_deprecation(bare)),
            ("check_reset_return_info_deprecation", lambda: env_checker.check_reset_return_info_deprecation(bare)),
            ("check_reset_return_type", lambda: env_checker.check_reset_return_type(env)),
            ("check_reset_seed_determinism", lambda: env_checker.check_reset_seed_determinism(env)),
            ("check_reset_options", lambda: env_checker.check_reset_options(env)),
            ("env_reset_passive_checker", lambda: passive_env_checker.env_reset_passive_checker(env)),
            ("env_step_passive_checker", lambda: passive_env_checker.env_step_passive_checker(
                env, bare.action_space.sample())),
            ("check_returned_data_not_reused", lambda: env_checker.check_returned_data_not_reused(env)),
        ]
        if bare.max_turns > 1:
            steps.append(("check_step_determinism", lambda: env_checker.check_step_determinism(env)))
        for name, run in steps:
            try:
                run()
            except (AssertionError, gymnasium.error.Error, TypeError) as error:
                raise CheckFailed(f"gymnasium {name}: {error}", "follow Gymnasium's Env API (see its message)") from error
    warned = sorted({str(w.message).replace("\x1b[33m", "").replace("\x1b[0m", "") for w in caught})
    skipped = "" if bare.max_turns > 1 else "; check_step_determinism not run (max_turns == 1)"
    return f"{len(steps)} Gymnasium checks passed{skipped}" + "".join(f"; warning: {w}" for w in warned)


def check_render(ctx: CheckContext) -> str:
    """``render()`` after a reset returns text (or None) for every declared render mode."""
    with built(ctx) as probe:
        modes = list(probe.metadata.get("render_modes", []))
    for mode in modes:
        try:
            env = ctx.make(render_mode=mode)
        except TypeError as error:
            raise CheckSkipped(f"constructor does not take render_mode ({error})") from None
        try:
            env.reset(options={"task": ctx.tasks[0]})
            frame = env.render()
        finally:
            env.close()
        if frame is not None and not isinstance(frame, str):
            raise CheckFailed(f"render() in mode {mode!r} returned {type(frame).__name__}", "return str in 'ansi' mode")
    return f"render modes: {modes}"


# -- our contract ---------------------------------------------------------------------------------------------
def _action_sequences(ctx: CheckContext, task: Task, salt: int) -> dict[str, list[str]]:
    sequences = {"random": ctx.random_actions(4, salt)}
    if task.gold:
        sequences["gold"] = list(task.gold)
    if task.wrong:
        sequences["wrong"] = list(task.wrong)
    return sequences


def check_seed_determinism(ctx: CheckContext) -> str:
    """The same task, seed and actions give the same observations, rewards and end flags, in fresh envs."""
    if ctx.spec.nondeterministic:
        raise CheckSkipped("the spec is registered nondeterministic=True")
    for index, task in enumerate(ctx.tasks):
        for kind, actions in _action_sequences(ctx, task, index).items():
            runs = []
            for _ in range(2):
                with built(ctx) as env:
                    runs.append(play(env, task, actions))
            if runs[0].reset_observation != runs[1].reset_observation:
                raise CheckFailed(f"task {task.id}: reset observations differ: {_short(runs[0].reset_observation)} "
                                  f"vs {_short(runs[1].reset_observation)}", _DETERMINISM_FIX)
            difference = first_difference(runs[0].transitions, runs[1].transitions)
            if difference:
                raise CheckFailed(f"task {task.id}, {kind} actions: {difference}", _DETERMINISM_FIX)
    return f"{len(ctx.tasks)} task(s) x gold/wrong/random actions, two fresh envs each"


_DETERMINISM_FIX = ("draw all randomness from self.np_random (seeded by reset), never from `random`, time or "
                    "global state; or register the env with nondeterministic=True")


def check_fork(ctx: CheckContext) -> str:
    """After ``fork()``, the same actions give the same transitions in both copies, matching an unforked run,
    and stepping the copy leaves the original unchanged."""
    with built(ctx) as probe:
        if not probe.supports_fork:
            raise CheckSkipped("supports_fork is False; tree rollouts branch only at the root")
    for task in ctx.tasks:
        actions = list(task.gold or task.wrong or ctx.random_actions(4))
        for split_at in sorted({0, len(actions) // 2}):
            _check_fork_at(ctx, task, actions, split_at)
    return f"forked at the root and mid-episode on {len(ctx.tasks)} task(s)"


def _check_fork_at(ctx: CheckContext, task: Task, actions: list[str], split_at: int) -> None:
    with built(ctx) as env:
        reference = play(env, task, actions).transitions[split_at:]
    with built(ctx) as env:
        prefix = play(env, task, actions[:split_at])
        if prefix.done:
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
        state_after = (env.turn, env.last_observation, list(env.action_history))
        if state_after != state_before:
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
        if task.wrong:
            num_wrong += 1
            with built(ctx) as env:
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
    """The malformed actions sent: random texts from the action space, empty, huge, and control/non-ASCII."""
    actions = {f"random text {i}": text for i, text in enumerate(ctx.random_actions(3, salt=99))}
    actions.update({"empty string": "", "huge string": "x(" * (HUGE_ACTION_CHARS // 2),
                    "control and non-ASCII": "\x00\x1b[31m ünïcødé ✓ 𝔘 \n\t<|im_end|>"})
    return actions


def check_malformed_actions(ctx: CheckContext) -> str:
    """Malformed actions never raise; each yields a text observation, and any ``info["failure"]`` is typed."""
    task = ctx.tasks[0]
    with built(ctx) as env:
        for name, action in malformed_actions(ctx).items():
            env.reset(options={"task": task})
            try:
                observation, reward, _, _, info = env.step(action)
            except Exception as error:
                raise CheckFailed(f"step({name}) raised {type(error).__name__}: {error}",
                                  "return an observation saying what was wrong and put a Failure in "
                                  "info['failure'] instead of raising") from error
            if not isinstance(observation, str) or not observation:
                raise CheckFailed(f"step({name}) returned observation {_short(observation)}",
                                  "return a non-empty text observation explaining the problem")
            failure = info.get("failure")
            if failure is not None and not isinstance(failure, Failure):
                raise CheckFailed(f"step({name}): info['failure'] is a {type(failure).__name__}",
                                  "use rlvr_gym.Failure(FailureKind..., message)")
            if not math.isfinite(float(reward)):
                raise CheckFailed(f"step({name}) returned reward {reward}", "rewards must be finite floats")
    return f"{len(malformed_actions(ctx))} malformed actions"


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


ALL_CHECKS: dict[str, Callable[[CheckContext], str]] = {
    "gymnasium_api": check_gymnasium_api,
    "render": check_render,
    "seed_determinism": check_seed_determinism,
    "fork_equivalence": check_fork,
    "gold_and_wrong": check_gold_and_wrong,
    "malformed_actions": check_malformed_actions,
    "turn_limit": check_turn_limit,
    "close": check_close,
}
"""The checks in the order they run."""
