"""The web action grammar: one Python-like call per turn, parsed with ``ast`` into a whitelist, never executed.

Browser actions (element ids are the numbers in brackets in the observation; ``"12"`` and ``12`` are both
accepted). Where an id is expected, an element's accessible name as the observation shows it may stand instead
(``click("OK")``, ``fill("Email", "a@b.c")``): it must name exactly one element a user can act on (a button, a
link, a form control, an option, a tab, ...; :func:`rlvr_gym_web.observation.named`), in the spirit of
Playwright's ``get_by_role(..., name=..., exact=True)``; a target is read as an id first, and the env says so when
a name names none or several. An option of a drop-down list is picked with ``select_option`` only; the env
refuses another action on it, or an option the list lacks, at once (Playwright would wait out its timeout) and
lists what to use::

    click("12")                  dblclick("12")               hover("12")          focus("12")
    fill("7", "some text")       clear("7")                   press("7", "Enter")
    select_option("3", "Blue")   select_option("3", ["A", "B"])
    scroll(0, 300)               # delta_x, delta_y in pixels
    goto("file:///...")          # only URLs under the task's allowed origins
    go_back()                    noop()
    answer("text")               # submit a final answer and end the episode
    done()                       # declare the task finished and end the episode

API tools (desktop apps only; the schemas are in ``info["tools"]``)::

    api.move_file(path="/Downloads/a.txt", folder="/Documents")     # keywords or positional, in schema order

Arguments must be literals (strings, numbers, booleans, None, lists/dicts of those). A bare call may be
wrapped in a Markdown code fence. Anything else is an :class:`ActionParseError` whose message tells the
agent what was wrong. The grammar follows BrowserGym's ``HighLevelActionSet`` (which ``exec``s the text;
this module does not).
"""

from __future__ import annotations

import ast
import dataclasses
import posixpath
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from rlvr_gym.core import first_invalid_text

# name -> parameter names, in positional order.
BROWSER_ACTIONS: dict[str, tuple[str, ...]] = {
    "click": ("bid",),
    "dblclick": ("bid",),
    "hover": ("bid",),
    "focus": ("bid",),
    "clear": ("bid",),
    "fill": ("bid", "value"),
    "press": ("bid", "key"),
    "select_option": ("bid", "options"),
    "scroll": ("delta_x", "delta_y"),
    "goto": ("url",),
    "go_back": (),
    "noop": (),
    "answer": ("text",),
    "done": (),
}
MAX_ACTION_CHARS = 4000
_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


class ActionParseError(ValueError):
    """The action text is not one whitelisted call with literal arguments. The message says why."""


@dataclasses.dataclass(frozen=True)
class Action:
    """One parsed action.

    Attributes:
        name: the action name (``"click"``) or the tool name for API calls (``"move_file"``).
        args: the arguments by parameter name; element ids are normalised to ``str``.
        is_api: True for ``api.<tool>(...)`` calls.
    """

    name: str
    args: dict[str, Any]
    is_api: bool = False


def parse_action(text: str, tools: Mapping[str, Sequence[str]] | None = None) -> Action:
    """Parses one action.

    Args:
        text: the agent's action text.
        tools: API tool name -> parameter names in order (all required), or None when the env has no tools.

    Returns:
        The parsed :class:`Action`.

    Raises:
        ActionParseError: on anything but one whitelisted call with literal arguments of the right arity.
    """
    source = text.strip()
    fenced = _FENCE.match(source)
    if fenced:
        source = fenced.group(1).strip()
    if not source:
        raise ActionParseError("the action is empty; write one call such as click(\"12\")")
    if len(source) > MAX_ACTION_CHARS:
        raise ActionParseError(f"the action is {len(source)} characters long; the limit is {MAX_ACTION_CHARS}")
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as error:
        raise ActionParseError(f"not a single Python-like call ({error.msg}); write e.g. click(\"12\")") from None
    except (ValueError, RecursionError, MemoryError) as error:  # a NUL byte, invalid Unicode, deep nesting
        raise ActionParseError(f"the action cannot be parsed ({type(error).__name__}: {str(error)[:100]}); "
                               "write one call such as click(\"12\")") from None
    call = tree.body
    if not isinstance(call, ast.Call):
        raise ActionParseError("the action must be one call such as click(\"12\"), not an expression")
    name, is_api = _callee(call.func, tools)
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        raise ActionParseError("*args and **kwargs are not allowed in actions")
    params = tuple(tools[name]) if is_api and tools is not None else BROWSER_ACTIONS[name]
    keywords = {str(k.arg): _literal(k.value) for k in call.keywords}
    args = _bind(name, params, [_literal(a) for a in call.args], keywords)
    bad = first_invalid_text(args)
    if bad is not None:  # a "\\ud800" escape in a literal: no browser or tool can take it
        raise ActionParseError(f"an argument is not valid Unicode ({bad}); escape only whole characters")
    if not is_api:
        _check_browser_types(name, args)
    return Action(name, args, is_api)


def url_allowed(url: str, allowed_prefixes: Sequence[str]) -> bool:
    """Whether ``url``, with its path normalised (``..`` and ``%2e`` resolved), starts with one of the
    allowed prefixes. ``file:///site/../../etc/passwd`` is not under ``file:///site/``."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("file", "http", "https"):
        return False
    path = posixpath.normpath(urllib.parse.unquote(parts.path) or "/")
    if parts.path.endswith("/") and not path.endswith("/"):
        path += "/"
    normalised = urllib.parse.urlunsplit((parts.scheme, parts.netloc, urllib.parse.quote(path), parts.query, ""))
    return any(normalised.startswith(prefix) or normalised + "/" == prefix for prefix in allowed_prefixes)


def _callee(func: ast.expr, tools: Mapping[str, Sequence[str]] | None) -> tuple[str, bool]:
    if isinstance(func, ast.Name):
        if func.id not in BROWSER_ACTIONS:
            known = ", ".join(BROWSER_ACTIONS)
            raise ActionParseError(f"unknown action {func.id!r}; allowed: {known}" + (", api.<tool>(...)" if tools else ""))
        return func.id, False
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "api":
        if not tools:
            raise ActionParseError("this task has no API tools; act through the page")
        if func.attr not in tools:
            raise ActionParseError(f"unknown tool api.{func.attr}; tools: {', '.join(sorted(tools))}")
        return func.attr, True
    raise ActionParseError("call an action by name, e.g. click(\"12\"), or a tool as api.<tool>(...)")


def _literal(node: ast.expr) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        raise ActionParseError(
            f"argument {ast.unparse(node)!r} is not a literal; use quoted strings and numbers"
        ) from None


def _bind(name: str, params: Sequence[str], positional: list[Any], keywords: dict[str, Any]) -> dict[str, Any]:
    signature = f"{name}({', '.join(params)})"
    if len(positional) > len(params):
        raise ActionParseError(f"{signature} takes {len(params)} argument(s), got {len(positional)}")
    args = dict(zip(params, positional))
    for key, value in keywords.items():
        if key not in params:
            raise ActionParseError(f"{signature} has no argument {key!r}")
        if key in args:
            raise ActionParseError(f"{signature} got {key!r} twice")
        args[key] = value
    missing = [p for p in params if p not in args]
    if missing:
        raise ActionParseError(f"{signature} is missing {', '.join(missing)}")
    return args


def _check_browser_types(name: str, args: dict[str, Any]) -> None:
    if "bid" in args:
        bid = args["bid"]
        if isinstance(bid, bool) or not isinstance(bid, (str, int)) or not str(bid).strip():
            raise ActionParseError(f"{name}: the element id must be a string like \"12\", got {bid!r}")
        args["bid"] = str(bid).strip()
    for key in ("value", "key", "url", "text"):
        if key in args and not isinstance(args[key], str):
            raise ActionParseError(f"{name}: {key} must be a string, got {type(args[key]).__name__}")
    if name == "scroll" and not all(isinstance(args[k], (int, float)) and not isinstance(args[k], bool)
                                    for k in ("delta_x", "delta_y")):
        raise ActionParseError("scroll(delta_x, delta_y) takes two numbers of pixels")
    if name == "select_option":
        options = args["options"]
        if isinstance(options, str):
            args["options"] = [options]
        elif not (isinstance(options, list) and all(isinstance(o, str) for o in options)):
            raise ActionParseError("select_option(bid, options): options is a string or a list of strings")
