"""Mail client tasks: star by sender, archive by subject, send a message, count unread messages (a question)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.desktop.common import (
    GuiSolver,
    call,
    click,
    fill_until,
    heading,
    run_policy,
    score,
    tool,
    verify_answer,
)
from rlvr_gym_web.observation import find, parse_tree

TOOLS = [
    tool("list_messages", "List the messages of a folder.", folder=("string", "inbox, archive, sent or trash")),
    tool("read_message", "Open a message (marks it read) and return it with its body.", id=("integer", "message id")),
    tool("set_starred", "Star or unstar a message.", id=("integer", "message id"), starred=("boolean", "true to star")),
    tool("move_message", "Move a message to a folder.", id=("integer", "message id"),
         folder=("string", "inbox, archive, sent or trash")),
    tool("send_message", "Send a new message.", to=("string", "address"), subject=("string", "subject line"),
         body=("string", "message text")),
]
SENDERS = ["ann@example.com", "bob@example.org", "carla@work.example", "dev-team@work.example", "news@shop.example"]
TOPICS = ["invoice", "meeting", "lunch", "report", "holiday", "budget", "release", "party"]
SUBJECTS = ["{t} next week", "Re: {t}", "Question about the {t}", "{t} update", "Reminder: {t}"]
KINDS = ("star_from", "archive_subject", "send", "count_unread")


def _messages(rng: np.random.Generator) -> list[dict[str, Any]]:
    messages = []
    for index in range(int(rng.integers(6, 10))):
        topic = str(rng.choice(TOPICS))
        messages.append({
            "id": index + 1, "folder": "inbox", "from": str(rng.choice(SENDERS)), "to": "me@example.com",
            "subject": str(rng.choice(SUBJECTS)).format(t=topic).capitalize(), "body": f"Some words about the {topic}.",
            "read": bool(rng.random() < 0.4), "starred": bool(rng.random() < 0.2),
        })
    return messages


def generate(rng: np.random.Generator, kind: str) -> dict[str, Any]:
    """Task data: ``instruction``, ``state``, ``expect``, ``api_gold`` and ``wrong``."""
    messages = _messages(rng)
    state = {"me": "me@example.com", "messages": messages}
    expect: dict[str, Any] = {m["id"]: {"folder": m["folder"], "starred": m["starred"]} for m in messages}
    sender = str(rng.choice([m["from"] for m in messages]))
    if kind == "star_from":
        targets = [m["id"] for m in messages if m["from"] == sender]
        text = f"Star every message in the inbox from {sender} (leave the others as they are)."
        for i in targets:
            expect[i]["starred"] = True
        gold = [call("set_starred", id=i, starred=True) for i in targets if not expect_was(messages, i, "starred")]
        wrong = [call("set_starred", id=m["id"], starred=True) for m in messages] + ["done()"]
    elif kind == "archive_subject":
        topic = str(rng.choice([m["body"].split()[-1].rstrip(".") for m in messages]))
        targets = [m["id"] for m in messages if topic in m["subject"].lower()]
        text = f"Archive every inbox message whose subject mentions '{topic}'."
        for i in targets:
            expect[i]["folder"] = "archive"
        gold = [call("move_message", id=i, folder="archive") for i in targets]
        wrong = [call("move_message", id=i, folder="trash") for i in targets] + ["done()"]
    elif kind == "send":
        topic = str(rng.choice(TOPICS))
        sent = {"to": sender, "subject": f"About the {topic}", "body": f"Can we talk about the {topic} tomorrow?"}
        text = f"Send an email to {sent['to']} with the subject '{sent['subject']}' and the text '{sent['body']}'."
        expect = {**{str(k): v for k, v in expect.items()}, "sent": sent}
        gold = [call("send_message", **sent)]
        wrong = [call("send_message", **{**sent, "to": "someone@else.example"}), "done()"]
        return {"instruction": text, "state": state, "expect": expect, "api_gold": gold + ["done()"], "wrong": wrong}
    elif kind == "count_unread":
        count = sum(1 for m in messages if m["from"] == sender and not m["read"])
        text = f"How many unread messages from {sender} are in the inbox? Reply with answer(\"<number>\")."
        return {"instruction": text, "state": state, "expect": {"answer": str(count)},
                "api_gold": [call("list_messages", folder="inbox"), f'answer("{count}")'],
                "wrong": [f'answer("{count + 1}")']}
    else:
        raise ValueError(f"unknown mail task kind {kind!r}; kinds: {KINDS}")
    return {"instruction": text, "state": state, "expect": {str(k): v for k, v in expect.items()},
            "api_gold": gold + ["done()"], "wrong": wrong}


def expect_was(messages: list[dict[str, Any]], message_id: int, key: str) -> bool:
    """The initial value of ``key`` of message ``message_id``."""
    return bool(next(m for m in messages if m["id"] == message_id)[key])


def verify(data: dict[str, Any], state: dict[str, Any], answer: str | None) -> RewardResult:
    """Every original message must be in its expected folder with its expected star; a send task also needs
    exactly one new message with the expected address, subject and text. Question tasks check the answer."""
    expect = data["expect"]
    if "answer" in expect:
        return verify_answer(expect["answer"], answer)
    originals = {str(m["id"]) for m in data["state"]["messages"]}
    by_id = {str(m["id"]): m for m in state["messages"]}
    checks = {}
    for key in sorted(originals, key=int):
        message = by_id.get(key)
        checks[f"message {key}"] = message is not None and all(message[f] == v for f, v in expect[key].items())
    new = [m for m in state["messages"] if str(m["id"]) not in originals]
    if "sent" in expect:
        want = expect["sent"]
        checks["one message sent"] = len(new) == 1
        checks["sent as asked"] = len(new) == 1 and all(
            str(new[0][f]).strip().lower() == want[f].strip().lower() for f in ("to", "subject", "body"))
    else:
        checks["nothing sent"] = not new
    return score(checks, "mailbox")


def gui_solver(data: dict[str, Any]) -> GuiSolver:
    """Scripted GUI solution: the row buttons for star/archive, the compose form for send, counting the
    rows marked unread for the question."""
    kind, expect = data["kind"], data["expect"]
    if kind == "send":
        return run_policy(lambda obs: _compose_step(obs, expect["sent"]))
    if kind == "count_unread":
        sender = data["instruction"].split(" from ")[1].split(" are ")[0]
        return _count_solver(sender)
    start = {str(m["id"]): m for m in data["state"]["messages"]}

    def step(obs: str) -> str | None:
        nodes = parse_tree(obs)
        for key, want in expect.items():
            if want["starred"] and not start[key]["starred"] and find(nodes, "button", f"Star message {key}"):
                return click(nodes, "button", f"Star message {key}")
            if want["folder"] == "archive" and find(nodes, "button", f"Archive message {key}"):
                return click(nodes, "button", f"Archive message {key}")
        return None

    return run_policy(step)


def _compose_step(obs: str, sent: dict[str, str]) -> str | None:
    nodes = parse_tree(obs)
    if heading(nodes) == "Sent" and find(nodes, "link", sent["subject"]):
        return None
    if heading(nodes) != "Compose":
        return click(nodes, "button", "Compose")
    action = fill_until(obs, {"To": sent["to"], "Subject": sent["subject"]})
    if action is not None:
        return action
    body = nodes[find(nodes, "textbox", "Body")[0]]
    return f'fill("{body.bid}", {sent["body"]!r})' if body.value != sent["body"] else click(nodes, "button", "Send")


def _count_solver(sender: str) -> GuiSolver:
    obs = yield ""
    nodes = parse_tree(obs)
    count = 0
    for row in find(nodes, "row"):
        cells = [nodes[i].name for i in find(nodes, "cell", within=row)]
        count += sender in cells and "unread" in cells
    yield f'answer("{count}")'
