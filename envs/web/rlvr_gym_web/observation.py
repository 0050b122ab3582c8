"""Reading web observations back: parse the element lines into nodes (for scripted agents, tests and actions
that name an element by its accessible name instead of its id).

An element line looks like ``  [12] button 'Delete a.txt' disabled``: two spaces per depth, the element id in
brackets, the role, the quoted accessible name (optional) and properties (``value='...'``, ``checked``,
``unchecked``, ``selected``, ``disabled``, ``focused``).
"""

from __future__ import annotations

import dataclasses
import re

_LINE = re.compile(r"^(?P<indent> *)\[(?P<bid>[^\]]+)\] (?P<role>\S+)(?: '(?P<name>(?:[^'\\]|\\.)*)')?(?P<rest>.*)$")
_VALUE = re.compile(r"value='((?:[^'\\]|\\.)*)'")


@dataclasses.dataclass(frozen=True)
class Node:
    """One element of the observation.

    Attributes:
        bid: the element id to use in actions.
        role: ``button``, ``textbox``, ``cell``, ...
        name: the accessible name ('' when none).
        depth: nesting level (0 = top).
        props: properties after the name (``checked``, ``disabled``, ...), value excluded.
        value: the ``value='...'`` property, or None.
        parent: index of the parent node in the list, or None.
    """

    bid: str
    role: str
    name: str
    depth: int
    props: tuple[str, ...]
    value: str | None
    parent: int | None


def _unescape(text: str) -> str:
    return text.replace("\\'", "'")


def parse_tree(observation: str) -> list[Node]:
    """Returns the element lines of ``observation`` as nodes, in page order; other lines are skipped."""
    nodes: list[Node] = []
    stack: list[int] = []
    for line in observation.splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        depth = len(match["indent"]) // 2
        del stack[depth:]
        rest = match["rest"]
        value = _VALUE.search(rest)
        props = tuple(p for p in _VALUE.sub("", rest).split() if p)
        nodes.append(Node(match["bid"], match["role"], _unescape(match["name"] or ""), depth, props,
                          _unescape(value.group(1)) if value else None, stack[-1] if stack else None))
        stack.append(len(nodes) - 1)
    return nodes


def find(nodes: list[Node], role: str | None = None, name: str | None = None, *, contains: str | None = None,
         within: int | None = None) -> list[int]:
    """Indices of the nodes with ``role`` and exactly ``name`` (or a name containing ``contains``), optionally
    only descendants of node ``within``."""
    found = []
    for index, node in enumerate(nodes):
        if role is not None and node.role != role:
            continue
        if name is not None and node.name != name:
            continue
        if contains is not None and contains not in node.name:
            continue
        if within is not None and not _descends(nodes, index, within):
            continue
        found.append(index)
    return found


def _descends(nodes: list[Node], index: int, ancestor: int) -> bool:
    parent = nodes[index].parent
    while parent is not None:
        if parent == ancestor:
            return True
        parent = nodes[parent].parent
    return False


ACTIONABLE_ROLES = frozenset({"button", "link", "checkbox", "radio", "switch", "textbox", "searchbox", "combobox",
                              "listbox", "option", "tab", "menuitem", "slider", "spinbutton", "clickable"})
"""The roles an action may name by accessible name (:func:`named`): what a user can click, type into or pick."""


def named(nodes: list[Node], name: str) -> list[int]:
    """Indices of the actionable nodes (:data:`ACTIONABLE_ROLES`) whose name is exactly ``name`` as the
    observation shows it (whitespace collapsed, long names clipped): the elements an action's ``bid`` argument
    names when it is not an element id (``click("OK")``), in the spirit of Playwright's
    ``get_by_role(role, name=..., exact=True)``. A heading, a dialog or a text line of the same name is not a
    match."""
    return [i for i, node in enumerate(nodes) if node.name == name and node.role in ACTIONABLE_ROLES]


def target_of(nodes: list[Node], index: int, by_name: bool) -> str:
    """What an action writes to address ``nodes[index]``: its id, or with ``by_name`` its accessible name when
    that name picks it alone (:func:`named`) and cannot be read as an id (an env reads a target that is an id in
    the observation or on the page as that id: a name such as ``"3"`` may be another element's id), else its id."""
    node = nodes[index]
    if not by_name or not node.name or node.name.isdigit() or any(other.bid == node.name for other in nodes):
        return node.bid
    return node.name if named(nodes, node.name) == [index] else node.bid


def bid_of(nodes: list[Node], role: str | None = None, name: str | None = None, **kwargs: object) -> str:
    """The element id of the first matching node.

    Raises:
        LookupError: when nothing matches.
    """
    found = find(nodes, role, name, **kwargs)  # type: ignore[arg-type]
    if not found:
        raise LookupError(f"no {role or 'element'} named {name or kwargs} in the observation")
    return nodes[found[0]].bid
