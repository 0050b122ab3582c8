"""rlvr_gym envs as SkyRL-gym text envs (``skyrl_gym.envs.base_text_env.BaseTextEnv``; tested with skyrl-gym 0.4).

SkyRL builds an env per trajectory with ``skyrl_gym.make(env_class, env_config=..., extras=...)``, where
``extras`` carries the dataset row's fields; here ``extras["task"]`` is an rlvr_gym task (a dict, its JSON, or
a :class:`rlvr_gym.Task`). ``init(prompt)`` resets the env on that task and returns its reset observation as
the chat prompt; ``step(action)`` returns the next observation as a user message, the step reward and
``done`` (terminated or truncated). SkyRL's generator turns the messages into token ids itself, appending
observation tokens to the generated ones (its token-in/token-out path), so nothing is re-encoded here::

    from rlvr_gym.adapters.skyrl import register_skyrl_env, skyrl_dataset
    register_skyrl_env()                                   # env_class "rlvr_gym"
    rows = skyrl_dataset(load_suite("textworld/starter-train"))   # prompt, env_class, task
    env = skyrl_gym.make("rlvr_gym", env_config={}, extras=rows[0])
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from rlvr_gym.core import Env
from rlvr_gym.episode import EnvEpisode
from rlvr_gym.registry import make
from rlvr_gym.tasks import Task

ENV_CLASS = "rlvr_gym"
"""The SkyRL env id :func:`register_skyrl_env` registers by default."""


class RlvrGymTextEnv(BaseTextEnv):  # type: ignore[misc]
    """One rlvr_gym episode behind SkyRL's ``BaseTextEnv``.

    Args:
        env_config: SkyRL's per-env config; unused keys are ignored (``max_turns`` overrides the env's limit).
        extras: the dataset row; ``extras["task"]`` is the task (dict, JSON text or :class:`rlvr_gym.Task`).

    Raises:
        ValueError: when ``extras`` has no ``task``.
    """

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None) -> None:
        super().__init__()
        raw = (extras or {}).get("task")
        if raw is None:
            raise ValueError("RlvrGymTextEnv needs extras['task'] (rows from rlvr_gym.adapters.skyrl.skyrl_dataset)")
        self.task = raw if isinstance(raw, Task) else Task.model_validate(json.loads(raw) if isinstance(raw, str)
                                                                         else raw)
        overrides = {"max_turns": int(env_config["max_turns"])} if _get(env_config, "max_turns") else {}
        self.env: Env = make(self.task.env_id, **overrides)
        self.max_turns = self.env.max_turns
        self.success = False
        self.episode: EnvEpisode | None = None

    def init(self, prompt: Any) -> tuple[list[dict[str, str]], dict[str, Any]]:
        """Resets the env on the task; the reset observation replaces the dataset's prompt."""
        self.episode, failure = EnvEpisode.start(self.task, lambda env_id: self.env)
        if self.episode is None:  # the env raised in reset: the episode shows why, and its first step ends it
            message = failure.message if failure else "the env could not start"
            return [{"role": "user", "content": message}], {"task_id": self.task.id, "env_id": self.task.env_id}
        return [{"role": "user", "content": self.episode.observation}], {
            "task_id": self.task.id, "env_id": self.task.env_id, "tools": self.episode.info.get("tools")}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Steps the env with the model's text; the observation comes back as a user message unless done."""
        self.turns += 1
        if self.episode is None:
            return BaseTextEnvStepOutput(observations=[], reward=0.0, done=True, postprocessed_action=None,
                                         metadata={"success": False, "turn": self.turns, "failure": "env_crash"})
        outcome = self.episode.step(action)  # crash-safe: an env that raises ends the episode with env_crash
        self.success = outcome.success
        metadata = {"success": self.success, "turn": self.turns,
                    "failure": outcome.failure.kind.value if outcome.failure else None}
        return BaseTextEnvStepOutput(
            observations=[] if outcome.done else [{"role": "user", "content": outcome.observation}],
            reward=outcome.reward, done=outcome.done, metadata=metadata, postprocessed_action=None)

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode metrics SkyRL aggregates: ``success`` and ``turns``."""
        return {"success": float(self.success), "turns": self.turns}

    def close(self) -> None:
        if self.episode is not None:
            self.episode.close()
        else:
            self.env.close()


def register_skyrl_env(env_class: str = ENV_CLASS) -> str:
    """Registers :class:`RlvrGymTextEnv` in SkyRL-gym's registry under ``env_class`` (once); returns it."""
    import skyrl_gym
    from skyrl_gym.envs.registration import registry

    if env_class not in registry:
        skyrl_gym.register(id=env_class, entry_point="rlvr_gym.adapters.skyrl:RlvrGymTextEnv")
    return env_class


def skyrl_dataset(tasks: Iterable[Task], env_class: str = ENV_CLASS) -> list[dict[str, Any]]:
    """Rows in SkyRL's dataset layout: ``prompt`` (a placeholder message naming the task; ``init`` replaces
    it with the env's observation), ``env_class`` and ``task`` (its JSON), plus ``data_source`` (the env id).
    Pass them to ``datasets.Dataset.from_list`` to write SkyRL's parquet files."""
    return [{"data_source": t.env_id, "prompt": [{"role": "user", "content": f"rlvr_gym task {t.id}"}],
             "env_class": env_class, "task": t.model_dump_json()} for t in tasks]


def _get(config: Any, key: str) -> Any:
    if config is None:
        return None
    if isinstance(config, dict):
        return config.get(key)
    return getattr(config, key, None)
