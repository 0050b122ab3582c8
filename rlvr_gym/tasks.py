"""Tasks and task suites: data, one task per JSONL line.

A :class:`Task` is everything needed to start and verify one episode: which env, the options passed to
``reset`` (including the seed), optional gold and deliberately wrong action sequences, the split and free
metadata. A :class:`TaskSuite` is a list of tasks loaded from ``tasks/<family>/<suite>.jsonl``; a manifest
(``<suite>.manifest.json``) beside it records source, licence, split and checksum.

Example line::

    {"id": "tw-train-0001", "env_id": "textworld/ALFWorld-v0", "options": {"seed": 17}, "split": "train",
     "gold": ["go to fridge 1", "open fridge 1", "take apple 1 from fridge 1", ...]}
"""

from __future__ import annotations

import difflib
import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Literal

import pydantic

Split = Literal["train", "dev", "test"]


class Task(pydantic.BaseModel):
    """One task of a suite.

    Attributes:
        id: unique within its suite.
        env_id: the registered env that runs it, ``family/Name-vN``.
        options: passed to the env's ``reset`` through ``options["task"]``; ``options["seed"]`` (int) seeds
            the episode when ``reset`` gets no seed.
        data: task payload the verifier reads (problem statement, tests, expected answer, ...).
        gold: an action sequence that earns the maximum reward, or None.
        wrong: an action sequence that must earn less than the maximum, or None.
        split: ``train``, ``dev`` or ``test``.
        metadata: free JSON (task type, difficulty, source).
    """

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    id: str = pydantic.Field(min_length=1)
    env_id: str = pydantic.Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+-v\d+$")
    options: dict[str, Any] = pydantic.Field(default_factory=dict)
    data: dict[str, Any] = pydantic.Field(default_factory=dict)
    gold: list[str] | None = None
    wrong: list[str] | None = None
    split: Split = "train"
    metadata: dict[str, Any] = pydantic.Field(default_factory=dict)

    @property
    def seed(self) -> int | None:
        """The episode seed from ``options["seed"]``, or None."""
        seed = self.options.get("seed")
        return None if seed is None else int(seed)


class TaskFileError(ValueError):
    """A task file is malformed. The message names the file and the 1-based line."""


class SuiteNotFoundError(FileNotFoundError):
    """No suite file under a name or path. The message names the folders searched and the closest suites."""


class TaskSuite:
    """An ordered collection of tasks, usually one JSONL file.

    Args:
        name: the suite name (the file stem, e.g. ``"test"``).
        tasks: the tasks; ids must be unique.
        path: the file it came from, if any.

    Raises:
        ValueError: on duplicate task ids.
    """

    def __init__(self, name: str, tasks: Iterable[Task], path: Path | None = None) -> None:
        self.name = name
        self.tasks = list(tasks)
        self.path = path
        seen: set[str] = set()
        for task in self.tasks:
            if task.id in seen:
                raise ValueError(f"duplicate task id {task.id!r} in suite {name!r}")
            seen.add(task.id)

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    def __getitem__(self, index: int) -> Task:
        return self.tasks[index]

    def filter(self, split: Split | None = None, env_id: str | None = None) -> TaskSuite:
        """Returns the tasks of one split and/or env id, as a new suite."""
        kept = [t for t in self.tasks if (split is None or t.split == split) and (env_id in (None, t.env_id))]
        return TaskSuite(self.name, kept, self.path)

    @classmethod
    def load(cls, path: str | Path) -> TaskSuite:
        """Reads a JSONL suite; blank lines and lines starting with ``#`` are skipped.

        Raises:
            FileNotFoundError: when the file does not exist.
            TaskFileError: on a line that is not JSON or not a valid :class:`Task`, naming file and line.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"task suite {path} not found; suites live in tasks/<family>/<suite>.jsonl")
        tasks = []
        with path.open(encoding="utf-8") as handle:
            for line_no, line in enumerate(handle, start=1):
                if line.strip() and not line.lstrip().startswith("#"):
                    tasks.append(parse_task_line(line, path, line_no))
        try:
            return cls(path.stem, tasks, path)
        except ValueError as error:
            raise TaskFileError(f"{path}: {error}") from None

    def save(self, path: str | Path) -> Path:
        """Writes the suite as JSONL (one task per line, keys sorted) and returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as handle:
            for task in self.tasks:
                handle.write(json.dumps(task.model_dump(exclude_defaults=True), sort_keys=True) + "\n")
        return path

    def checksum(self) -> str:
        """SHA-256 of the suite's canonical JSONL text, for manifests."""
        text = "".join(json.dumps(t.model_dump(exclude_defaults=True), sort_keys=True) + "\n" for t in self.tasks)
        return hashlib.sha256(text.encode()).hexdigest()

    def write_manifest(self, path: str | Path, *, source: str, licence: str, **extra: Any) -> Path:
        """Writes ``<suite>.manifest.json``: source, licence, splits, count, checksum and ``extra``."""
        path = Path(path)
        manifest = {
            "suite": self.name,
            "source": source,
            "licence": licence,
            "num_tasks": len(self.tasks),
            "splits": sorted({t.split for t in self.tasks}),
            "env_ids": sorted({t.env_id for t in self.tasks}),
            "sha256": self.checksum(),
            **extra,
        }
        path.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        return path


def parse_task_line(line: str, path: Path | str = "<string>", line_no: int = 1) -> Task:
    """Parses one JSONL line into a :class:`Task`.

    Raises:
        TaskFileError: naming ``path:line_no`` and what was wrong.
    """
    try:
        raw = json.loads(line)
    except json.JSONDecodeError as error:
        raise TaskFileError(f"{path}:{line_no}: not valid JSON ({error.msg} at column {error.colno})") from None
    if not isinstance(raw, dict):
        raise TaskFileError(f"{path}:{line_no}: expected a JSON object, got {type(raw).__name__}")
    try:
        return Task.model_validate(raw)
    except pydantic.ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or '<task>'}: {e['msg']}" for e in error.errors())
        raise TaskFileError(f"{path}:{line_no}: invalid task ({problems})") from None


def task_dirs() -> list[Path]:
    """The folders searched for task suites (``<dir>/<family>/<suite>.jsonl``), in order.

    ``RLVR_GYM_TASKS`` (one or more folders separated by ``os.pathsep``), then ``./tasks``, then the
    repository's ``tasks/`` beside the installed ``rlvr_gym`` package (an editable install or a checkout).
    A user's own suites and the shipped ones are therefore found together. Only existing folders are listed.
    """
    import os

    extra = [p for p in os.environ.get("RLVR_GYM_TASKS", "").split(os.pathsep) if p]
    candidates: list[str | Path] = [*extra, "tasks", Path(__file__).resolve().parent.parent / "tasks"]
    found: list[Path] = []
    for candidate in candidates:
        path = Path(candidate).resolve()
        if path.is_dir() and path not in found:
            found.append(path)
    return found


def tasks_dir() -> Path:
    """The folder of the shipped suites: the repository's ``tasks/`` beside the installed ``rlvr_gym``
    package, else the first folder of :func:`task_dirs`. Suite builders write here.

    Raises:
        FileNotFoundError: when no folder exists, saying how to point at one.
    """
    shipped = Path(__file__).resolve().parent.parent / "tasks"
    if shipped.is_dir():
        return shipped
    dirs = task_dirs()
    if not dirs:
        raise FileNotFoundError("no tasks/ folder found; set RLVR_GYM_TASKS=/path/to/tasks")
    return dirs[0]


def load_suite(name: str | Path) -> TaskSuite:
    """Loads a suite by file path, or by name ``family/suite`` searched in :func:`task_dirs`
    (``"textworld/easy-test"`` reads ``tasks/textworld/easy-test.jsonl``).

    Raises:
        SuiteNotFoundError: (a FileNotFoundError) for a missing file, or an unknown name (naming the closest
            suites, the suites of that family and the folders searched).
        TaskFileError: for a malformed suite file (naming file and line).
    """
    path = Path(name)
    if path.suffix == ".jsonl" or path.is_absolute() or path.is_file():
        if not path.is_file():
            raise SuiteNotFoundError(f"suite file {path} not found (expected a JSONL file of tasks, or a suite "
                                     "name family/suite)")
        return TaskSuite.load(path)
    dirs = task_dirs()
    for folder in dirs:
        candidate = folder / f"{name}.jsonl"
        if candidate.is_file():
            return TaskSuite.load(candidate)
    family = str(name).split("/", 1)[0]
    known = sorted({f"{family}/{p.stem}" for folder in dirs for p in (folder / family).glob("*.jsonl")})
    every = sorted({f"{p.parent.name}/{p.stem}" for folder in dirs for p in folder.glob("*/*.jsonl")})
    # the family's own suites first: a typo in the suite part should not suggest another family's
    close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5) or difflib.get_close_matches(
        str(name), every, n=3, cutoff=0.5)
    searched = ", ".join(str(d) for d in dirs) or "none (set RLVR_GYM_TASKS)"
    raise SuiteNotFoundError(
        f"no suite {str(name)!r}; did you mean {' or '.join(close) or '(no close name)'}? "
        f"suites of {family!r}: {', '.join(known) or 'none'}; searched {searched}. "
        "Add folders with RLVR_GYM_TASKS=/path/to/tasks (os.pathsep-separated)."
    )
