"""File manager tasks: move, delete by extension, rename, create a folder and gather files into it."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.desktop.common import GuiSolver, call, click, fill, heading, run_policy, score, tool
from rlvr_gym_web.observation import find, parse_tree

TOOLS = [
    tool("list_folder", "List the file names in a folder.", folder=("string", "folder path, e.g. /Downloads")),
    tool("move_file", "Move a file into another folder.", path=("string", "file path"), folder=("string", "target")),
    tool("rename_file", "Rename a file in place.", path=("string", "file path"), new_name=("string", "new file name")),
    tool("delete_file", "Delete a file.", path=("string", "file path")),
    tool("create_folder", "Create a top-level folder.", path=("string", "folder path, e.g. /Photos")),
]
FOLDERS = ["/Documents", "/Downloads", "/Pictures", "/Music", "/Projects", "/Archive"]
STEMS = ["report", "notes", "budget", "invoice", "photo", "draft", "slides", "scan", "holiday", "backup", "song", "todo"]
EXTS = ["pdf", "txt", "jpg", "tmp", "csv", "mp3"]
KINDS = ("move", "delete_ext", "rename", "gather")


def _base(path: str) -> str:
    return path.rsplit("/", 1)[1]


def _dir(path: str) -> str:
    return path.rsplit("/", 1)[0]


def _initial_state(rng: np.random.Generator) -> dict[str, Any]:
    folders = sorted({"/Documents", "/Downloads", *rng.choice(FOLDERS, size=2, replace=False).tolist()})
    files: dict[str, int] = {}
    while len(files) < int(rng.integers(7, 11)):
        folder = "/Downloads" if rng.random() < 0.45 else str(rng.choice(folders))
        name = f"{rng.choice(STEMS)}{int(rng.integers(1, 5))}.{rng.choice(EXTS)}"
        files.setdefault(f"{folder}/{name}", int(rng.integers(1, 900)))
    return {"folders": folders, "files": [{"path": p, "size_kb": s} for p, s in sorted(files.items())],
            "cwd": "/Downloads"}


def generate(rng: np.random.Generator, kind: str) -> dict[str, Any]:
    """Task data: ``instruction``, ``state``, ``expect`` (final folders and file paths), ``api_gold``, ``wrong``."""
    state = _initial_state(rng)
    paths = [f["path"] for f in state["files"]]
    folders = state["folders"]
    if kind == "move":
        path = str(rng.choice(paths))
        target = str(rng.choice([f for f in folders if f != _dir(path) and f"{f}/{_base(path)}" not in paths]))
        ops = [("move_file", {"path": path, "folder": target})]
        text = f"Move the file {_base(path)} from {_dir(path)} to {target}."
        wrong_folder = next(f for f in folders if f not in (target, _dir(path)))
        wrong = [call("move_file", path=path, folder=wrong_folder), "done()"]
    elif kind == "delete_ext":
        path = str(rng.choice(paths))
        folder, ext = _dir(path), path.rsplit(".", 1)[1]
        ops = [("delete_file", {"path": p}) for p in paths if _dir(p) == folder and p.endswith("." + ext)]
        text = f"Delete every .{ext} file in {folder}, and nothing else."
        wrong = [call("delete_file", path=p) for p in paths if p.endswith("." + ext)] + ["done()"]
        if len(wrong) - 1 == len(ops):
            wrong = ["done()"]
    elif kind == "rename":
        path = str(rng.choice(paths))
        stem, ext = _base(path).rsplit(".", 1)
        new_name = f"{stem}-final.{ext}"
        ops = [("rename_file", {"path": path, "new_name": new_name})]
        text = f"Rename {path} to {new_name}."
        wrong = [call("rename_file", path=path, new_name=f"{stem}-final"), "done()"]
    elif kind == "gather":
        new_folder = str(rng.choice([f for f in ["/Images", "/Photos", "/Gallery"] if f not in folders]))
        moved = [p for p in paths if _dir(p) == "/Downloads" and p.endswith(".jpg")] or [paths[0]]
        ops = [("create_folder", {"path": new_folder})] + [("move_file", {"path": p, "folder": new_folder}) for p in moved]
        text = (f"Create a folder {new_folder} and move every .jpg file from /Downloads into it."
                if moved[0].endswith(".jpg") and _dir(moved[0]) == "/Downloads"
                else f"Create a folder {new_folder} and move {moved[0]} into it.")
        wrong = [call("create_folder", path=new_folder), "done()"]
    else:
        raise ValueError(f"unknown files task kind {kind!r}; kinds: {KINDS}")
    return {"instruction": text, "state": state, "expect": _apply(state, ops),
            "api_gold": [call(name, **args) for name, args in ops] + ["done()"], "wrong": wrong}


def _apply(state: dict[str, Any], ops: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    folders, files = list(state["folders"]), {f["path"]: f["size_kb"] for f in state["files"]}
    for name, args in ops:
        if name == "create_folder":
            folders = sorted([*folders, args["path"]])
        elif name == "delete_file":
            files.pop(args["path"])
        else:
            target = (f"{args['folder']}/{_base(args['path'])}" if name == "move_file"
                      else f"{_dir(args['path'])}/{args['new_name']}")
            files[target] = files.pop(args["path"])
    return {"folders": folders, "files": sorted(files.items())}


def verify(data: dict[str, Any], state: dict[str, Any], answer: str | None) -> RewardResult:
    """The final folders and files (path and size) must equal the expected ones exactly."""
    expect = data["expect"]
    files = sorted((f["path"], f["size_kb"]) for f in state["files"])
    expected_files = [tuple(pair) for pair in expect["files"]]
    missing = sorted(set(expected_files) - set(files))
    extra = sorted(set(files) - set(expected_files))
    checks = {"folders": sorted(state["folders"]) == sorted(expect["folders"])}
    checks.update({f"has {p}": False for p, _ in missing})
    checks.update({f"no {p}": False for p, _ in extra})
    checks["files"] = files == expected_files
    return score(checks, "file system")


def gui_solver(data: dict[str, Any]) -> GuiSolver:
    """Scripted GUI solution: go to each source folder and use the row controls, then ``done()``."""
    expect = {p for p, _ in data["expect"]["files"]}
    start = {f["path"] for f in data["state"]["files"]}
    new_folders = [f for f in data["expect"]["folders"] if f not in data["state"]["folders"]]
    finished: set[str] = set()

    def step(obs: str) -> str | None:
        nodes = parse_tree(obs)
        for folder in new_folders:
            if not find(nodes, "button", folder):
                name = folder.lstrip("/")
                field = nodes[find(nodes, "textbox", "New folder name")[0]]
                return click(nodes, "button", "Create folder") if field.value == name else fill(
                    nodes, "textbox", "New folder name", name)
        for path in sorted(start - expect - finished):
            target = _target(path, expect - start)
            if heading(nodes) != _dir(path):
                return click(nodes, "button", _dir(path))
            if not find(nodes, "cell", _base(path)):
                finished.add(path)
                continue
            if target is None:
                return click(nodes, "button", f"Delete {_base(path)}")
            if _dir(target) != _dir(path):
                return f'select_option("{nodes[find(nodes, "combobox", f"Move {_base(path)} to")[0]].bid}", {_dir(target)!r})'
            box = find(nodes, "textbox", f"New name for {_base(path)}")[0]
            if nodes[box].value != _base(target):
                return fill(nodes, "textbox", f"New name for {_base(path)}", _base(target))
            return f'click("{nodes[find(nodes, "button", "Rename", within=nodes[box].parent)[0]].bid}")'
        return None

    return run_policy(step)


def _target(path: str, arrivals: set[str]) -> str | None:
    """Where ``path`` ends up: the arrival with the same name (a move) or in the same folder (a rename)."""
    for candidate in sorted(arrivals):
        if _base(candidate) == _base(path):
            return candidate
    for candidate in sorted(arrivals):
        if _dir(candidate) == _dir(path) and candidate.rsplit(".", 1)[-1] == path.rsplit(".", 1)[-1]:
            return candidate
    return None
