"""The desktop-like app envs: our own small apps (HTML/JS in ``rlvr_gym_web/apps``) over ``file://``.

Apps: a file manager (``files``), a mail client (``mail``), a to-do list with a calendar (``todo``), a
spreadsheet-like table (``sheet``) and a settings panel (``settings``). Tasks are generated from seeds
(:mod:`rlvr_gym_web.desktop.apps`); the task carries the app's initial state, which an init script hands to
the page before its own scripts run.

An agent may act through the GUI (clicks, fills, ...), through the app's API tools (``api.move_file(...)``,
schemas in ``info["tools"]``), or both: ComputerRL's API-GUI paradigm (Lai et al., 2025, arXiv:2508.14040).
API calls run the same JavaScript the GUI's handlers run, so either path changes the same state.

The episode ends when the agent calls ``done()`` (or ``answer("...")`` for question tasks), or, in an app
whose page commits (``widgets``: its OK/Save/Finish button), when the page has committed. The app state
is then read from the page (``window.app.getState()``) and scored by the app's pure verifier over that
state (:func:`rlvr_gym_web.desktop.apps.verify`). Reaching the turn limit ends it with reward 0. Apps that
list their page's actions (``widgets``) put them in ``info["admissible_actions"]`` at reset and after each
step that does not end the episode.

``web/Widgets-v0`` (app ``widgets``, :mod:`rlvr_gym_web.desktop.widgets`) runs without the URL and title
lines (``page_header=False``): generated one-record edits whose pages fit a tiny model's context.

Version History:
    v0: first version.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlvr_gym.core import StepResult
from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.actions import Action
from rlvr_gym_web.base import BrowserEnv, ToolError
from rlvr_gym_web.desktop import apps
from rlvr_gym_web.desktop.common import GuiSolver

APPS_DIR = Path(__file__).resolve().parent.parent / "apps"


class DesktopEnv(BrowserEnv):
    """One desktop-like app in Chromium, with GUI and API actions. See the module docstring.

    Args:
        app: ``files``, ``mail``, ``todo``, ``sheet``, ``settings`` or ``widgets``.
        name_targets: the oracle (:meth:`oracle_action`) and ``info["admissible_actions"]`` name elements by
            accessible name (``click("OK")``), not by id; the env takes either form from any agent. Only for
            the apps in :data:`rlvr_gym_web.desktop.apps.NAME_TARGET_APPS`.
        **kwargs: passed to :class:`rlvr_gym_web.base.BrowserEnv`.

    Raises:
        ValueError: for an unknown app, or ``name_targets`` for an app whose solver names ids only.

    Version History:
        v0: first version.
    """

    max_turns = 30
    page_state_js = "() => window.app === undefined ? null : window.app.getState()"  # null: the app is not there

    def __init__(self, app: str = "files", name_targets: bool = False, **kwargs: Any) -> None:
        if app not in apps.APPS:
            raise ValueError(f"unknown app {app!r}; apps: {', '.join(apps.APPS)}")
        if name_targets and app not in apps.NAME_TARGET_APPS:
            raise ValueError(f"name_targets: the {app!r} app's solver names elements by id only; apps with names: "
                             f"{', '.join(apps.NAME_TARGET_APPS)}")
        super().__init__(**kwargs)
        self.app = app
        self.name_targets = name_targets
        self.data: dict[str, Any] = {}
        self._oracle: GuiSolver | None = None

    def _open(self, task: Any) -> str:
        self._oracle = None
        if task is None or not task.data:  # no task data: generate a task from the episode seed
            data = apps.generate(self.app, int(self.np_random.integers(0, 2**31 - 1)))
        else:
            data = task.data
            if data.get("app") != self.app:
                raise ValueError(f"task {task.id} is for app {data.get('app')!r}, this env runs {self.app!r}")
        self.data = data
        url = (APPS_DIR / f"{self.app}.html").as_uri()
        if not self.reuse_page:
            self.page.context.add_init_script(f"window.__RLVR_TASK__ = {json.dumps({'state': data['state']})};")
        if self.open_episode_page(url, {"state": data["state"]}):
            return str(data["instruction"])
        if not self.page.evaluate("() => window.app !== undefined"):  # a poll waits for a frame: ~20 ms
            self.page.wait_for_function("() => window.app !== undefined")
        return str(data["instruction"])

    def _reset(self, task: Any) -> tuple[str, dict[str, Any]]:
        observation, info = super()._reset(task)
        self._list_actions(observation, info)
        return observation, info

    def _step(self, action_text: str) -> StepResult:
        result = super()._step(action_text)
        if not result.terminated:
            self._list_actions(result.observation, result.info)
        return result

    def _list_actions(self, observation: str, info: dict[str, Any]) -> None:
        admissible = apps.admissible_actions(self.data, observation, self.name_targets)
        if admissible is not None:
            info["admissible_actions"] = admissible

    def _tool_schemas(self) -> list[dict[str, Any]]:
        return apps.tool_schemas(self.app)

    def _call_tool(self, name: str, args: dict[str, Any]) -> str:
        try:
            result = self.page.evaluate("([tool, args]) => JSON.stringify(window.app.api[tool](args))", [name, args])
        except Exception as error:  # noqa: BLE001 - the page's Error comes back as a Playwright Error
            message = str(error).splitlines()[0].removeprefix("Error: ").removeprefix("Page.evaluate: Error: ")
            raise ToolError(f"api.{name}: {message}") from None
        return str(result)

    def _verdict(self, action: Action | None) -> RewardResult | None:
        if action is None or action.is_api:
            return None
        if action.name not in ("done", "answer"):
            if not apps.ends_on_submit(self.app) or self.page_state is None:
                return None
            return apps.verify(self.data, self.page_state, None) if self.page_state.get("submitted") else None
        if self.page_state is None:  # done() on a page that is not the app (go_back() to about:blank)
            raise RuntimeError(f"the {self.app} app is not on the page; its state cannot be read")
        return apps.verify(self.data, self.page_state, action.args.get("text"))

    def oracle_action(self) -> str:
        """The scripted GUI solver's next action for the current observation (an expert for behaviour
        cloning). Call it once per turn, from the first turn of the episode on.

        Raises:
            RuntimeError: before ``reset``.
        """
        if not self._started:
            raise RuntimeError("oracle_action() needs an episode; call reset() first")
        if self._oracle is None:
            self._oracle = apps.gui_solver(self.data, self.name_targets)
            next(self._oracle)
        try:
            return self._oracle.send(self.last_observation)
        except StopIteration:
            return "done()"

    def app_state(self) -> dict[str, Any]:
        """The app's current state, as the verifier will see it."""
        return dict(self.page.evaluate("() => window.app.getState()"))
