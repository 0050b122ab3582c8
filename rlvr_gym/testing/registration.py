"""Register an env for the duration of a test only, so test doubles never leak into ``list_envs()``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium

from rlvr_gym import registry
from rlvr_gym.core import Env


@contextlib.contextmanager
def temporary_env(env_id: str, entry_point: str | Callable[..., Env], **register_kwargs: Any) -> Iterator[str]:
    """Registers ``env_id`` inside the ``with`` block and removes it (from rlvr_gym's and Gymnasium's
    registries) on exit. Yields the id.

    Raises:
        ValueError: when ``env_id`` is already registered (a temporary env must not shadow a real one).
    """
    if env_id in registry._REGISTRY:
        raise ValueError(f"{env_id!r} is already registered; pick an unused id for a temporary env")
    registry.register(env_id, entry_point, **register_kwargs)
    try:
        yield env_id
    finally:
        registry._REGISTRY.pop(env_id, None)
        gymnasium.registry.pop(env_id, None)
