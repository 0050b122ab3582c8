"""The conformance checks that come from Gymnasium: its env checker, with the task injected, and render."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import gymnasium
from gymnasium.utils import env_checker, passive_env_checker

from rlvr_gym.core import Env
from rlvr_gym.tasks import Task
from rlvr_gym.testing.checks import CheckContext, CheckFailed, CheckSkipped, built


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
    modes = list(ctx.probe.metadata.get("render_modes", []))
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
