"""Generated programming tasks a ~1M-parameter model can learn: ``code/Synth-v0``'s task grammar.

Each task is a Python function of one to four short lines, built from a *frame* (the shape of the function)
whose slots are filled with *primitives* (an arithmetic map, a condition, a string operation), each primitive
with parameters drawn from the task's seed. The prompt shows the signature, a one-line spec written from the
primitives' phrases and two examples; hidden tests call the function on six inputs (the two examples first).

Frames (signature, body):

* ``filter_map`` ``f(xs)``: ``return [MAP(x) for x in xs if COND(x)]``
* ``sum_if`` ``f(xs)``: ``return sum(MAP(x) for x in xs if COND(x))``
* ``count_if`` ``f(xs)``: ``return len([x for x in xs if COND(x)])``
* ``branch`` ``f(n)``: ``if COND(n): return MAP(n)`` / ``return MAP'(n)``
* ``loop`` ``f(n)``: ``t = K`` / ``for i in range(n): t = MAP(t)`` / ``return t``
* ``text`` ``f(s)``: ``return STR'(STR(s))`` (two string operations in turn)

Held-out structure (as the text world holds out room layouts): a task's *structure* is its frame and the
primitives of its first two slots (the first slot alone for one-slot frames). A structure is held out when
``(i + j) % 4 == 1`` for the pool indices ``i, j`` of those primitives (``i % 4 == 1`` for one slot). Training
tasks never use a held-out structure; every primitive still appears in training, in that frame with other
partners and in other frames, so a held-out task asks for a new *combination* of known parts. In the test
split every second block of one task per frame uses held-out structures only (``metadata["held_out"]``), so
each frame is tested in both seen and held-out structures.

Tasks are pure data: :func:`generate_task` needs no sandbox. Expected outputs come from running the gold
function in this process, which is safe because it is built only from the fixed templates below (no outside
input); candidate programs only ever run in the sandbox (:mod:`rlvr_gym_code.synth_env`). Near misses are the
gold function with one change (:mod:`rlvr_gym_code.mutants`: a constant off by one, a flipped comparison, a
swapped operator; for string frames also the first operation alone), kept only when they fail a hidden case.
"""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from rlvr_gym.tasks import Split, Task, check_generator_range
from rlvr_gym_code.mutants import mutate

ENV_ID = "code/Synth-v0"
ENTRY_POINT = "f"
NUM_CASES = 6
"""Hidden test calls per task; the first :data:`NUM_EXAMPLES` are shown in the prompt."""
NUM_EXAMPLES = 2
SPLIT_SEED_BASE: dict[str, int] = {"train": 0, "dev": 1_000_000, "test": 2_000_000}
MAX_TASKS_PER_SPLIT = 1_000_000
MAX_DRAWS = 200
"""Draws per task before giving up (a draw is rejected when its outputs are constant or it has no near miss)."""
NEAR_MISS_KINDS = ("off_by_one", "flip_compare", "swap_arith")
LETTERS = "abcdef"
K0_RANGE = (1, 20)
"""Inclusive range of the ``loop`` frame's start value ``t = K``."""


@dataclasses.dataclass(frozen=True)
class Primitive:
    """One slot filler.

    Attributes:
        name: short id (``plus``, ``odd``, ``upper``, ...), stable across versions.
        code: a Python expression with ``{v}`` for the variable and ``{k}`` (or ``{a}``/``{b}``) for parameters.
        text: the English phrase of the spec, with the same placeholders.
        k_range: inclusive range of ``k``, or None when the primitive has no ``k``.
    """

    name: str
    code: str
    text: str
    k_range: tuple[int, int] | None = None


MAPS = (
    Primitive("plus", "{v} + {k}", "{v} plus {k}", (1, 9)),
    Primitive("minus", "{v} - {k}", "{v} minus {k}", (1, 9)),
    Primitive("times", "{v} * {k}", "{v} times {k}", (2, 5)),
    Primitive("mod", "{v} % {k}", "{v} mod {k}", (2, 5)),
    Primitive("div", "{v} // {k}", "{v} divided by {k} rounded down", (2, 4)),
    Primitive("square", "{v} * {v}", "{v} squared"),
)
CONDS = (
    Primitive("gt", "{v} > {k}", "{v} is greater than {k}", (2, 12)),
    Primitive("lt", "{v} < {k}", "{v} is less than {k}", (2, 12)),
    Primitive("even", "{v} % 2 == 0", "{v} is even"),
    Primitive("odd", "{v} % 2 == 1", "{v} is odd"),
    Primitive("divisible", "{v} % {k} == 0", "{v} is divisible by {k}", (3, 5)),
    Primitive("ne", "{v} != {k}", "{v} is not {k}", (0, 15)),
)
STRS = (
    Primitive("upper", "{v}.upper()", "in upper case"),
    Primitive("reverse", "{v}[::-1]", "reversed"),
    Primitive("head", "{v}[:{k}]", "cut to its first {k} letters", (2, 4)),
    Primitive("tail", "{v}[{k}:]", "without its first {k} letters", (2, 3)),
    Primitive("replace", "{v}.replace('{a}', '{b}')", "with each {a} replaced by {b}"),
)
LOOP_MAPS = tuple(m for m in MAPS if m.name not in ("mod", "square"))
"""``loop``'s maps: no ``square`` (hundreds of digits in five steps), no ``mod`` (constant after one step)."""
POOLS: dict[str, tuple[Primitive, ...]] = {"map": MAPS, "cond": CONDS, "str": STRS, "loop_map": LOOP_MAPS}


@dataclasses.dataclass(frozen=True)
class Frame:
    """The shape of a function.

    Attributes:
        name: the frame's id.
        arg: the argument's name (``xs``, ``n`` or ``s``); the signature is ``f(arg)``.
        slots: the pool of each slot (keys of :data:`POOLS`).
        var: the variable each slot's primitive is written over.
        body: the function body, formatted with the slots' code ``{0}``, ``{1}``, ... and ``{k0}``.
        spec: the one-line spec, formatted with the slots' phrases and ``{k0}``.
    """

    name: str
    arg: str
    slots: tuple[str, ...]
    var: str
    body: str
    spec: str


FRAMES = (
    Frame("filter_map", "xs", ("map", "cond"), "x", "    return [{0} for x in xs if {1}]",
          "return the list of {0} for each x in xs where {1}"),
    Frame("sum_if", "xs", ("map", "cond"), "x", "    return sum({0} for x in xs if {1})",
          "return the sum of {0} for each x in xs where {1}"),
    Frame("count_if", "xs", ("cond",), "x", "    return len([x for x in xs if {0}])",
          "return how many x in xs are such that {0}"),
    Frame("branch", "n", ("cond", "map", "map"), "n", "    if {0}:\n        return {1}\n    return {2}",
          "if {0} return {1}, else return {2}"),
    Frame("loop", "n", ("loop_map",), "t", "    t = {k0}\n    for i in range(n):\n        t = {0}\n    return t",
          "start with t = {k0}, then n times set t to {0}; return t"),
    Frame("text", "s", ("str", "str"), "s", "    return {1}", "return s {0}, then {1}"),
)
FRAME_NAMES = tuple(frame.name for frame in FRAMES)


@dataclasses.dataclass(frozen=True)
class SynthTask:
    """One generated task.

    Attributes:
        frame: the frame's name.
        primitives: the name of each slot's primitive.
        prompt: the first observation (signature, spec, examples).
        solution: the gold function's source.
        cases: ``[[args, expected], ...]`` (args a list of the positional arguments), the examples first.
        near_misses: wrong functions one change away from the solution, each failing some case.
        held_out: whether the structure is a held-out one.
    """

    frame: str
    primitives: tuple[str, ...]
    prompt: str
    solution: str
    cases: list[list[Any]]
    near_misses: list[str]
    held_out: bool

    @property
    def structure(self) -> str:
        """``frame:first+second`` (the part the held-out rule reads), e.g. ``filter_map:times+odd``."""
        return structure_key(self.frame, self.primitives)

    def data(self) -> dict[str, Any]:
        """The task's ``data`` as the env reads it."""
        return {"prompt": self.prompt, "entry_point": ENTRY_POINT, "cases": self.cases, "solution": self.solution,
                "near_misses": self.near_misses, "frame": self.frame, "primitives": list(self.primitives)}


def structure_key(frame: str, primitives: tuple[str, ...] | list[str]) -> str:
    """The held-out unit: the frame and its first two slots' primitives, e.g. ``branch:odd+plus``."""
    return f"{frame}:{'+'.join(primitives[:2])}"


def is_held_out(indices: tuple[int, ...]) -> bool:
    """Whether the structure with these pool indices (of the first two slots) is held out of training."""
    return sum(indices[:2]) % 4 == 1


def _allowed(frame: Frame, indices: tuple[int, ...]) -> bool:
    """False for slot fillings that would make a degenerate function."""
    if len(indices) > 1 and frame.slots[0] == frame.slots[1] and indices[0] == indices[1]:
        return False  # the same string operation twice
    if frame.name == "text" and {STRS[i].name for i in indices} == {"head", "tail"}:
        return False  # cut then drop (or back) is one slice: one phrase would do
    return not (frame.name == "branch" and len(indices) > 2 and indices[1] == indices[2])  # condition moot


def _draw_params(primitive: Primitive, rng: np.random.Generator, after_upper: bool) -> dict[str, Any]:
    params: dict[str, Any] = {}
    if primitive.k_range is not None:
        params["k"] = int(rng.integers(primitive.k_range[0], primitive.k_range[1] + 1))
    if primitive.name == "replace":
        a, b = (str(c) for c in rng.choice(list(LETTERS), size=2, replace=False))
        if after_upper:  # after upper case only capitals are left to replace
            a, b = a.upper(), b.upper()
        params.update(a=a, b=b)
    return params


def _draw_args(frame: Frame, rng: np.random.Generator, example: bool) -> list[Any]:
    if frame.arg == "xs":
        length = int(rng.integers(3, 5)) if example else int(rng.integers(0, 6))
        return [[int(v) for v in rng.integers(0, 16, size=length)]]
    if frame.name == "loop":
        return [int(rng.integers(2, 5)) if example else int(rng.integers(0, 6))]
    if frame.arg == "n":
        return [int(rng.integers(0, 21))]
    length = int(rng.integers(3, 8))
    return ["".join(str(c) for c in rng.choice(list(LETTERS), size=length))]


def _draw_structure(frame: Frame, rng: np.random.Generator, held_out: bool) -> tuple[int, ...]:
    """Pool indices of every slot whose first two give a structure of the wanted kind (held out or not)."""
    for _ in range(MAX_DRAWS):
        indices = tuple(int(rng.integers(len(POOLS[pool]))) for pool in frame.slots)
        if _allowed(frame, indices) and is_held_out(indices) == held_out:
            return indices
    raise RuntimeError(f"no {'held-out' if held_out else 'training'} structure for frame {frame.name}")


def compile_function(source: str) -> Callable[..., Any]:
    """Runs a generated function's source (trusted template code only, never a candidate's) and returns ``f``."""
    namespace: dict[str, Any] = {}
    exec(compile(source, "<synth gold>", "exec"), namespace)  # noqa: S102  (fixed templates, no outside input)
    return namespace[ENTRY_POINT]  # type: ignore[no-any-return]


def outputs(function: Callable[..., Any], cases: list[list[Any]]) -> list[Any] | None:
    """``function``'s outputs on the cases' arguments, or None when it raises on one."""
    try:
        return [function(*args) for args, _ in cases]
    except Exception:  # noqa: BLE001  (a near miss that raises, e.g. a mod by a zero, fails the case anyway)
        return None


def _mutate_expression(expression: str, variable: str, kind: str) -> str | None:
    """``expression`` with one :func:`rlvr_gym_code.mutants.mutate` change of ``kind``, or None when none applies."""
    mutated = mutate(f"def {ENTRY_POINT}({variable}):\n    return {expression}\n", ENTRY_POINT, kind)
    if mutated is None:
        return None
    returned = ast.parse(mutated).body[0].body[0]  # type: ignore[attr-defined]
    return ast.unparse(returned.value)


def _render(frame: Frame, codes: list[str], k0: int) -> str:
    return f"def {ENTRY_POINT}({frame.arg}):\n{frame.body.format(*codes, k0=k0)}\n"


def _variants(frame: Frame, codes: list[str], second_alone: str, k0: int) -> tuple[list[str], list[str]]:
    """``(near misses, degenerate variants)`` of a function, before checking which fail a case.

    Near misses: one slot's expression mutated (a constant off by one, a flipped comparison, a swapped
    operator), the loop's start off by one, a string frame's first or second operation alone. Degenerate
    variants (each must fail some case, or the draw is rejected): a condition always true (or false), a map
    left out: a task whose cases do not exercise every part of the spec would teach the wrong function.
    """
    near: list[str] = []
    slots = [len(codes) - 1] if frame.name == "text" else list(range(len(codes)))
    for slot in slots:
        for kind in NEAR_MISS_KINDS:
            mutated = _mutate_expression(codes[slot], frame.arg if frame.name == "text" else frame.var, kind)
            if mutated is not None:
                near.append(_render(frame, codes[:slot] + [mutated] + codes[slot + 1:], k0))
    if frame.name == "loop":
        near.append(_render(frame, codes, k0 + 1))
    if frame.name == "text":
        near += [_render(frame, [codes[0], codes[0]], k0), _render(frame, [second_alone, second_alone], k0)]
        return near, near[-2:]
    degenerate = []
    if frame.slots[-1] == "cond" or frame.slots[0] == "cond":
        where = frame.slots.index("cond")
        for constant in ("True", "False") if frame.name == "branch" else ("True",):
            degenerate.append(_render(frame, codes[:where] + [constant] + codes[where + 1:], k0))
    if frame.slots[0] == "map":
        degenerate.append(_render(frame, [frame.var] + codes[1:], k0))
    return near, degenerate


def _failing(sources: list[str], cases: list[list[Any]]) -> list[str]:
    """The sources (deduplicated, in order) whose outputs differ from the cases' expected ones."""
    expected = [want for _, want in cases]
    kept: list[str] = []
    for source in sources:
        if source not in kept and outputs(compile_function(source), cases) != expected:
            kept.append(source)
    return kept


def _draw_once(frame: Frame, rng: np.random.Generator, held_out: bool) -> SynthTask | None:
    indices = _draw_structure(frame, rng, held_out)
    primitives = [POOLS[pool][i] for pool, i in zip(frame.slots, indices)]
    codes: list[str] = []
    phrases: list[str] = []
    second_alone = ""
    for slot, primitive in enumerate(primitives):
        params = _draw_params(primitive, rng, after_upper=slot > 0 and primitives[0].name == "upper")
        on = codes[-1] if slot > 0 and frame.name == "text" else frame.var
        codes.append(primitive.code.format(v=on, **params))
        phrases.append(primitive.text.format(v=frame.var, **params))
        second_alone = primitive.code.format(v=frame.var, **params)
    k0 = int(rng.integers(K0_RANGE[0], K0_RANGE[1] + 1))
    solution = _render(frame, codes, k0)
    cases: list[list[Any]] = [[_draw_args(frame, rng, i < NUM_EXAMPLES), None] for i in range(NUM_CASES)]
    results = outputs(compile_function(solution), cases)
    if results is None or len({repr(r) for r in results}) == 1:
        return None  # constant outputs: `return <constant>` would pass
    if len({repr(r) for r in results[:NUM_EXAMPLES]}) < NUM_EXAMPLES:
        return None  # two examples with the same output show less than two different ones
    cases = [[args, result] for (args, _), result in zip(cases, results)]
    near, degenerate = _variants(frame, codes, second_alone, k0)
    near = _failing(near, cases)
    if not near or len(_failing(degenerate, cases)) < len(set(degenerate)):
        return None
    spec = frame.spec.format(*phrases, k0=k0)
    examples = "\n".join(f"{_call(args)} == {result!r}" for args, result in cases[:NUM_EXAMPLES])
    prompt = f"Write def {ENTRY_POINT}({frame.arg}): {spec}.\n{examples}"
    return SynthTask(frame.name, tuple(p.name for p in primitives), prompt, solution, cases, near, held_out)


def _call(args: list[Any]) -> str:
    return f"{ENTRY_POINT}({', '.join(repr(a) for a in args)})"


def generate_task(seed: int, frame: str | None = None, held_out: bool = False) -> SynthTask:
    """The task of ``seed``: the same seed, frame and ``held_out`` always give the same task.

    Args:
        seed: seeds ``numpy.random.default_rng``.
        frame: one of :data:`FRAME_NAMES`, or None to draw one from the seed.
        held_out: draw a held-out structure (test split) instead of a training one.

    Raises:
        ValueError: on an unknown frame.
        RuntimeError: when no acceptable task is drawn in :data:`MAX_DRAWS` tries (a grammar bug).
    """
    if frame is not None and frame not in FRAME_NAMES:
        raise ValueError(f"unknown frame {frame!r}; choose one of {', '.join(FRAME_NAMES)}")
    rng = np.random.default_rng(seed)
    chosen = FRAMES[FRAME_NAMES.index(frame)] if frame else FRAMES[int(rng.integers(len(FRAMES)))]
    for _ in range(MAX_DRAWS):
        task = _draw_once(chosen, rng, held_out)
        if task is not None:
            return task
    raise RuntimeError(f"seed {seed}: no task of frame {chosen.name} with varied outputs and a near miss")


def generate_tasks(env_id: str, split: Split, num_tasks: int, seed_offset: int = 0) -> list[Task]:
    """``num_tasks`` tasks of ``split``, frames in rotation (task ``i`` has frame ``i mod 6``).

    Seeds never overlap between splits: task ``i`` has seed ``SPLIT_SEED_BASE[split] + i``. Train and dev
    tasks use training structures only; in the test split, tasks ``i`` with ``(i // 6) % 2 == 1`` use held-out
    structures (``metadata["held_out"]``). Also an SFT task generator (``sft.demo_tasks``).

    Args:
        env_id: the env the tasks are for (``code/Synth-v0``).
        split: ``train``, ``dev`` or ``test``.
        num_tasks: how many, >= 0.
        seed_offset: index of the first task (so two calls can give disjoint tasks).

    Returns:
        Tasks with ``data`` (:meth:`SynthTask.data`), ``gold`` (the solution), ``wrong`` (the near misses,
        one per turn, up to three) and ``metadata`` (frame, primitives, structure, held_out).

    Raises:
        ValueError: on another env id, an unknown split, or seeds leaving the split's range.
    """
    if env_id != ENV_ID:
        raise ValueError(f"generate_tasks makes tasks for {ENV_ID}, not {env_id!r}")
    check_generator_range(split, SPLIT_SEED_BASE, num_tasks, seed_offset, MAX_TASKS_PER_SPLIT)
    tasks = []
    for i in range(seed_offset, seed_offset + num_tasks):
        seed = SPLIT_SEED_BASE[split] + i
        held_out = split == "test" and (i // len(FRAMES)) % 2 == 1
        synth = generate_task(seed, FRAME_NAMES[i % len(FRAMES)], held_out)
        tasks.append(to_task(synth, f"synth-{split}-{i:06d}", seed, split))
    return tasks


def to_task(synth: SynthTask, task_id: str, seed: int, split: Split = "train") -> Task:
    """The :class:`rlvr_gym.Task` of a generated task."""
    return Task(
        id=task_id, env_id=ENV_ID, options={"seed": seed}, data=synth.data(), gold=[synth.solution],
        wrong=synth.near_misses[:3], split=split,
        metadata={"frame": synth.frame, "primitives": list(synth.primitives), "structure": synth.structure,
                  "held_out": synth.held_out},
    )


def all_structures(held_out: bool) -> list[str]:
    """Every structure key of one kind (held out or training), sorted."""
    keys: set[str] = set()
    for frame in FRAMES:
        pools = [POOLS[pool] for pool in frame.slots[:2]]
        grids = [(i,) for i in range(len(pools[0]))] if len(pools) == 1 else \
            [(i, j) for i in range(len(pools[0])) for j in range(len(pools[1]))]
        for indices in grids:
            if _allowed(frame, indices) and is_held_out(indices) == held_out:
                keys.add(structure_key(frame.name, [p[i].name for p, i in zip(pools, indices)]))
    return sorted(keys)
