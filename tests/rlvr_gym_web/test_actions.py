"""The web action grammar: literals only, whitelisted names, arity and types checked, never executed."""

from __future__ import annotations

import pytest
from rlvr_gym_web.actions import Action, ActionParseError, parse_action

TOOLS = {"move_file": ["path", "folder"], "delete_file": ["path"]}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('click("12")', Action("click", {"bid": "12"})),
        ("click(12)", Action("click", {"bid": "12"})),
        ("  fill('7', 'hello world')  ", Action("fill", {"bid": "7", "value": "hello world"})),
        ('press(bid="7", key="Enter")', Action("press", {"bid": "7", "key": "Enter"})),
        ('select_option("3", "Blue")', Action("select_option", {"bid": "3", "options": ["Blue"]})),
        ('select_option("3", ["A", "B"])', Action("select_option", {"bid": "3", "options": ["A", "B"]})),
        ("scroll(0, -300.5)", Action("scroll", {"delta_x": 0, "delta_y": -300.5})),
        ("done()", Action("done", {})),
        ('```python\nanswer("42")\n```', Action("answer", {"text": "42"})),
        ("api.move_file('/a.txt', folder='/B')", Action("move_file", {"path": "/a.txt", "folder": "/B"}, True)),
    ],
)
def test_valid_actions_parse(text: str, expected: Action) -> None:
    assert parse_action(text, TOOLS) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("click(", "not a single Python-like call"),
        ("1 + 2", "must be one call"),
        ('clik("1")', "unknown action 'clik'"),
        ('__import__("os").system("rm -rf /")', "call an action by name"),
        ('click(__import__("os"))', "not a literal"),
        ("click(x)", "not a literal"),
        ('click("1", "2")', "takes 1 argument"),
        ('fill("1")', "missing value"),
        ('fill("1", value="a", value2="b")', "no argument 'value2'"),
        ('click("1", bid="2")', "got 'bid' twice"),
        ("click(True)", "element id must be a string"),
        ('fill("1", 5)', "value must be a string"),
        ('scroll("a", 1)', "two numbers"),
        ("click(*ids)", "*args"),
        ("api.rm('/')", "unknown tool api.rm"),
        ("os.system('ls')", "call an action by name"),
        ("x" * 5000, "limit is 4000"),
    ],
)
def test_malformed_actions_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ActionParseError, match=message.replace("(", r"\(").replace("*", r"\*")):
        parse_action(text, TOOLS)


def test_api_calls_need_tools() -> None:
    with pytest.raises(ActionParseError, match="no API tools"):
        parse_action("api.delete_file('/a')", None)


@pytest.mark.parametrize(
    ("url", "allowed"),
    [
        ("file:///site/a.html", True),
        ("file:///site/sub/b.html?x=1", True),
        ("file:///site/../etc/passwd", False),
        ("file:///site/%2e%2e/etc/passwd", False),
        ("file:///sitex/a.html", False),
        ("https://example.com/", False),
        ("javascript:alert(1)", False),
        ("file:///site", True),
    ],
)
def test_url_allowed_normalises_the_path(url: str, allowed: bool) -> None:
    from rlvr_gym_web.actions import url_allowed

    assert url_allowed(url, ["file:///site/"]) is allowed
