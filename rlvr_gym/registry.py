"""The env registry: ``register``, ``make``, ``spec``, ``list_envs``.

Ids are ``family/Name-vN``. Any change to an env's dynamics, prompts or reward bumps ``N``.

Lookup on ``make(env_id)``:

1. the ids registered so far;
2. on a miss, ``import rlvr_gym_<family>`` (a family package registers its ids when imported);
3. the Gymnasium-style ``"module:family/Name-vN"`` form imports ``module`` first;
4. the entry-point group ``rlvr_gym.envs`` (read only on a miss, never at import): an entry point named
   ``family`` whose value is a module to import.

Every registered id is mirrored into Gymnasium's registry, so ``gymnasium.make("textworld/Pick-v0")``
works too (with Gymnasium's wrappers; ``rlvr_gym.make`` returns the bare env, whose ``fork()`` works).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import importlib.metadata
import re
from collections.abc import Callable
from typing import Any

import gymnasium

from rlvr_gym.core import Env

ENV_ID_PATTERN = re.compile(r"^(?P<family>[A-Za-z0-9_]+)/(?P<name>[A-Za-z0-9_.-]+)-v(?P<version>\d+)$")
ENTRY_POINT_GROUP = "rlvr_gym.envs"


class UnknownEnvError(KeyError):
    """No env is registered under an id. The message names the closest ids and the installed families."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """How to build one registered env.

    Attributes:
        id: ``family/Name-vN``.
        entry_point: ``"package.module:ClassName"`` or a callable returning an :class:`Env`.
        description: one line, shown by ``rlvr-gym envs``.
        kwargs: constructor keyword arguments; ``make(id, **overrides)`` updates them.
        max_turns: the default turn limit (passed as ``max_turns``), or None for the class default.
        nondeterministic: True when the same seed may give different episodes (some web pages).
        default_suite: path of the suite ``rlvr-gym check`` and ``eval`` use by default, relative to the
            repository's ``tasks/`` folder, or None when the env generates tasks from seeds.
    """

    id: str
    entry_point: str | Callable[..., Env]
    description: str = ""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    max_turns: int | None = None
    nondeterministic: bool = False
    default_suite: str | None = None

    @property
    def family(self) -> str:
        """The part of the id before the slash."""
        return self.id.split("/", 1)[0]

    def factory(self) -> Callable[..., Env]:
        """The entry point, imported when it is a ``"package.module:Name"`` string."""
        return _load_entry_point(self.entry_point) if isinstance(self.entry_point, str) else self.entry_point

    def env_class(self) -> type[Env] | None:
        """The env's class, or None for an entry point that is a plain factory function (its class is unknown
        until it runs)."""
        factory = self.factory()
        return factory if isinstance(factory, type) and issubclass(factory, Env) else None

    @property
    def concurrent_steps(self) -> bool:
        """The env class's :attr:`rlvr_gym.Env.concurrent_steps` (False when the class is unknown)."""
        cls = self.env_class()
        return cls is not None and cls.concurrent_steps

    def hold_shared_resources(self) -> contextlib.AbstractContextManager[object]:
        """The env class's :meth:`rlvr_gym.Env.hold_shared_resources` (a no-op context when the class is unknown)."""
        cls = self.env_class()
        return contextlib.nullcontext() if cls is None else cls.hold_shared_resources()

    def make(self, **overrides: Any) -> Env:
        """Builds the env with ``kwargs`` updated by ``overrides``."""
        factory = self.factory()
        kwargs = dict(self.kwargs)
        if self.max_turns is not None:
            kwargs.setdefault("max_turns", self.max_turns)
        kwargs.update(overrides)
        env = factory(**kwargs)
        if not isinstance(env, Env):
            raise TypeError(f"entry point of {self.id} returned {type(env).__name__}, not a rlvr_gym.Env")
        env.init_kwargs = kwargs  # type: ignore[attr-defined]  # read by Env.spawn() for fork_by_replay
        env.spec_id = self.id  # type: ignore[attr-defined]
        return env


_REGISTRY: dict[str, EnvSpec] = {}


def register(
    id: str,
    entry_point: str | Callable[..., Env],
    *,
    description: str = "",
    kwargs: dict[str, Any] | None = None,
    max_turns: int | None = None,
    nondeterministic: bool = False,
    default_suite: str | None = None,
) -> EnvSpec:
    """Registers an env under ``id`` and returns its spec.

    Raises:
        ValueError: when ``id`` is not of the form ``family/Name-vN``, or is already registered with a
            different entry point.
    """
    if not ENV_ID_PATTERN.match(id):
        raise ValueError(f"env id {id!r} must look like 'family/Name-v0' (letters, digits, _ . -)")
    new = EnvSpec(id, entry_point, description, dict(kwargs or {}), max_turns, nondeterministic, default_suite)
    old = _REGISTRY.get(id)
    if old is not None and old.entry_point != entry_point:
        raise ValueError(f"env id {id!r} is already registered with entry point {old.entry_point!r}")
    _REGISTRY[id] = new
    if id not in gymnasium.registry:
        gymnasium.register(id=id, entry_point=lambda **kw: spec(id).make(**kw), disable_env_checker=True)
    return new


def spec(env_id: str) -> EnvSpec:
    """Returns the spec of ``env_id``, importing its family package on a miss.

    Raises:
        UnknownEnvError: naming the closest registered ids and the installed families.
    """
    if ":" in env_id:
        module, env_id = env_id.split(":", 1)
        importlib.import_module(module)
    if env_id not in _REGISTRY:
        _import_family(env_id)
    if env_id not in _REGISTRY:
        raise UnknownEnvError(_unknown_message(env_id))
    return _REGISTRY[env_id]


def make(env_id: str, **kwargs: Any) -> Env:
    """Builds the env registered as ``env_id`` (bare, without Gymnasium wrappers).

    Args:
        env_id: ``family/Name-vN`` or ``module:family/Name-vN``.
        **kwargs: constructor overrides (``max_turns=...`` among them).

    Raises:
        UnknownEnvError: when no such env is registered or importable.
    """
    return spec(env_id).make(**kwargs)


def list_envs(family: str | None = None) -> list[EnvSpec]:
    """Returns the registered specs (of one family, if given), sorted by id, after importing every
    family module :func:`family_modules` finds, so the list is complete.

    Raises:
        ImportError: when a family module exists but one of its own imports fails (the error names it).
    """
    for name, module in family_modules().items():
        if family in (None, name):
            _try_import(module)
    return sorted((s for s in _REGISTRY.values() if family in (None, s.family)), key=lambda s: s.id)


def installed_families() -> list[str]:
    """Names of the env families importable here (see :func:`family_modules`), without ``testing``."""
    return sorted(name for name in family_modules() if name != "testing")


def family_modules() -> dict[str, str]:
    """Every env family found here, mapped to the module that registers its ids when imported.

    Found, without importing anything: ``rlvr-gym-<family>`` distributions, top-level modules and packages
    named ``rlvr_gym_<family>`` anywhere on ``sys.path`` (a ``rlvr_gym_mygames.py`` beside your script, or a
    folder on ``PYTHONPATH``), entry points of the group ``rlvr_gym.envs`` (name = family, value = module),
    and ``testing`` (:mod:`rlvr_gym.testing`). ``rlvr_gym_agents`` is the trainer, not a family.
    """
    import pkgutil

    found: dict[str, str] = {"testing": "rlvr_gym.testing"}
    for dist in importlib.metadata.distributions():
        dist_name = (dist.metadata["Name"] or "").replace("_", "-").lower()
        if dist_name.startswith("rlvr-gym-") and dist_name not in _NOT_FAMILIES:
            family = dist_name.removeprefix("rlvr-gym-").replace("-", "_")
            found.setdefault(family, f"rlvr_gym_{family}")
    for module in pkgutil.iter_modules():
        if module.name.startswith("rlvr_gym_") and module.name.replace("_", "-") not in _NOT_FAMILIES:
            found.setdefault(module.name.removeprefix("rlvr_gym_"), module.name)
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(entry.name, entry.value.split(":")[0])
    return dict(sorted(found.items()))


_NOT_FAMILIES = frozenset({"rlvr-gym-agents"})
"""Distributions and modules named like a family that are not one."""


def _import_family(env_id: str) -> None:
    match = ENV_ID_PATTERN.match(env_id)
    if not match:
        return
    family = match["family"]
    module = "rlvr_gym.testing" if family == "testing" else f"rlvr_gym_{family}"
    if _try_import(module):
        return
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        if entry.name == family:
            importlib.import_module(entry.value.split(":")[0])


def _try_import(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name != module:  # the package exists but one of its own imports is missing
            raise
        return False
    return True


def _load_entry_point(entry_point: str) -> Callable[..., Env]:
    module_name, _, attr = entry_point.partition(":")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    return target  # type: ignore[no-any-return]


def _unknown_message(env_id: str) -> str:
    """What ``spec`` says on a miss: the closest ids among every installed family (imported here, on the error
    path only, so the suggestions are complete), the installed families, and how to fix the id."""
    families = installed_families()
    for name in families:
        with contextlib.suppress(Exception):  # a broken family must not hide the message about this id
            _try_import(f"rlvr_gym_{name}")
    by_lower = {known.lower(): known for known in _REGISTRY}
    close = [by_lower[c] for c in difflib.get_close_matches(env_id.lower(), sorted(by_lower), n=3, cutoff=0.5)]
    match = ENV_ID_PATTERN.match(env_id)
    if not match:
        hint = "ids look like 'family/Name-v0'."
    elif match["family"] in families or match["family"] == "testing":
        hint = f"`rlvr-gym envs --family {match['family']}` lists the ids of family {match['family']!r}."
    else:
        similar = difflib.get_close_matches(match["family"], [*families, "testing"], n=1, cutoff=0.6)
        hint = (f"no family {match['family']!r} is installed; did you mean {similar[0]!r}?" if similar
                else f"did you install `rlvr-gym-{match['family']}`?")
    return (
        f"No env `{env_id}`. Closest registered ids: {', '.join(close) or 'none'}. "
        f"Installed families: {', '.join(families) or 'none'}. {hint}"
    )
