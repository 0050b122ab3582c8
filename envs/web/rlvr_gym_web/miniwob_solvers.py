"""Scripted solvers for a set of MiniWoB++ pages, reading the goal and the element lines of the observation.

Used to record the gold action sequences of the MiniWoB suite (the element ids they produce depend on the
seed, which fixes the page) and as a reference agent. :data:`SOLVED_PAGES` lists the pages covered.
"""

from __future__ import annotations

import re

from rlvr_gym_web.desktop.common import GuiSolver
from rlvr_gym_web.observation import Node, bid_of, find, parse_tree

_QUOTED = re.compile(r'"([^"]*)"')


def _quoted(goal: str) -> list[str]:
    return _QUOTED.findall(goal)


def _click(nodes: list[Node], role: str, name: str) -> str:
    return f'click("{bid_of(nodes, role, name)}")'


def _textboxes(nodes: list[Node]) -> list[str]:
    return [nodes[i].bid for i in find(nodes, "textbox")]


def _plan(goal: str, nodes: list[Node], page: str) -> list[str]:
    """The whole action sequence for ``page`` from its first observation."""
    words = _quoted(goal)
    if page == "click-test":
        return [_click(nodes, "button", "Click Me!")]
    if page == "click-test-2":
        return [_click(nodes, "button", goal.removeprefix("Click button ").rstrip("."))]
    if page == "click-button":
        return [_click(nodes, "button", words[0])]
    if page == "click-link":
        return [_click(nodes, "clickable", words[0])]
    if page == "click-dialog":
        return [_click(nodes, "button", "Close")]
    if page == "click-tab":
        return [_click(nodes, "tab", goal.removeprefix("Click on ").rstrip("."))]
    if page == "focus-text":
        return [f'click("{_textboxes(nodes)[0]}")']
    if page in ("enter-text", "enter-text-2"):
        text = words[0]
        if page == "enter-text-2":
            text = text.upper() if "upper case" in goal else text.lower()
        return [f'fill("{_textboxes(nodes)[0]}", {text!r})', _click(nodes, "button", "Submit")]
    if page == "enter-password":
        return [f'fill("{bid}", {words[0]!r})' for bid in _textboxes(nodes)] + [_click(nodes, "button", "Submit")]
    if page == "login-user":
        user, password = _textboxes(nodes)
        return [f'fill("{user}", {words[0]!r})', f'fill("{password}", {words[1]!r})', _click(nodes, "button", "Login")]
    if page == "choose-list":
        item = goal.removeprefix("Select ").split(" from the list")[0]
        return [f'select_option("{nodes[find(nodes, "combobox")[0]].bid}", {item!r})', _click(nodes, "button", "Submit")]
    if page == "click-option":
        item = goal.removeprefix("Select ").split(" and click Submit")[0]
        return [_click(nodes, "radio", item), _click(nodes, "button", "Submit")]
    if page == "click-checkboxes":
        listed = goal.removeprefix("Select ").split(" and click Submit")[0]
        items = [] if listed == "nothing" else [w.strip() for w in listed.split(",") if w.strip()]
        return [_click(nodes, "checkbox", item) for item in items] + [_click(nodes, "button", "Submit")]
    raise ValueError(f"no scripted solver for MiniWoB page {page!r}; solved: {', '.join(SOLVED_PAGES)}")


SOLVED_PAGES = (
    "click-test", "click-test-2", "click-button", "click-link", "click-dialog", "click-tab", "focus-text",
    "enter-text", "enter-text-2", "enter-password", "login-user", "choose-list", "click-option", "click-checkboxes",
)


def miniwob_solver(page: str) -> GuiSolver:
    """A :data:`GuiSolver` for ``page``: plans from the first observation, then plays the plan."""
    obs = yield ""
    goal = obs.splitlines()[0].removeprefix("Goal: ")
    for action in _plan(goal, parse_tree(obs), page):
        obs = yield action

