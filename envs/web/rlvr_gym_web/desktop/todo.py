"""To-do list and calendar tasks: complete a to-do, add a to-do, schedule an event, clear finished to-dos."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.desktop.common import GuiSolver, call, click, fill_until, heading, run_policy, score, tool
from rlvr_gym_web.observation import find, parse_tree

TOOLS = [
    tool("list_todos", "List every to-do with its id, title, due date and done flag."),
    tool("add_todo", "Add a to-do.", title=("string", "title"), due=("string", "due date, YYYY-MM-DD")),
    tool("set_done", "Mark a to-do done or not done.", id=("integer", "to-do id"), done=("boolean", "done flag")),
    tool("delete_todo", "Delete a to-do.", id=("integer", "to-do id")),
    tool("list_events", "List calendar events, optionally of one date ('' for all).", date=("string", "YYYY-MM-DD or ''")),
    tool("add_event", "Add a calendar event.", title=("string", "title"), date=("string", "YYYY-MM-DD"),
         time=("string", "HH:MM, 24-hour")),
    tool("delete_event", "Delete a calendar event.", id=("integer", "event id")),
]
TITLES = ["Water plants", "Pay rent", "Call mum", "Book flights", "Renew passport", "Buy milk", "Clean desk",
          "Send invoice", "Fix bike", "Read report"]
EVENTS = ["Dentist", "Team sync", "Yoga", "Lunch with Sam", "Parents' evening", "Code review"]
KINDS = ("complete", "add_todo", "add_event", "clear_done")


def _date(rng: np.random.Generator) -> str:
    return f"2024-03-{int(rng.integers(16, 31)):02d}"


def generate(rng: np.random.Generator, kind: str) -> dict[str, Any]:
    """Task data: ``instruction``, ``state``, ``expect`` (final to-dos and events), ``api_gold``, ``wrong``."""
    titles = rng.choice(TITLES, size=int(rng.integers(4, 7)), replace=False).tolist()
    todos = [{"id": i + 1, "title": t, "due": _date(rng), "done": bool(rng.random() < 0.35)} for i, t in enumerate(titles)]
    if kind in ("complete", "clear_done"):  # these need at least one open and one finished to-do
        todos[0]["done"], todos[-1]["done"] = False, True
    events = [{"id": i + 1, "title": str(t), "date": _date(rng), "time": f"{int(rng.integers(8, 18)):02d}:00"}
              for i, t in enumerate(rng.choice(EVENTS, size=2, replace=False))]
    final_todos, final_events = [dict(t) for t in todos], [dict(e) for e in events]
    if kind == "complete":
        open_todos = [t for t in todos if not t["done"]]
        todo = open_todos[int(rng.integers(0, len(open_todos)))]
        text = f"Mark the to-do '{todo['title']}' as done."
        next(t for t in final_todos if t["id"] == todo["id"])["done"] = True
        gold, wrong = [call("set_done", id=todo["id"], done=True)], [call("delete_todo", id=todo["id"]), "done()"]
    elif kind == "add_todo":
        title, due = str(rng.choice([t for t in TITLES if t not in titles])), _date(rng)
        text = f"Add a to-do '{title}' due on {due}."
        final_todos.append({"id": len(todos) + 1, "title": title, "due": due, "done": False})
        gold, wrong = [call("add_todo", title=title, due=due)], [call("add_todo", title=title, due="2024-03-01"), "done()"]
    elif kind == "add_event":
        title, date = str(rng.choice([e for e in EVENTS if e not in [x["title"] for x in events]])), _date(rng)
        time = f"{int(rng.integers(8, 19)):02d}:{rng.choice(['00', '30'])}"
        text = f"Add a calendar event '{title}' on {date} at {time}."
        final_events.append({"id": 3, "title": title, "date": date, "time": time})
        gold, wrong = [call("add_event", title=title, date=date, time=time)], ["done()"]
    elif kind == "clear_done":
        text = "Delete every to-do that is already marked done, and keep the others."
        gold = [call("delete_todo", id=t["id"]) for t in todos if t["done"]]
        wrong = gold[:-1] + ["done()"]
        final_todos = [t for t in final_todos if not t["done"]]
    else:
        raise ValueError(f"unknown todo task kind {kind!r}; kinds: {KINDS}")
    return {"instruction": text, "state": {"todos": todos, "events": events},
            "expect": {"todos": final_todos, "events": final_events}, "api_gold": gold + ["done()"], "wrong": wrong}


def _todo_key(todo: dict[str, Any]) -> tuple[str, str, bool]:
    return (str(todo["title"]).strip(), str(todo["due"]), bool(todo["done"]))


def _event_key(event: dict[str, Any]) -> tuple[str, str, str]:
    return (str(event["title"]).strip(), str(event["date"]), str(event["time"]))


def verify(data: dict[str, Any], state: dict[str, Any], answer: str | None) -> RewardResult:
    """The to-dos (title, due, done) and events (title, date, time) must equal the expected ones, as multisets."""
    expect = data["expect"]
    return score({
        "to-dos": sorted(map(_todo_key, state["todos"])) == sorted(map(_todo_key, expect["todos"])),
        "events": sorted(map(_event_key, state["events"])) == sorted(map(_event_key, expect["events"])),
    }, "planner")


def gui_solver(data: dict[str, Any]) -> GuiSolver:
    """Scripted GUI solution: tick or delete rows, or fill the add forms (switching to the Calendar tab)."""
    kind, start, expect = data["kind"], data["state"], data["expect"]
    if kind == "add_event":
        event = expect["events"][-1]
        return run_policy(lambda obs: _add_event_step(obs, event))
    if kind == "add_todo":
        todo = expect["todos"][-1]
        return run_policy(lambda obs: _add_todo_step(obs, todo))
    done_titles = {t["title"] for t in expect["todos"] if t["done"]}
    kept = {t["title"] for t in expect["todos"]}

    def step(obs: str) -> str | None:
        nodes = parse_tree(obs)
        for todo in start["todos"]:
            box = find(nodes, "checkbox", f"Done: {todo['title']}")
            if box and todo["title"] not in kept:
                return click(nodes, "button", f"Delete to-do {todo['title']}")
            if box and todo["title"] in done_titles and "unchecked" in nodes[box[0]].props:
                return f'click("{nodes[box[0]].bid}")'
        return None

    return run_policy(step)


def _add_todo_step(obs: str, todo: dict[str, Any]) -> str | None:
    nodes = parse_tree(obs)
    if find(nodes, "checkbox", f"Done: {todo['title']}"):
        return None
    return fill_until(obs, {"To-do title": todo["title"], "Due date (YYYY-MM-DD)": todo["due"]}) or click(
        nodes, "button", "Add to-do")


def _add_event_step(obs: str, event: dict[str, Any]) -> str | None:
    nodes = parse_tree(obs)
    if heading(nodes) != "Calendar":
        return click(nodes, "button", "Calendar")
    if find(nodes, "button", f"Delete event {event['title']}"):
        return None
    fields = {"Event title": event["title"], "Event date (YYYY-MM-DD)": event["date"], "Event time (HH:MM)": event["time"]}
    return fill_until(obs, fields) or click(nodes, "button", "Add event")
