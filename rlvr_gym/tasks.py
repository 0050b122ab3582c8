"""Tasks and task suites: data, one task per JSONL line.

A :class:`Task` is everything needed to start and verify one episode: which env, the options passed to
``reset`` (including the seed), optional gold and deliberately wrong action sequences, the split and free
metadata. A :class:`TaskSuite` is a list of tasks loaded from one JSONL file; a manifest
(``<suite>.manifest.json``) beside it records source, licence, split and checksum.

Where suites live: each family package ships its own as package data (``rlvr_gym_<family>/task_suites/``),
so ``load_suite("textworld/easy-test")`` works after ``pip install rlvr-gym-textworld``; ``RLVR_GYM_TASKS``
folders (``<dir>/<family>/<suite>.jsonl``) are searched first, so a user's suites add to or override them.
The repository's ``tasks/<family>`` entries point at the same package folders.

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
            raise FileNotFoundError(f"task suite {path} not found; load shipped suites by name, e.g. load_suite('textworld/easy-test')")
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


    def to_hf_dataset(self) -> Any:
        """The suite as a Hugging Face ``datasets.Dataset``, one row per task, with the :class:`Task` fields as
        columns: ``id``, ``env_id``, ``split`` (string); ``gold``, ``wrong`` (list of string, or None);
        ``options``, ``data``, ``metadata`` (``datasets.Json``: free JSON whose shape differs between tasks).
        The suite's name is ``dataset.info.description``. :meth:`from_hf_dataset` inverts it exactly.

        Raises:
            ModuleNotFoundError: when ``datasets`` (>= 5.2, for ``datasets.Json``) is not installed:
                ``pip install 'rlvr-gym[hf]'``.
        """
        datasets = _import_datasets()
        text, texts = datasets.Value("string"), datasets.List(datasets.Value("string"))
        features = datasets.Features({name: datasets.Json() if name in _JSON_COLUMNS else texts
                                      if name in ("gold", "wrong") else text for name in HF_COLUMNS})
        columns = {name: [getattr(task, name) for task in self.tasks] for name in HF_COLUMNS}
        dataset = datasets.Dataset.from_dict(columns, features=features)
        dataset.info.description = self.name
        return dataset

    @classmethod
    def from_hf_dataset(cls, dataset: Any, name: str | None = None) -> TaskSuite:
        """Inverse of :meth:`to_hf_dataset`: any table with the same columns (a ``datasets.Dataset``, or an
        iterable of row dicts; JSON columns may also be JSON text).

        Raises:
            TaskFileError: on a row that is not a valid :class:`Task` (naming the row, 1-based).
        """
        tasks = []
        for row_no, row in enumerate(dataset, start=1):
            raw = {key: json.loads(value) if key in _JSON_COLUMNS and isinstance(value, str) else value
                   for key, value in dict(row).items()}
            tasks.append(parse_task_line(json.dumps(raw), "<dataset>", row_no))
        info = getattr(dataset, "info", None)
        return cls(name or getattr(info, "description", None) or "dataset", tasks)


HF_COLUMNS = ("id", "env_id", "options", "data", "gold", "wrong", "split", "metadata")
"""The columns of :meth:`TaskSuite.to_hf_dataset`, the fields of :class:`Task`."""
_JSON_COLUMNS = frozenset({"options", "data", "metadata"})


def check_generator_range(split: str, splits: Iterable[str], num_tasks: int, seed_offset: int,
                          max_per_split: int) -> None:
    """Checks the arguments of a family's task generator ``generate_tasks(env_id, split, num_tasks, seed_offset)``
    (the ``sft.demo_tasks`` signature): a known split and task indices ``seed_offset .. seed_offset + num_tasks``
    within the ``max_per_split`` seeds each split owns.

    Raises:
        ValueError: naming the splits, or the range that leaves the split's seeds.
    """
    names = list(splits)
    if split not in names:
        raise ValueError(f"split must be one of {', '.join(names)}, got {split!r}")
    if num_tasks < 0 or seed_offset < 0 or seed_offset + num_tasks > max_per_split:
        raise ValueError(f"need 0 <= seed_offset + num_tasks <= {max_per_split}, got {seed_offset}+{num_tasks}")


def _import_datasets() -> Any:
    try:
        import datasets
    except ModuleNotFoundError as error:
        if error.name == "datasets":
            raise ModuleNotFoundError("TaskSuite.to_hf_dataset needs Hugging Face `datasets` >= 5.2: "
                                      "pip install 'rlvr-gym[hf]'", name="datasets") from None
        raise
    return datasets


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


SUITES_FOLDER = "task_suites"
"""The folder, inside a family package, holding that family's suites (``<suite>.jsonl`` + manifests)."""


def task_dirs() -> list[Path]:
    """The ``tasks/``-layout folders searched for task suites (``<dir>/<family>/<suite>.jsonl``), in order.

    ``RLVR_GYM_TASKS`` (one or more folders separated by ``os.pathsep``), then ``./tasks``, then the
    repository's ``tasks/`` beside the installed ``rlvr_gym`` package (an editable install or a checkout).
    A user's own suites come first. Only existing folders are listed. The suites shipped inside family
    packages are searched after these folders (see :func:`family_suite_dirs`).
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


def family_suite_dirs() -> dict[str, Path]:
    """The suites shipped as package data: family name -> the ``task_suites/`` folder of its package.

    A family package (``rlvr_gym_<family>``, or the module of an ``rlvr_gym.envs`` entry point) ships its
    suites as ``<package>/task_suites/<suite>.jsonl``; ``load_suite("<family>/<suite>")`` finds them
    without ``RLVR_GYM_TASKS``. Packages are located without being imported. Only existing folders are listed.
    """
    from rlvr_gym.registry import family_modules

    found = {family: _package_suites(module) for family, module in family_modules().items()}
    return {family: folder for family, folder in found.items() if folder is not None}


def family_suite_dir(family: str) -> Path | None:
    """The ``task_suites/`` folder of one family's package (see :func:`family_suite_dirs`), or None."""
    conventional = _package_suites("rlvr_gym.testing" if family == "testing" else f"rlvr_gym_{family}")
    return conventional if conventional is not None else family_suite_dirs().get(family)


def _package_suites(module: str) -> Path | None:
    import importlib.util

    try:
        module_spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent package that fails to import, or a broken spec
        return None
    if module_spec is None or module_spec.origin is None:
        return None
    if not module_spec.submodule_search_locations and "." not in module:
        return None  # a single-file module (rlvr_gym_mygames.py) has no package data
    folder = Path(module_spec.origin).resolve().parent / SUITES_FOLDER
    return folder if folder.is_dir() else None


def find_task_path(relative: str | Path) -> Path:
    """Resolves a path written relative to a ``tasks/`` folder (``"rtl/verilog-eval"``): the first of
    :func:`task_dirs` that has it, else the family package's ``task_suites/`` (``rlvr_gym_rtl/task_suites/
    verilog-eval``). Absolute paths are returned as they are.

    Raises:
        FileNotFoundError: naming the folders searched.
    """
    path = Path(relative)
    if path.is_absolute():
        return path
    candidates = [folder / path for folder in task_dirs()]
    family, _, rest = path.as_posix().partition("/")
    shipped = family_suite_dir(family)
    if shipped is not None:
        candidates.append(shipped / rest)
    for candidate in candidates:
        if candidate.exists():
            return candidate
    searched = ", ".join(str(c) for c in candidates) or "none"
    raise FileNotFoundError(f"{relative} not found (searched {searched}); install the family package "
                            f"`rlvr-gym-{family}` or set RLVR_GYM_TASKS=/path/to/tasks")


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


def list_suites(family: str | None = None) -> list[str]:
    """Names (``family/suite``) of every suite found, in ``tasks/`` folders and in family packages."""
    names = {f"{folder.name}/{p.stem}" for root in task_dirs() for folder in root.iterdir() if folder.is_dir()
             for p in folder.glob("*.jsonl")}
    names.update(f"{fam}/{p.stem}" for fam, folder in family_suite_dirs().items() for p in folder.glob("*.jsonl"))
    return sorted(n for n in names if family in (None, n.split("/", 1)[0]))


def suite_path(name: str) -> Path | None:
    """The file of suite ``family/suite``: ``<dir>/<family>/<suite>.jsonl`` in the first of :func:`task_dirs`
    that has it, else ``<family package>/task_suites/<suite>.jsonl``; None when there is none."""
    for folder in task_dirs():
        candidate = folder / f"{name}.jsonl"
        if candidate.is_file():
            return candidate
    family, _, suite = name.partition("/")
    shipped = family_suite_dir(family)
    if shipped is not None and (shipped / f"{suite}.jsonl").is_file():
        return shipped / f"{suite}.jsonl"
    return None


def load_suite(name: str | Path) -> TaskSuite:
    """Loads a suite by file path, or by name ``family/suite``: ``"textworld/easy-test"`` reads
    ``tasks/textworld/easy-test.jsonl`` from a folder of :func:`task_dirs` (``RLVR_GYM_TASKS`` first), else
    ``easy-test.jsonl`` shipped in the ``rlvr_gym_textworld`` package (see :func:`suite_path`).

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
    found = suite_path(str(name))
    if found is not None:
        return TaskSuite.load(found)
    family = str(name).split("/", 1)[0]
    shipped = family_suite_dirs()
    searched = [str(d) for d in task_dirs()] + [str(d) for d in shipped.values()]
    known = list_suites(family)
    every = list_suites()
    # the family's own suites first: a typo in the suite part should not suggest another family's
    close = difflib.get_close_matches(str(name), known, n=3, cutoff=0.5) or difflib.get_close_matches(
        str(name), every, n=3, cutoff=0.5)
    hint = "" if family in shipped else f" Is the family package `rlvr-gym-{family}` installed?"
    raise SuiteNotFoundError(
        f"no suite {str(name)!r}; did you mean {' or '.join(close) or '(no close name)'}? "
        f"suites of {family!r}: {', '.join(known) or 'none'}; searched {', '.join(searched) or 'none'}.{hint} "
        "Add folders with RLVR_GYM_TASKS=/path/to/tasks (os.pathsep-separated)."
    )
