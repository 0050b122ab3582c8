"""CodeIO: implement ``main_solution`` from a natural-language spec, verified by differential tests.

Data: ``reasoning_gym/data/codeio.jsonl.gz`` in the ``reasoning-gym`` 0.1.25 wheel (Apache-2.0), itself drawn
from CodeI/O (Li et al., 2025, arXiv 2502.07316). Each record has a task description, an input/output spec,
a reference ``main_solution`` and an ``input_generator`` (``generate_inputs(rng: Random) -> dict``).

Suite building (:func:`build_codeio`, in the sandbox, since the reference and generator are third-party
code): keep records whose code uses only the standard library; draw :data:`CASES_PER_TASK` inputs with the
record's own generator seeded by ``random.Random(task_seed)``; run the reference twice on each (dropping
records whose outputs differ or are not JSON); store the ``(inputs, output)`` pairs as the task's hidden
cases. Gold is the reference; wrong is its first failing mutant.

Verification: the candidate's ``main_solution(**inputs)`` is called remotely for every hidden case and
compared with the stored output after JSON normalisation (tuples as lists), floats with a relative
tolerance of 1e-6 (absolute 1e-9).
"""

from __future__ import annotations

import gzip
import importlib.resources
import json
import sys
import warnings
from typing import Any

from rlvr_gym import RewardResult, Task, TaskSuite
from rlvr_gym.sandbox import SandboxLimits, get_sandbox
from rlvr_gym_code.batch import BatchJudge
from rlvr_gym_code.extract import extract_code
from rlvr_gym_code.humaneval import HumanEvalEnv
from rlvr_gym_code.judge import (
    AST_LOCK,
    DEFAULT_LIMITS,
    JudgeReport,
    PythonTests,
    check_syntax,
    interactive_sandbox,
    judge_python,
)

CODEIO_SOURCE = ("reasoning-gym 0.1.25 wheel, reasoning_gym/data/codeio.jsonl.gz (from CodeI/O, Li et al. 2025, "
                 "arXiv 2502.07316); inputs from each record's own input_generator, outputs from its reference")
CODEIO_LICENCE = "Apache-2.0 (reasoning-gym)"
CASES_PER_TASK = 8
NUM_TASKS = 60
NUM_TEST = 12
ENTRY_POINT = "main_solution"
INSTRUCTIONS = (
    "{task_description}\n\n{input_output_spec}\n\nWrite a Python function `main_solution` with these inputs "
    "(as keyword arguments) and this output. Use only the standard library. Answer with the code in a "
    "```python code block."
)
_COMPARE_SOURCE = '''
import json, math

def _normalise(value):
    return json.loads(json.dumps(value))

def _close(got, want):
    if isinstance(want, float) or (isinstance(got, float) and isinstance(want, int) and not isinstance(want, bool)):
        return (isinstance(got, (int, float)) and not isinstance(got, bool)
                and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9))
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(_close(g, w) for g, w in zip(got, want))
    if isinstance(want, dict):
        return isinstance(got, dict) and got.keys() == want.keys() and all(_close(got[k], want[k]) for k in want)
    return type(got) is type(want) and got == want
'''
_TEST_SOURCE = '''
def check(candidate):
    for inputs, expected in CASES:
        assert _close(_normalise(candidate(**inputs)), expected)
'''


def codeio_tests(data: dict[str, Any]) -> PythonTests:
    """The hidden tests of a CodeIO task: every stored case, compared with tolerance."""
    setup = _COMPARE_SOURCE + f"\nCASES = json.loads({json.dumps(json.dumps(data['cases']))})\n"
    return PythonTests(ENTRY_POINT, _TEST_SOURCE, setup_source=setup)


def verify_codeio(
    data: dict[str, Any], action: str, *, backend: str = "auto", limits: SandboxLimits = DEFAULT_LIMITS,
    judge: BatchJudge | None = None,
) -> tuple[RewardResult, JudgeReport]:
    """Scores an action on a CodeIO task: 1.0 when ``main_solution`` matches every hidden case, else 0.0.

    ``reward.components``: ``passed`` (0/1) and ``cases_passed`` (the number of cases that matched before
    the first mismatch).
    """
    program = extract_code(action)
    tests = codeio_tests(data)
    report = (judge.judge(program, tests) if judge is not None
              else judge_python(program, tests, sandbox=interactive_sandbox(backend), limits=limits))
    held = report.num_asserts if report.passed else max(report.num_asserts - 1, 0)
    components = {"passed": float(report.passed), "cases_passed": float(held)}
    return RewardResult(float(report.passed), components, report.reason[:2000]), report


class CodeIOEnv(HumanEvalEnv):
    """``code/CodeIO-v0``: one program per episode; reward 1.0 iff it matches the reference on every hidden
    case. Takes the same arguments as :class:`rlvr_gym_code.humaneval.HumanEvalEnv` (``persistent_sandbox``
    included).

    Version History:
        v0: first version (8 hidden cases per task, float tolerance 1e-6 relative).
    """

    max_turns = 1
    required_keys = ("task_description", "input_output_spec", "cases")

    def instructions(self) -> str:
        return INSTRUCTIONS.format(**self.data)

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        obs, info = super()._reset(task)
        return obs, {**info, "entry_point": ENTRY_POINT}

    def verify(self, action: str) -> tuple[RewardResult, JudgeReport]:
        with self.step_judge() as judge:
            return verify_codeio(self.data, action, backend=self.backend, limits=self.limits, judge=judge)


# -- building the suite -----------------------------------------------------------------------------------
def load_codeio_records() -> list[dict[str, Any]]:
    """The 3,002 records of ``codeio.jsonl.gz`` from the installed ``reasoning-gym``."""
    path = importlib.resources.files("reasoning_gym") / "data" / "codeio.jsonl.gz"
    with path.open("rb") as raw, gzip.open(raw, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def uses_stdlib_only(source: str) -> bool:
    """True when every ``import`` in ``source`` names a standard-library module (and it parses)."""
    import ast

    if check_syntax(source) is not None:
        return False
    with AST_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            names.add((node.module or "").split(".")[0])
    return names <= set(sys.stdlib_module_names)


_CASE_MAKER = '''
import copy, json, math, random, string
from random import Random
{generator}

{reference}

rng = random.Random({seed})
cases, same = [], True
for _ in range({count}):
    inputs = generate_inputs(rng)
    first = main_solution(**copy.deepcopy(inputs))
    second = main_solution(**copy.deepcopy(inputs))
    same = same and json.dumps(first, sort_keys=True) == json.dumps(second, sort_keys=True)
    cases.append([json.loads(json.dumps(inputs)), json.loads(json.dumps(first))])
print(json.dumps({{"cases": cases, "deterministic": same}}))
'''


def make_cases(record: dict[str, Any], seed: int) -> list[Any] | None:
    """Runs the record's generator and reference in the sandbox; returns the cases or None when the record
    fails, is nondeterministic, or produces non-JSON or oversized values."""
    script = _CASE_MAKER.format(generator=record["input_generator"], reference=record["code_sample"], seed=seed,
                                count=CASES_PER_TASK)
    limits = SandboxLimits(timeout_s=10, cpu_time_s=5, memory_limit_mb=512, output_limit_bytes=200_000)
    result = get_sandbox().run(["python3", "-I", "-S", "make_cases.py"], files={"make_cases.py": script},
                               limits=limits)
    if not result.ok:
        return None
    try:
        made = json.loads(result.stdout)
    except ValueError:
        return None
    if not made["deterministic"] or len(result.stdout) > 20_000:
        return None
    return made["cases"]  # type: ignore[no-any-return]


def build_codeio(num_tasks: int = NUM_TASKS) -> TaskSuite:
    """The ``code/codeio`` suite: ``num_tasks`` records with verified gold and wrong answers.

    Raises:
        RuntimeError: when fewer than ``num_tasks`` records qualify.
    """
    from rlvr_gym_code.batch import judge_many
    from rlvr_gym_code.build_suites import fenced, first_failing_mutant

    tasks: list[Task] = []
    records = [r for r in load_codeio_records()
               if uses_stdlib_only(r["code_sample"]) and uses_stdlib_only(r["input_generator"])]
    for index, record in enumerate(records):
        if len(tasks) >= num_tasks:
            break
        cases = make_cases(record, seed=index)
        if not cases:
            continue
        data = {"task_description": record["task_description"], "input_output_spec": record["input_output_spec"],
                "entry_point": ENTRY_POINT, "cases": cases}
        tasks.append(Task(id=f"codeio-{index:04d}", env_id="code/CodeIO-v0", options={"seed": index}, data=data,
                          gold=[fenced(record["code_sample"])], metadata={"source_index": index}))
    gold = judge_many([(extract_code(t.gold[0]), codeio_tests(t.data)) for t in tasks])  # type: ignore[index]
    tasks = [t for t, r in zip(tasks, gold) if r.passed]
    mutants = first_failing_mutant([(extract_code(t.gold[0]), ENTRY_POINT, codeio_tests(t.data)) for t in tasks])  # type: ignore[index]
    kept = [t.model_copy(update={"wrong": [fenced(mutants[i][1])], "metadata": {**t.metadata, "wrong_kind": mutants[i][0]},
                                 "split": "test" if n >= len(mutants) - NUM_TEST else "train"})
            for n, (i, t) in enumerate((i, t) for i, t in enumerate(tasks) if i in mutants)]
    if len(kept) < num_tasks * 0.8:
        raise RuntimeError(f"only {len(kept)} CodeIO records qualified (wanted about {num_tasks})")
    return TaskSuite("codeio", kept)
