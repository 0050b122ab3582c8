"""The desktop apps' task generators, tool schemas, verifiers and scripted solvers, by app name.

Each app module (``files``, ``mail``, ``todo``, ``sheet``, ``settings``, ``widgets``) provides ``TOOLS`` (JSON
schemas), ``KINDS`` (task kinds), ``generate(rng, kind) -> data``, a pure ``verify(data, state, answer) ->
RewardResult`` and ``gui_solver(data)`` (a scripted GUI agent). The five apps' ``data`` also carries ``api_gold``
(an API-only solution) and ``wrong`` (a deliberately wrong solution). Optional: ``ENDS_ON_SUBMIT = True`` (the
page's commit ends the episode) and ``admissible_actions(data, observation)`` (listed in
``info["admissible_actions"]``); ``widgets`` has both and no tools.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.desktop import files, mail, settings, sheet, todo, widgets
from rlvr_gym_web.desktop.common import GuiSolver

APPS: dict[str, ModuleType] = {"files": files, "mail": mail, "todo": todo, "sheet": sheet, "settings": settings,
                               "widgets": widgets}


def _module(app: str) -> ModuleType:
    if app not in APPS:
        raise ValueError(f"unknown app {app!r}; apps: {', '.join(APPS)}")
    return APPS[app]


def generate(app: str, seed: int, kind: str | None = None) -> dict[str, Any]:
    """Generates one task's data for ``app`` from ``seed`` (the kind is drawn from the seed unless given).

    Returns:
        ``{"app", "kind", "instruction", "state", "expect", "api_gold", "wrong"}``.

    Raises:
        ValueError: for an unknown app or kind.
    """
    module = _module(app)
    rng = np.random.default_rng(seed)
    kind = kind or str(rng.choice(module.KINDS))
    return {"app": app, "kind": kind, **module.generate(rng, kind)}


def verify(data: dict[str, Any], state: dict[str, Any], answer: str | None) -> RewardResult:
    """Scores the app's final ``state`` (and the ``answer`` text, for question tasks) against ``data``."""
    return _module(data["app"]).verify(data, state, answer)  # type: ignore[no-any-return]


def tool_schemas(app: str) -> list[dict[str, Any]]:
    """The app's API tools as OpenAI-style function schemas."""
    return list(_module(app).TOOLS)


NAME_TARGET_APPS = ("widgets",)
"""The apps whose scripted solver and action list can address elements by name (``by_name``)."""


def gui_solver(data: dict[str, Any], by_name: bool = False) -> GuiSolver:
    """A scripted GUI agent for the task (start with ``next()``, then ``send(observation)``); with ``by_name``
    its actions name elements by accessible name, not id (apps in :data:`NAME_TARGET_APPS`)."""
    module = _module(data["app"])
    return module.gui_solver(data, by_name=True) if by_name else module.gui_solver(data)  # type: ignore[no-any-return]


def ends_on_submit(app: str) -> bool:
    """Whether the app's page ends the episode by committing (``state["submitted"]``), not only ``done()``."""
    return bool(getattr(_module(app), "ENDS_ON_SUBMIT", False))


def admissible_actions(data: dict[str, Any], observation: str, by_name: bool = False) -> list[str] | None:
    """The actions the app lists for this page (None when the app lists none), elements named as
    :func:`gui_solver` names them."""
    lister = getattr(_module(data["app"]), "admissible_actions", None)
    if lister is None:
        return None
    return list(lister(data, observation, by_name=True) if by_name else lister(data, observation))
