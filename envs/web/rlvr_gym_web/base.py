"""The browser env base: one fresh page per episode, text observations with element ids, whitelisted actions.

Subclasses say how to open a task (:meth:`BrowserEnv._open`) and how to tell that it is over and what it
earned (:meth:`BrowserEnv._verdict`); optionally they declare API tools (:meth:`BrowserEnv._tool_schemas`,
:meth:`BrowserEnv._call_tool`). Everything else is here: browser contexts, seeding, observation, actions,
failures, forking and clean-up.

Determinism: each episode runs in a new browser context (with ``reuse_page``: a page of the browser host's shared
context, opened the same way, where each episode loads its page again or restarts its app in place) with a fixed
viewport (800x600), locale (en-US), timezone (UTC) and clock (``Date`` fixed at :data:`FIXED_TIME`, timers still
run), and ``Math.random`` replaced before any page script by a generator seeded from the episode seed (mulberry32).

Forking replays the action history on a new page of the same browser (:meth:`rlvr_gym.Env.fork_by_replay`).
Cost: one reset (about 0.25-0.4 s for a new context and a page load, 0.1 s for a page load with ``reuse_page``,
0.02 s for an app restarted in place, ``benchmarks/widgets_env.py``) plus one step per past turn (about
15-60 ms each for our apps and MiniWoB, more for actions that wait on the page).
"""

from __future__ import annotations

import contextlib
import json
import urllib.parse
from pathlib import Path
from typing import Any, ClassVar

from rlvr_gym.core import Env, StepResult
from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.actions import Action, ActionParseError, parse_action, url_allowed
from rlvr_gym_web.browser import BrowserHost, acquire_browser, keep_browser_warm, release_browser
from rlvr_gym_web.observation import Node, named, parse_tree

FIXED_TIME = "2024-03-15T10:00:00Z"


def _bid_selector(bid: str) -> str:
    """The CSS selector of the element whose ``data-bid`` is ``bid`` (quotes and backslashes escaped)."""
    return '[data-bid="' + bid.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\a ") + '"]'


_OBSERVE_JS = (Path(__file__).parent / "js" / "observe.js").read_text(encoding="utf-8")
_SEEDED_RANDOM_JS = """(seed) => {
  let a = seed >>> 0;
  Math.random = function () {  // mulberry32
    a = (a + 0x6D2B79F5) >>> 0; let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1); t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}"""
_SEED_JS = "(" + _SEEDED_RANDOM_JS + ")(%d);"
# What an element action needs to know before Playwright acts, in one round trip, for the first element the CSS
# selector matches in the page (null when none):
# - optionOf: [list id, option label] when the element is an <option> of a drop-down <select> (never actionable
#   alone: a list box, multiple or with size > 1, lets its options be clicked), else null;
# - list: {multiple, options: [[value, label], ...]} of a <select> (labels with whitespace collapsed, as
#   Playwright compares them), else null;
# - clear: what Playwright's actionability checks wait for holds now, for the element itself, and cannot change
#   while nothing moves: the element is not one Playwright retargets (a label's text, a child of a button,
#   checkbox or radio), it is visible, enabled and not read-only (aria-disabled / aria-readonly on it or an
#   ancestor counted, any case), no CSS animation or transition runs in the document or in the open shadow roots
#   above it, it is one box wholly inside the viewport and inside every clipping ancestor (Playwright scrolls
#   nothing), and the topmost element at its centre is it or inside it: then [x, y], that centre in CSS pixels
#   (where a forced click puts the mouse), else false. Motion driven from JavaScript (timers,
#   requestAnimationFrame) is not seen: envs whose pages may do that keep Playwright's checks;
# - navigates: a click on it may load another page (inside a link, or a form's submit button): Playwright's click,
#   which waits for a navigation it starts, not the bare mouse.
_PREFLIGHT_JS = """(selector) => {
  const el = document.querySelector(selector);
  if (!el) return null;
  const list = el.tagName === 'OPTION' ? el.closest('select') : null;
  const optionOf = !list || list.multiple || list.size > 1 ? null
    : [list.getAttribute('data-bid') || '', (el.label || el.textContent || '').trim()];
  const options = el.tagName !== 'SELECT' ? null : {
    multiple: el.multiple,
    options: [...el.options].map((o) => [o.value, o.label.trim().replace(/\\s+/g, ' ')]),
  };
  const navigates = el.closest('a[href], area[href]') !== null || (el.form != null && ['submit', 'image'].includes(el.type));
  return {optionOf, list: options, clear: isClear(), navigates};

  function flagged(name) {
    for (let a = el; a; a = a.parentElement) if ((a.getAttribute(name) || '').toLowerCase() === 'true') return true;
    return false;
  }
  function isClear() {
    const control = el.matches('input, textarea, select, button') || el.isContentEditable;
    const owner = el.closest('button, [role=button], [role=checkbox], [role=radio]');
    if (!control && ((owner !== null && owner !== el) || el.closest('label') !== null)) return false;
    if (el.matches(':disabled') || el.readOnly || flagged('aria-disabled') || flagged('aria-readonly')) return false;
    if (document.getAnimations().length) return false;
    for (let a = el; a; a = a.parentElement) if (a.shadowRoot && a.shadowRoot.getAnimations().length) return false;
    const boxes = el.getClientRects();
    if (boxes.length !== 1 || getComputedStyle(el).visibility !== 'visible') return false;
    const box = boxes[0];
    if (box.width <= 0 || box.height <= 0 || box.left < 0 || box.top < 0 || box.right > window.innerWidth ||
        box.bottom > window.innerHeight) return false;
    for (let a = el.parentElement; a; a = a.parentElement) {
      const style = getComputedStyle(a);
      if (style.overflowX === 'visible' && style.overflowY === 'visible') continue;
      const clip = a.getBoundingClientRect();
      if (box.left < clip.left || box.top < clip.top || box.right > clip.right || box.bottom > clip.bottom) return false;
    }
    const x = box.left + box.width / 2, y = box.top + box.height / 2, top = document.elementFromPoint(x, y);
    return top !== null && (top === el || el.contains(top)) ? [x, y] : false;
  }
}"""
# The element actions whose Playwright call takes ``force`` (skip the actionability checks).
_FORCEABLE = frozenset({"click", "dblclick", "hover", "fill", "clear", "select_option"})
EPISODE_PARAM = "rlvr_episode"
# reuse_page: one init script per context reads the episode's seed (and task, for apps that take one) from the
# page URL's query, which every episode's goto sets (BrowserEnv.episode_url).
_EPISODE_JS = """(() => {
  const raw = new URLSearchParams(location.search).get('rlvr_episode');
  if (raw === null) return;
  const episode = JSON.parse(raw);
  if (episode.task !== null) window.__RLVR_TASK__ = episode.task;
  (""" + _SEEDED_RANDOM_JS + """)(episode.seed);
})();"""


# reuse_page with restart_in_place: the next episode in the open page, without loading it again, for a page whose
# app can make its whole state again (window.app.restart, apps/common.js). What a load would reset and the agent could
# see or act on is reset too: the URL (the episode's, so a reload gives this episode), the task, the seeded
# Math.random, focus, selection, scroll and the numbering of unmarked elements; the app puts its body back as loaded
# and makes its state again. Returns false (nothing changed) when the page has no restart.
_RESTART_JS = """([url, seed, task]) => {
  if (!window.app || typeof window.app.restart !== 'function') return false;
  history.replaceState(null, '', url);
  if (task === null) delete window.__RLVR_TASK__; else window.__RLVR_TASK__ = task;
  (""" + _SEEDED_RANDOM_JS + """)(seed);
  if (document.activeElement && document.activeElement !== document.body) document.activeElement.blur();
  getSelection().removeAllRanges();
  window.scrollTo(0, 0);
  delete window.__rlvrNextBid;  // observe.js numbers unmarked elements from 1 again, as on a fresh load
  window.app.restart();
  return true;
}"""


def _prepare_reused_context(context: Any) -> None:
    """What every context of ``reuse_page`` envs needs: the fixed clock and the episode script."""
    context.clock.set_fixed_time(FIXED_TIME)
    context.add_init_script(_EPISODE_JS)


class InvalidActionError(ValueError):
    """A well-formed action that cannot apply here (unknown element id, URL outside the allowed origins)."""


class ToolError(InvalidActionError):
    """An API tool ran and reported an error (bad path, unknown id, malformed value)."""


class BrowserEnv(Env):
    """Base class of the web envs. See the module docstring.

    Args:
        max_turns: turn limit.
        action_timeout_s: how long one action may wait for its element (Playwright's timeout), in seconds.
        max_tree_lines: the page text is cut after this many element lines.
        screenshot_dir: when set, every observation also saves a PNG there and puts its path in
            ``info["screenshot_path"]``.
        page_header: show the ``URL:`` and ``Title:`` lines; False for generated one-page apps, where they
            say nothing new and cost ~25 tokens a page.
        reuse_page: keep one page for the env's life and start each episode by loading the task's
            page again in it, or restarting its app there (``restart_in_place``; the subclass calls
            :meth:`open_episode_page`): a reset costs one page load instead of a new context and renderer process
            (about 4x less, ``benchmarks/widgets_env.py``); the env's first page opens in the browser host's
            shared context (:meth:`rlvr_gym_web.browser.BrowserHost.shared_context`: ~0.15 s, not ~0.6 s for a
            context of its own, 64 at once). The pages show
            the same text; what an episode could see of the last one is closed off: ``go_back`` never leaves
            the episode's first page. Cookies and storage are kept, so only for apps that use none (ours).
            Needs ``page_header=False`` (the URL carries the episode's seed and task), and an app that does not
            navigate within an episode (Chromium keeps at most 50 history entries, so the ``go_back`` guard
            cannot count past that). A closed env parks its
            page in the process's browser host for the next such env (an env per episode, as the trainer,
            the evaluation and the demonstrations make them, gains as much).
        restart_in_place: with ``reuse_page``, a page whose app can make its whole state again
            (``window.app.restart``, ``apps/common.js``; the widgets app) starts the next episode without loading
            the page again (:data:`_RESTART_JS`): its URL, task, seeded ``Math.random``, focus, selection and scroll
            are set as a load would set them. A reset then costs one page evaluation instead of a page load
            (``benchmarks/widgets_env.py``). False: every episode loads its page.
        strict_actionability: every element action waits for Playwright's actionability checks (visible,
            stable, enabled, receiving events). When False, an action skips them (``force=True``) where one look at
            the page shows they hold and cannot change while nothing moves (:data:`_PREFLIGHT_JS`); their
            stability wait alone costs two animation frames. None: the class's :attr:`strict_by_default` (False;
            True for MiniWoB's pages).

    Raises:
        ValueError: ``action_timeout_s`` <= 0, or ``reuse_page`` with ``page_header``.

    Version History:
        v0: first version.
    """

    max_turns = 20
    supports_fork: ClassVar[bool] = True
    strict_by_default: ClassVar[bool] = False
    """``strict_actionability`` when the constructor is not told: True for envs whose pages may move elements from
    JavaScript, which one look at the page cannot see."""
    page_state_js: ClassVar[str | None] = None
    """A JavaScript function of no arguments that each observation's page evaluation also runs, its result kept as
    :attr:`page_state` (one round trip for both; the desktop apps read their state there for the verdict)."""

    def __init__(
        self,
        max_turns: int | None = None,
        action_timeout_s: float = 3.0,
        max_tree_lines: int = 300,
        screenshot_dir: str | None = None,
        render_mode: str | None = None,
        page_header: bool = True,
        reuse_page: bool = False,
        restart_in_place: bool = True,
        strict_actionability: bool | None = None,
    ) -> None:
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        if action_timeout_s <= 0:
            raise ValueError(f"action_timeout_s must be > 0, got {action_timeout_s}")
        if reuse_page and page_header:
            raise ValueError("reuse_page needs page_header=False: the page URL carries the episode's seed and task")
        self.reuse_page = reuse_page
        self.restart_in_place = restart_in_place
        self.strict_actionability = self.strict_by_default if strict_actionability is None else strict_actionability
        self.episode_seed = 0
        self._history_start = 0
        self.action_timeout_s = action_timeout_s
        self.max_tree_lines = max_tree_lines
        self.screenshot_dir = Path(screenshot_dir) if screenshot_dir else None
        self.page_header = page_header
        self._host: BrowserHost | None = None
        self._context: Any = None
        self.page: Any = None
        self.goal = ""
        self._shots = 0
        self._seen: tuple[list[str], list[Node] | None] = ([], [])  # the last observation's element lines, parsed
        self.page_state: Any = None
        """What :attr:`page_state_js` returned at the last observation (None without it)."""

    # -- hooks ----------------------------------------------------------------------------------------
    def _open(self, task: Any) -> str:
        """Loads the task's page in ``self.page`` and returns the goal text."""
        raise NotImplementedError

    def _verdict(self, action: Action | None) -> RewardResult | None:
        """After each action, once the page's observation is read (:attr:`page_state` is the page's state then): the
        episode's reward when it is over (task finished, ``answer``/``done`` called), else None."""
        raise NotImplementedError

    def _allowed_origins(self) -> tuple[str, ...]:
        """URL prefixes ``goto`` may open."""
        return ()

    def episode_url(self, url: str, task_data: Any = None) -> str:
        """The URL ``_open`` loads: ``url`` itself, or with ``reuse_page`` ``url`` with the episode's seed and
        ``task_data`` (JSON, set as ``window.__RLVR_TASK__`` before the page's scripts run) in its query."""
        if not self.reuse_page:
            return url
        episode = json.dumps({"seed": self.episode_seed, "task": task_data}, separators=(",", ":"))
        return f"{url}?{urllib.parse.urlencode({EPISODE_PARAM: episode})}"

    def open_episode_page(self, url: str, task_data: Any = None) -> bool:
        """Shows the episode's page (``_open`` calls it): with ``reuse_page``, the page at ``url`` with the
        episode's seed and ``task_data`` (:meth:`episode_url`), restarted in place when the page already shows
        ``url`` and its app can restart (``restart_in_place``), else loaded; without ``reuse_page``, ``url`` loaded.

        Returns:
            True when the page restarted in place (no load: the app is there), False when it was loaded.
        """
        target = self.episode_url(url, task_data)
        if (self.reuse_page and self.restart_in_place and self.page.url.split("?", 1)[0] == url
                and self.page.evaluate(_RESTART_JS, [target, self.episode_seed, task_data])):
            return True
        self.page.goto(target)
        return False

    def _tool_schemas(self) -> list[dict[str, Any]]:
        """OpenAI-style JSON schemas of the task's API tools (empty: no tools)."""
        return []

    def _call_tool(self, name: str, args: dict[str, Any]) -> str:
        """Runs one API tool and returns its result as text (raise ``InvalidActionError`` on misuse)."""
        raise InvalidActionError(f"unknown tool {name}")

    # -- Env hooks ------------------------------------------------------------------------------------
    def _reset(self, task: Any) -> tuple[str, dict[str, Any]]:
        if not (self.reuse_page and self.page is not None and not self.page.is_closed() and self._browser_alive()):
            self._close_context()
            if self._host is None:
                self._host = acquire_browser()
            parked = self._host.take_parked() if self.reuse_page else None
            if parked is not None:  # another reuse_page env's, closed since: ours now
                self._context, self.page = parked
            elif self.reuse_page:  # a page of the host's shared context (kept only once the page opened)
                shared = self._host.shared_context(_prepare_reused_context)
                self.page = shared.new_page()
                self._context = shared
            else:
                self._context = self._host.new_context()
                self._context.clock.set_fixed_time(FIXED_TIME)
                self.page = self._context.new_page()
            self.page.set_default_timeout(self.action_timeout_s * 1000)
        self.episode_seed = int(self.np_random.integers(0, 2**32 - 1))
        if not self.reuse_page:
            self._context.add_init_script(_SEED_JS % self.episode_seed)
        self.goal = self._open(task)
        if self.reuse_page:
            self._history_start = int(self.page.evaluate("() => history.length"))
        info: dict[str, Any] = {"goal": self.goal}
        if self._tool_schemas():
            info["tools"] = self._tool_schemas()
        return self._observe(info), info

    def _step(self, action_text: str) -> StepResult:
        info: dict[str, Any] = {}
        try:
            action = parse_action(action_text, self._tool_params())
        except ActionParseError as error:
            info["failure"] = Failure(FailureKind.PARSE_ERROR, str(error), {"action": action_text[:500]})
            try:
                observation = self._observe(info, error=f"Invalid action: {error}")
            except Exception as crash:  # noqa: BLE001 - the browser died since the last step
                return self._crash(crash)
            return StepResult(observation, 0.0, False, False, info)
        note = ""
        try:
            note = self._apply(action)
        except ToolError as error:
            info["failure"] = Failure(FailureKind.TOOL_ERROR, str(error), {"action": action_text[:500]})
            note = f"Tool error: {error}"
        except InvalidActionError as error:
            info["failure"] = Failure(FailureKind.INVALID_ACTION, str(error), {"action": action_text[:500]})
            note = f"Invalid action: {error}"
        except Exception as error:  # noqa: BLE001 - Playwright raises plain Error/TimeoutError subclasses
            if not self._browser_alive():
                return self._crash(error)
            kind = FailureKind.TIMEOUT if "Timeout" in type(error).__name__ else FailureKind.INVALID_ACTION
            message = str(error).splitlines()[0][:300]
            info["failure"] = Failure(kind, message, {"action": action_text[:500]})
            note = f"The action failed: {message}"
        return self._finish_step(action, note, info)

    def _finish_step(self, action: Action, note: str, info: dict[str, Any]) -> StepResult:
        try:
            observation = self._observe(info, error=note)
            verdict = self._verdict(action)
        except Exception as error:  # noqa: BLE001 - a crashed page or browser ends the episode
            return self._crash(error)
        if verdict is None:
            return StepResult(observation, 0.0, False, False, info)
        info["reward_details"], info["success"] = verdict.to_dict(), verdict.success
        return StepResult(observation, verdict.value, True, False, info)

    def _crash(self, error: Exception) -> StepResult:
        failure = Failure(FailureKind.ENV_CRASH, f"the browser failed: {str(error).splitlines()[0][:300]}")
        return StepResult(f"The browser crashed: {failure.message}. The episode is over.", 0.0, True, False,
                          {"failure": failure, "success": False})

    # -- actions --------------------------------------------------------------------------------------
    def _tool_params(self) -> dict[str, list[str]] | None:
        schemas = self._tool_schemas()
        if not schemas:
            return None
        return {s["function"]["name"]: list(s["function"]["parameters"]["properties"]) for s in schemas}

    def _apply(self, action: Action) -> str:
        """Performs ``action`` on the page; returns a note for the observation (tool results)."""
        if action.is_api:
            return f"Tool result: {self._call_tool(action.name, action.args)}"
        name, args = action.name, action.args
        if name in ("answer", "done", "noop"):
            return ""
        if name == "scroll":
            self.page.mouse.wheel(float(args["delta_x"]), float(args["delta_y"]))
        elif name == "goto":
            self._goto(args["url"])
        elif name == "go_back":
            if not self.reuse_page or int(self.page.evaluate("() => history.length")) > self._history_start:
                self.page.go_back()  # a reused page's history holds the last episodes' pages: not theirs to visit
        else:
            self._element_action(name, args)
        if name in ("click", "dblclick", "press", "goto", "go_back"):  # the actions that may load a page
            with contextlib.suppress(Exception):
                self.page.wait_for_load_state("domcontentloaded", timeout=self.action_timeout_s * 1000)
        return ""

    def _locate(self, target: str) -> tuple[Any, dict[str, Any]]:
        """The Playwright locator of the element ``target`` names, and the page's facts about it
        (:data:`_PREFLIGHT_JS`): by its id, else by its accessible name among the elements a user can act on
        (:func:`rlvr_gym_web.observation.named`). A name that the last observation shows on exactly one element,
        and no id there, is that element while the page still holds it (what the agent saw it named: one page
        evaluation, not three); any other target is read from the page now.

        Raises:
            InvalidActionError: no element has that id or name, or several have that name.
        """
        seen = self._seen_nodes()
        if not any(node.bid == target for node in seen):
            found = named(seen, target)
            if len(found) == 1:
                facts = self.page.evaluate(_PREFLIGHT_JS, _bid_selector(seen[found[0]].bid))
                if facts is not None:
                    return self.page.locator(_bid_selector(seen[found[0]].bid)).first, facts
        facts = self.page.evaluate(_PREFLIGHT_JS, _bid_selector(target))
        if facts is not None:
            return self.page.locator(_bid_selector(target)).first, facts
        nodes = parse_tree("\n".join(self.page.evaluate(_OBSERVE_JS, self.max_tree_lines)["lines"]))
        found = named(nodes, target)
        if not found and target.isdigit():
            raise InvalidActionError(f"no element with id {target!r} on the page; use an id in brackets")
        if not found:
            raise InvalidActionError(f"no element with id or name {target!r} on the page; use an id in brackets "
                                     f"or the exact name of a button, link, field, option or tab")
        if len(found) > 1:
            listed = ", ".join(f"[{nodes[i].bid}] {nodes[i].role}" for i in found)
            raise InvalidActionError(f"{len(found)} elements are named {target!r} ({listed}); use an id in brackets")
        bid = nodes[found[0]].bid
        facts = self.page.evaluate(_PREFLIGHT_JS, _bid_selector(bid))
        if facts is None:  # read a moment ago: the page removed it since
            raise InvalidActionError(f"the element named {target!r} left the page")
        return self.page.locator(_bid_selector(bid)).first, facts

    def _seen_nodes(self) -> list[Node]:
        """The element lines of the last observation, parsed (once per observation)."""
        lines, nodes = self._seen
        if nodes is None:
            nodes = parse_tree("\n".join(lines))
            self._seen = (lines, nodes)
        return nodes

    @staticmethod
    def _check_options(offered: dict[str, Any] | None, target: str, wanted: list[str]) -> None:
        """Refuses at once a ``select_option`` that Playwright would wait out its timeout for: on a ``<select>``
        (``offered``: its ``list`` fact from :data:`_PREFLIGHT_JS`), no wanted string is an option's value or label
        (a single-choice list takes the first that is; a multiple-choice list needs them all). Labels compare with
        whitespace collapsed, as Playwright does.

        Raises:
            InvalidActionError: naming the options the list has.
        """
        if offered is None:  # not a <select>: Playwright says so itself
            return
        known = {text for pair in offered["options"] for text in pair}
        found = [" ".join(w.split()) in known or w in known for w in wanted]
        if all(found) or (any(found) and not offered["multiple"]):
            return
        missing = wanted[found.index(False)]
        listed = ", ".join(repr(label) for _, label in offered["options"])
        raise InvalidActionError(f"{missing!r} is not an option of {target!r}; its options: {listed}")

    def _element_action(self, name: str, args: dict[str, Any]) -> None:
        """Performs an element action with Playwright. Where the page shows the element clear
        (:data:`_PREFLIGHT_JS`) and ``strict_actionability`` is off, the action skips Playwright's actionability
        checks (``force=True``; a widgets step: ~25 ms against ~47 ms, medians, ``benchmarks/widgets_env.py``);
        otherwise Playwright waits for them as usual, up to ``action_timeout_s``."""
        element, facts = self._locate(args["bid"])
        if name != "select_option" and facts["optionOf"] is not None:  # Playwright would wait its whole timeout
            list_id, label = facts["optionOf"]
            call = f"select_option({json.dumps(list_id or args['bid'])}, {json.dumps(label)})"
            raise InvalidActionError(f"{args['bid']!r} is an option of a drop-down list and cannot be used with "
                                     f"{name}(); use {call}")
        clear = facts["clear"] and name in _FORCEABLE and not self.strict_actionability
        force = {"force": True} if clear else {}
        if name == "fill":
            element.fill(args["value"], **force)
        elif name == "press":
            element.press(args["key"])
        elif name == "select_option":  # Playwright matches each string against option values and labels
            self._check_options(facts["list"], args["bid"], args["options"])
            element.select_option(args["options"], **force)
        elif name == "click" and clear and not facts["navigates"]:  # as a forced click: the mouse at the centre
            self.page.mouse.click(*facts["clear"])
        else:
            getattr(element, name)(**force)

    def _goto(self, url: str) -> None:
        allowed = self._allowed_origins()
        if not url_allowed(url, allowed):
            raise InvalidActionError(f"goto({url!r}) is outside the allowed sites: {', '.join(allowed) or 'none'}")
        self.page.goto(url)

    # -- observation ----------------------------------------------------------------------------------
    def _observe(self, info: dict[str, Any], error: str = "") -> str:
        if self.page_state_js is None:
            tree = self.page.evaluate(_OBSERVE_JS, self.max_tree_lines)
        else:
            tree = self.page.evaluate(f"(n) => ({{...({_OBSERVE_JS})(n), state: ({self.page_state_js})()}})",
                                      self.max_tree_lines)
        self.page_state = tree.get("state")
        self._seen = (tree["lines"], None)
        lines = [f"Goal: {self.goal}"]
        if self.page_header:
            lines += [f"URL: {self.page.url}", f"Title: {tree['title']}"]
        if error:
            lines.append(error)
        lines.append("Page:")
        lines.extend(tree["lines"])
        if tree["truncated"]:
            lines.append(f"... (page cut after {self.max_tree_lines} elements; scroll or act to see more)")
        if self.screenshot_dir is not None:
            info["screenshot_path"] = self.screenshot()
        return "\n".join(lines)

    def screenshot(self, path: str | Path | None = None) -> str:
        """Saves a PNG of the current page (to ``path`` or under ``screenshot_dir``) and returns its path."""
        if path is None:
            folder = self.screenshot_dir or Path(".")
            folder.mkdir(parents=True, exist_ok=True)
            self._shots += 1
            path = folder / f"{type(self).__name__}-{id(self):x}-{self._shots:04d}.png"
        self.page.screenshot(path=str(path))
        return str(path)

    def _browser_alive(self) -> bool:
        return bool(self._host and self._host.browser is not None and self._host.browser.is_connected())

    # -- fork and clean-up ----------------------------------------------------------------------------
    def fork(self) -> Env:
        """An independent env in the same state, by replay on a new page (cost: see the module docstring)."""
        return self.fork_by_replay()

    def __deepcopy__(self, memo: dict[int, Any]) -> Env:
        return self.fork_by_replay()

    def _close_context(self) -> None:
        """Closes the episode's context (with ``reuse_page``: its page; the shared context stays), or with
        ``reuse_page`` parks its page in the browser host for the next env of this process
        (:meth:`rlvr_gym_web.browser.BrowserHost.park`): an env per episode, as the trainer makes them, then
        restarts an open page instead of opening one."""
        context, page, self._context, self.page = self._context, self.page, None, None
        if context is None:
            return
        if self.reuse_page and self._host is not None and page is not None and self._browser_alive():
            self._host.park(context, page)
        elif self._host is not None:
            self._host.close_page(context, page)
        else:
            with contextlib.suppress(Exception):
                context.close()

    @classmethod
    def hold_shared_resources(cls) -> contextlib.AbstractContextManager[object]:
        """Keeps the process's Chromium running for the block (:func:`rlvr_gym_web.browser.keep_browser_warm`),
        so the envs made and closed inside it open contexts in one browser instead of relaunching it."""
        return keep_browser_warm()

    def release_episode(self) -> None:
        """Closes (or with ``reuse_page`` parks) the episode's page and context but keeps this env's hold on the
        browser (an env-worker pool calls it when it parks the env for reuse); the next ``reset`` opens a new
        context (with ``reuse_page``: a page of the shared context) or takes a parked page."""
        self._close_context()

    def close(self) -> None:
        """Closes the page and context; the process's browser closes when no env uses it any more."""
        self._close_context()
        if self._host is not None:
            host, self._host = self._host, None
            release_browser(host)
