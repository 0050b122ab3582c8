"""Generated one-record edits on a small page (``web/Widgets-v0``): web tasks a ~1M-parameter model can learn.

A task edits one record of a small list (a contact, a device or an account; 3-4 records, 3 fields: a switch, a
choice and a text) through one of four *layouts* (``apps/widgets.html``), changing one or two fields, and
commits. Every action changes the page, and the commit ends the episode:

* ``dialog``: ``Edit <name>`` opens a dialog with the form; ``OK`` commits (``Cancel`` closes it).
* ``tabs``: one tab per record shows its form; ``Save`` commits.
* ``search``: typing the record's exact name in ``Search`` shows its form; ``Save`` commits.
* ``wizard``: choose the record in a list, ``Next``, then the form; ``Finish`` commits (``Back`` returns).

The gold solution takes 2-4 actions (``dialog`` with one change: ``Edit``, the change, ``OK``). The reward is
the verifier's check of the app state read from the page after the commit (:func:`verify`): the target
record's fields changed as asked, every other field of every record unchanged.

Observations are short (no URL or title line; about 6-14 element lines, ~60-150 byte-level BPE tokens) and
element ids are two digits, drawn per task from its seed and stable for the whole episode, so an id must be
read from the page, never counted. Every element an action needs also has a name unique on its page, and an
action may name it instead (``click("OK")``, ``select_option("Mode", "eco")``; :mod:`rlvr_gym_web.actions`):
with ``by_name`` (the env's ``name_targets``) the oracle and the admissible actions do so.

Held-out structure: a task's *structure* is its layout and the set of field types it changes (``choice``,
``bool+text``, ...). The structure with layout index ``l`` and change-set index ``c`` (in :data:`LAYOUTS` and
:data:`CHANGE_SETS`) is held out when ``(l + c) % 4 == 1``: 6 of the 21 structures (``wizard`` takes one
change only). Training tasks never use one; every layout and every change set is trained in other
combinations. In the test split every second block of four tasks (one per layout) is held out
(``metadata["held_out"]``), so each layout is tested in seen and held-out structures.

Warm-start hooks: :func:`generate_tasks` (``sft.demo_tasks``), :func:`admissible_actions` (what the env lists
in ``info["admissible_actions"]``: every action the page offers except the commit; the demonstrations' near
misses), :func:`malformed_actions` (``sft.invalid_actions``: slips of the oracle's action the env rejects) and
:func:`next_action` (the oracle, reading only the observation and the task).
"""

from __future__ import annotations

import dataclasses
import random
import re
from typing import Any

import numpy as np

from rlvr_gym.core import Env
from rlvr_gym.tasks import Split, Task, check_generator_range
from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.desktop.common import GuiSolver, run_policy, score
from rlvr_gym_web.observation import Node, find, parse_tree, target_of

ENV_ID = "web/Widgets-v0"
TOOLS: list[dict[str, Any]] = []
"""No API tools: the page is the only way to act."""
ENDS_ON_SUBMIT = True
"""The env ends the episode when the page commits (``state["submitted"]``), as a MiniWoB page does."""
LAYOUTS = ("dialog", "tabs", "search", "wizard")
KINDS = LAYOUTS
CHANGE_SETS: tuple[tuple[str, ...], ...] = (
    ("bool",), ("choice",), ("text",), ("bool", "choice"), ("bool", "text"), ("choice", "text"))
ONE_CHANGE_LAYOUTS = ("wizard",)
"""Layouts whose tasks change one field only (two would take five actions)."""
COMMIT_BUTTONS = ("OK", "Save", "Finish")
SPLIT_SEED_BASE: dict[str, int] = {"train": 0, "dev": 1_000_000, "test": 2_000_000}
MAX_TASKS_PER_SPLIT = 1_000_000
ID_RANGE = (10, 100)
"""Element ids are drawn from ``range(*ID_RANGE)``: always two digits."""
ROLE = {"bool": "checkbox", "choice": "combobox", "text": "textbox"}


@dataclasses.dataclass(frozen=True)
class Theme:
    """What the records are.

    Attributes:
        title: the page heading.
        noun: one record, in lower case (``contact``).
        names: the pool of record names.
        fields: ``(key, label, type, values)`` per field; ``values`` are a choice's options, or a text field's
            pool of values (bool fields: empty).
    """

    title: str
    noun: str
    names: tuple[str, ...]
    fields: tuple[tuple[str, str, str, tuple[str, ...]], ...]


THEMES = (
    Theme("Contacts", "contact", ("Ann", "Bob", "Cai", "Dee", "Eli", "Fay", "Gus", "Ivy"),
          (("favorite", "Favorite", "bool", ()), ("group", "Group", "choice", ("family", "friends", "work")),
           ("phone", "Phone", "text", ("2041", "3178", "4620", "5312", "6895", "7403")))),
    Theme("Devices", "device", ("Lamp", "Fan", "Heater", "Camera", "Speaker", "Router", "Clock"),
          (("enabled", "Enabled", "bool", ()), ("mode", "Mode", "choice", ("auto", "eco", "boost")),
           ("label", "Label", "text", ("hall", "desk", "lab", "attic", "porch", "garage")))),
    Theme("Accounts", "account", ("Sales", "Support", "Billing", "Legal", "Design", "Ops"),
          (("admin", "Admin", "bool", ()), ("plan", "Plan", "choice", ("free", "basic", "pro")),
           ("team", "Team", "text", ("red", "blue", "green", "gold", "gray", "pink")))),
)


def structure_key(layout: str, changes: tuple[str, ...] | list[str]) -> str:
    """The held-out unit: layout and changed field types, e.g. ``tabs:bool+text``."""
    return f"{layout}:{'+'.join(changes)}"


def is_held_out(layout: str, changes: tuple[str, ...]) -> bool:
    """Whether the structure is held out of training (see the module docstring)."""
    return (LAYOUTS.index(layout) + CHANGE_SETS.index(tuple(changes))) % 4 == 1


def structures(layout: str, held_out: bool) -> list[tuple[str, ...]]:
    """The change sets of ``layout`` that are (``held_out=True``) or are not held out."""
    sets = CHANGE_SETS[:3] if layout in ONE_CHANGE_LAYOUTS else CHANGE_SETS
    return [c for c in sets if is_held_out(layout, c) == held_out]


def all_structures(held_out: bool) -> list[str]:
    """Every structure key of one kind (held out or training), sorted."""
    return sorted(structure_key(layout, c) for layout in LAYOUTS for c in structures(layout, held_out))


def _phrase(label: str, kind: str, value: Any) -> str:
    if kind == "bool":
        return f"turn {'on' if value else 'off'} {label}"
    return f"set {label} to {value}"


def _initial(rng: np.random.Generator, kind: str, values: tuple[str, ...]) -> Any:
    return bool(rng.random() < 0.5) if kind == "bool" else str(rng.choice(values))


def _changed(rng: np.random.Generator, kind: str, values: tuple[str, ...], current: Any) -> Any:
    if kind == "bool":
        return not current
    return str(rng.choice([v for v in values if v != current]))


def _element_keys(theme: Theme, num_records: int) -> list[str]:
    keys = ["title", "hint", "status", "dlg", "ok", "cancel", "save", "search", "pick", "pick_none", "next", "back",
            "finish"]
    keys += [f"{prefix}{i}" for prefix in ("open", "p") for i in range(num_records)]
    for key, _, kind, values in theme.fields:
        keys.append(f"f:{key}")
        keys += [f"o:{key}:{j}" for j in range(len(values))] if kind == "choice" else []
    return keys


def generate(rng: np.random.Generator, kind: str, held_out: bool = False) -> dict[str, Any]:
    """One task of layout ``kind`` drawn from ``rng`` (the desktop apps' contract).

    Args:
        rng: the task's generator.
        kind: a layout of :data:`LAYOUTS`.
        held_out: draw a held-out structure instead of a training one.

    Returns:
        ``{"instruction", "state", "expect", "structure", "held_out"}``; ``state`` is the page's initial state
        (layout, title, noun, fields, records, element ids), ``expect["records"]`` the records after a correct
        commit.

    Raises:
        ValueError: on an unknown layout.
    """
    if kind not in LAYOUTS:
        raise ValueError(f"unknown widgets layout {kind!r}; layouts: {', '.join(LAYOUTS)}")
    options = structures(kind, held_out)
    changes = options[int(rng.integers(len(options)))]
    theme = THEMES[int(rng.integers(len(THEMES)))]
    fields = [theme.fields[i] for i in rng.permutation(len(theme.fields))]
    names = [str(n) for n in rng.choice(theme.names, size=int(rng.integers(3, 5)), replace=False)]
    records: list[dict[str, Any]] = [{"name": n, "values": {k: _initial(rng, t, v) for k, _, t, v in fields}}
                                     for n in names]
    target = int(rng.integers(len(records)))
    final: list[dict[str, Any]] = [{"name": r["name"], "values": dict(r["values"])} for r in records]
    phrases = []
    for key, label, kind_of_field, values in (f for f in fields if f[2] in changes):
        final[target]["values"][key] = _changed(rng, kind_of_field, values, records[target]["values"][key])
        phrases.append(_phrase(label, kind_of_field, final[target]["values"][key]))
    keys = _element_keys(theme, len(records))
    ids = rng.choice(np.arange(*ID_RANGE), size=len(keys), replace=False)
    state = {"layout": kind, "title": theme.title, "noun": theme.noun, "records": records,
             "fields": [{"key": k, "label": label, "type": t, **({"options": list(v)} if t == "choice" else {})}
                        for k, label, t, v in fields],
             "ids": {key: int(i) for key, i in zip(keys, ids)}}
    instruction = f"Edit the {theme.noun} {names[target]}: {' and '.join(phrases)}."
    return {"instruction": instruction, "state": state, "expect": {"records": final, "target": names[target]},
            "structure": structure_key(kind, changes), "held_out": held_out}


def generate_task(seed: int, layout: str | None = None, held_out: bool = False) -> dict[str, Any]:
    """The task data of ``seed`` (as :func:`rlvr_gym_web.desktop.apps.generate` returns it): the same seed,
    layout and ``held_out`` always give the same task.

    Raises:
        ValueError: on an unknown layout.
    """
    rng = np.random.default_rng(seed)
    layout = layout or LAYOUTS[int(rng.integers(len(LAYOUTS)))]
    return {"app": "widgets", "kind": layout, **generate(rng, layout, held_out)}


def generate_tasks(env_id: str, split: Split, num_tasks: int, seed_offset: int = 0) -> list[Task]:
    """``num_tasks`` tasks of ``split``, layouts in rotation (task ``i`` has layout ``i mod 4``), without gold.

    Seeds never overlap between splits: task ``i`` has seed ``SPLIT_SEED_BASE[split] + i``. Train and dev use
    training structures only; in the test split tasks with ``(i // 4) % 2 == 1`` use held-out structures. Also
    the SFT task generator (``sft.demo_tasks``); the suites add gold recorded in Chromium
    (:mod:`rlvr_gym_web.build_suites`).

    Raises:
        ValueError: on another env id, an unknown split, or seeds leaving the split's range.
    """
    if env_id != ENV_ID:
        raise ValueError(f"generate_tasks makes tasks for {ENV_ID}, not {env_id!r}")
    check_generator_range(split, SPLIT_SEED_BASE, num_tasks, seed_offset, MAX_TASKS_PER_SPLIT)
    tasks = []
    for i in range(seed_offset, seed_offset + num_tasks):
        seed = SPLIT_SEED_BASE[split] + i
        data = generate_task(seed, LAYOUTS[i % len(LAYOUTS)], split == "test" and (i // len(LAYOUTS)) % 2 == 1)
        tasks.append(Task(id=f"widgets-{split}-{i:06d}", env_id=ENV_ID, options={"seed": seed}, data=data,
                          split=split, metadata={"layout": data["kind"], "structure": data["structure"],
                                                 "held_out": data["held_out"]}))
    return tasks


def verify(data: dict[str, Any], state: dict[str, Any], answer: str | None) -> RewardResult:
    """1.0 when the page committed and every record's fields equal the expected ones (texts compared without
    surrounding spaces); ``components["checks_passed"]`` is the fraction of checks that hold."""
    want = {r["name"]: r["values"] for r in data["expect"]["records"]}
    got = {r["name"]: r["values"] for r in state.get("records", [])}
    checks = {"committed": bool(state.get("submitted"))}
    for name, values in want.items():
        for key, value in values.items():
            seen = got.get(name, {}).get(key)
            checks[f"{name}.{key}"] = (str(seen).strip() == value) if isinstance(value, str) else seen == value
    return score(checks, "widgets")


# -- the oracle ------------------------------------------------------------------------------------------
def _node(nodes: list[Node], role: str, name: str) -> Node | None:
    found = find(nodes, role, name)
    return nodes[found[0]] if found else None


def _fix(nodes: list[Node], field: dict[str, Any], want: Any, by_name: bool) -> str | None:
    """The action that sets one form control to ``want``, or None when it already shows it."""
    found = find(nodes, ROLE[field["type"]], field["label"])
    if not found:
        return None
    node, ref = nodes[found[0]], target_of(nodes, found[0], by_name)
    if field["type"] == "bool":
        return None if ("checked" in node.props) == want else f'click("{ref}")'
    if node.value == want:
        return None
    verb = "select_option" if field["type"] == "choice" else "fill"
    return f'{verb}("{ref}", "{want}")'


def _edit(nodes: list[Node], data: dict[str, Any], commit: str, by_name: bool) -> str:
    """Fix the first control that differs from the target's final values, else commit."""
    target = data["expect"]["target"]
    want = next(r["values"] for r in data["expect"]["records"] if r["name"] == target)
    for field in data["state"]["fields"]:
        action = _fix(nodes, field, want[field["key"]], by_name)
        if action is not None:
            return action
    return _click(nodes, "button", commit, by_name)


def _ref(nodes: list[Node], role: str, name: str, by_name: bool) -> str:
    found = find(nodes, role, name)
    if not found:
        raise LookupError(f"no {role} {name!r} on the page")
    return target_of(nodes, found[0], by_name)


def _click(nodes: list[Node], role: str, name: str, by_name: bool) -> str:
    return f'click("{_ref(nodes, role, name, by_name)}")'


def next_action(data: dict[str, Any], observation: str, by_name: bool = False) -> str:
    """The oracle's action for the page in ``observation`` (it recovers from any earlier action: it reads the
    page, not the history).

    Args:
        data: the task's data.
        observation: the current observation.
        by_name: address elements by their accessible names (``click("OK")``) instead of their ids
            (``click("72")``); the env takes either (:mod:`rlvr_gym_web.actions`).

    Raises:
        LookupError: when the page lacks an element the layout always shows (not a widgets page).
    """
    nodes = parse_tree(observation)
    target, layout = data["expect"]["target"], data["state"]["layout"]
    if layout == "dialog":
        dialog = find(nodes, "dialog")
        if not dialog:
            return _click(nodes, "button", f"Edit {target}", by_name)
        if nodes[dialog[0]].name != f"Edit {target}":
            return _click(nodes, "button", "Cancel", by_name)
        return _edit(nodes, data, "OK", by_name)
    if layout == "tabs":
        tab = _node(nodes, "tab", target)
        if tab is None or "selected" not in tab.props:
            return _click(nodes, "tab", target, by_name)
        return _edit(nodes, data, "Save", by_name)
    if layout == "search":
        box = _node(nodes, "textbox", "Search")
        if box is None:
            raise LookupError("no Search box on the page")
        if box.value != target:
            return f'fill("{_ref(nodes, "textbox", "Search", by_name)}", "{target}")'
        return _edit(nodes, data, "Save", by_name)
    if _node(nodes, "button", "Finish") is not None:  # the wizard's second step
        if _node(nodes, "text", f"Editing {target}") is None:
            return _click(nodes, "button", "Back", by_name)
        return _edit(nodes, data, "Finish", by_name)
    noun = data["state"]["noun"].capitalize()
    pick = _node(nodes, "combobox", noun)
    if pick is None:
        raise LookupError("no record list on the wizard's first step")
    if pick.value != target:
        return f'select_option("{_ref(nodes, "combobox", noun, by_name)}", "{target}")'
    return _click(nodes, "button", "Next", by_name)


def gui_solver(data: dict[str, Any], by_name: bool = False) -> GuiSolver:
    """The oracle as a scripted GUI agent (:func:`next_action` on each observation)."""
    return run_policy(lambda obs: next_action(data, obs, by_name))


# -- warm-start hooks ------------------------------------------------------------------------------------
def admissible_actions(data: dict[str, Any], observation: str, by_name: bool = False) -> list[str]:
    """Every action the page offers that keeps the episode going (commits left out, so a demonstration's
    injected mistake can be recovered from): a click on each button, tab and switch; each other option of a
    list; the search box filled with each record's name; a text field filled with each other value of its pool.
    Elements are addressed by id, or with ``by_name`` by name (as :func:`next_action`).
    """
    pools = {f[1]: f[3] for theme in THEMES for f in theme.fields if f[2] == "text"}
    names = [r["name"] for r in data["state"]["records"]]
    nodes = parse_tree(observation)
    actions = []
    for index, node in enumerate(nodes):
        ref = target_of(nodes, index, by_name)
        if node.role in ("button", "tab", "checkbox") and node.name not in COMMIT_BUTTONS:
            actions.append(f'click("{ref}")')
        elif node.role == "option" and "selected" not in node.props and node.name != "-" and node.parent is not None:
            actions.append(f'select_option("{target_of(nodes, node.parent, by_name)}", "{node.name}")')
        elif node.role == "textbox":
            values = names if node.name == "Search" else pools.get(node.name, ())
            actions += [f'fill("{ref}", "{v}")' for v in values if v != node.value]
    return actions


_PAGE_ID = re.compile(r"\[(\d\d)\]")
_ACTION_ID = re.compile(r'^(\w+\("?)(\d\d)(?=")')


def relabel_ids(observations: list[str], actions: list[str], rng: random.Random) -> tuple[list[str], list[str]]:
    """The same episode on a task whose element ids are renamed by one random permutation of :data:`ID_RANGE`
    (``sft.demo_variants``): what Chromium shows for the task whose ``state["ids"]`` are renamed so, since the
    page takes its ids from the task and orders its lines by the layout, never by id (tested). Renamed: the
    ``[NN]`` of page lines and the id an action names (also in a slip without its opening quote); kept: every
    other number (values, the fixed example ``click("12")`` of a parse error, the off-page slip ``"9"``).

    Args:
        observations: the episode's observations, in order.
        actions: its actions.
        rng: draws the permutation.

    Returns:
        ``(observations, actions)`` renamed, of the same lengths.
    """
    ids = [str(i) for i in range(*ID_RANGE)]
    renamed = dict(zip(ids, rng.sample(ids, len(ids))))
    return ([_PAGE_ID.sub(lambda m: f"[{renamed[m.group(1)]}]", text) for text in observations],
            [_ACTION_ID.sub(lambda m: m.group(1) + renamed[m.group(2)], text) for text in actions])


RENAMED_POOLS: tuple[tuple[str, ...], ...] = tuple(theme.names for theme in THEMES) + tuple(
    values for theme in THEMES for _, _, kind, values in theme.fields if kind == "text")
"""What :func:`relabel_task` permutes: each theme's record names (the first ``len(THEMES)`` pools), then each text
field's values."""


def _renaming(rng: random.Random) -> dict[str, str]:
    """One random permutation of each pool of :data:`RENAMED_POOLS`, as ``{old: new}``; a record name in swapped
    case (a demonstration slip's) maps to the new name in swapped case."""
    renamed: dict[str, str] = {}
    for i, pool in enumerate(RENAMED_POOLS):
        shuffled = rng.sample(pool, len(pool))
        renamed.update(zip(pool, shuffled))
        if i < len(THEMES):
            renamed.update(zip((w.swapcase() for w in pool), (w.swapcase() for w in shuffled)))
    return renamed


_RENAMED_WORD = re.compile(r"\b(" + "|".join(sorted(map(re.escape, _renaming(random.Random(0))), key=len,
                                                     reverse=True)) + r")\b")
"""A whole word :func:`_renaming` renames (its keys do not depend on the draw); longest first."""


def relabel_task(observations: list[str], actions: list[str], rng: random.Random) -> tuple[list[str], list[str]]:
    """The same episode on a task whose record names, text-field values and element ids are renamed
    (``sft.demo_variants``): one random permutation of each pool of :data:`RENAMED_POOLS` (``Ivy`` <-> ``Bob``,
    ``2041`` <-> ``6895``), then :func:`relabel_ids`. The renamed task is one the generator can draw (names and values
    come from the same pools, and the page orders records as the task lists them, never by name), so the episode is
    what Chromium shows for it; its solution is the same actions with the same renaming. Choice options are kept:
    the page lists them in the theme's order.

    Args:
        observations: the episode's observations, in order.
        actions: its actions.
        rng: draws the permutations.

    Returns:
        ``(observations, actions)`` renamed, of the same lengths.
    """
    renamed = _renaming(rng)
    observations = [_RENAMED_WORD.sub(lambda m: renamed[m.group(1)], text) for text in observations]
    actions = [_RENAMED_WORD.sub(lambda m: renamed[m.group(1)], text) for text in actions]
    return relabel_ids(observations, actions, rng)


def malformed_actions(env: Env) -> list[str]:
    """Slips of the oracle's next action that the env rejects (``sft.invalid_actions``): an element that is not
    on the page (the id ``"9"``: ids have two digits; by name, the name in swapped case: names match exactly), the
    closing parenthesis missing, the element's opening quote missing. Each gives an ``invalid_action`` or
    ``parse_error`` observation and changes nothing. Elements are named as the env's oracle names them
    (``name_targets``).

    Raises:
        TypeError: for an env that is not a started ``web/Widgets-v0`` episode.
    """
    data = getattr(env, "data", None)
    if not data or data.get("app") != "widgets":
        raise TypeError(f"malformed_actions needs a started {ENV_ID} env, got {type(env).__name__}")
    by_name = bool(getattr(env, "name_targets", False))
    action = next_action(data, env.last_observation, by_name)
    verb, _, rest = action.partition('("')
    bid, _, tail = rest.partition('"')
    slip = bid.swapcase() if by_name and bid != bid.swapcase() else "9"  # "9": no widgets page has a 1-digit id
    return [f'{verb}("{slip}"{tail}', action[:-1], f"{verb}({bid}\"{tail}"]
