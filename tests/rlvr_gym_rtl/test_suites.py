"""The shipped suites: every gold passes and every wrong fails with the real judge.

The default tier checks a spread sample; ``-m slow`` runs every task of every suite.
"""

from __future__ import annotations

import json

import pytest
from rlvr_gym_rtl.generated import KINDS, generate_problem
from rlvr_gym_rtl.judge import RtlJudge
from rlvr_gym_rtl.problem import RtlProblem, gold_action
from rlvr_gym_rtl.verilog_eval import BUNDLED_DIR, load_problem, problem_names, resolve_problem_dir

import rlvr_gym
from rlvr_gym.tasks import Task, load_suite, tasks_dir

SUITES = ["verilogeval", "verilogeval-refine", "generated-train", "generated-dev", "generated-test",
          "generated-refine-dev", "generated-easy-dev", "generated-easy-test"]


def _problem(task: Task) -> RtlProblem:
    data = task.data
    if "problem_dir" in data:
        return load_problem(resolve_problem_dir(data["problem_dir"]), data["name"])
    return generate_problem(data["generator_seed"], data["kind"])


def _assert_gold_passes_wrong_fails(judge: RtlJudge, task: Task) -> None:
    problem = _problem(task)
    gold = judge.judge(problem, task.gold[0])
    assert gold.result.success, (task.id, gold.result.reason)
    assert task.wrong is not None
    wrong = judge.judge(problem, task.wrong[0])
    assert not wrong.result.success and wrong.result.value == 0.0, task.id


@pytest.mark.parametrize("suite_name", SUITES)
def test_suite_loads_with_registered_env_and_gold_and_wrong(suite_name: str) -> None:
    suite = load_suite(f"rtl/{suite_name}")
    assert len(suite) >= 40
    for task in suite:
        assert rlvr_gym.spec(task.env_id).default_suite is not None
        assert task.gold and task.wrong
        turns = rlvr_gym.spec(task.env_id).max_turns
        assert len(task.wrong) == turns, "a refine task's wrong sequence uses every submission"


def test_bundled_problems_and_manifest() -> None:
    directory = tasks_dir() / BUNDLED_DIR
    names = problem_names(directory)
    manifest = json.loads((directory / "manifest.json").read_text())
    assert len(names) == manifest["num_problems"] == 104 and (directory / "LICENSE").is_file()
    assert manifest["excluded_with_iverilog_11"] == {
        "Prob151_review2015_fsm": "iverilog 11: 'sorry: This cast operation is not yet supported' (enum casts)"}
    suite = load_suite("rtl/verilogeval")
    assert len(suite) == 103 and "ve-Prob151_review2015_fsm" not in {t.id for t in suite}


def test_sample_of_verilogeval_gold_and_wrong(judge: RtlJudge) -> None:
    suite = load_suite("rtl/verilogeval")
    for task in suite.tasks[::20]:
        _assert_gold_passes_wrong_fails(judge, task)


def test_generator_is_deterministic_and_seeds_differ() -> None:
    assert generate_problem(5, "counter") == generate_problem(5, "counter")
    assert generate_problem(5, "counter") != generate_problem(6, "counter")
    assert generate_problem(9) == generate_problem(9)
    with pytest.raises(ValueError, match="unknown problem kind"):
        generate_problem(1, "alu")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_generated_kind_is_solvable_and_checked(kind: str, judge: RtlJudge) -> None:
    problem = generate_problem(123, kind)
    assert problem.name == f"gen_{kind}_123" and "TopModule" in problem.prompt
    assert judge.judge(problem, gold_action(problem.reference_solution())).result.success
    # a stuck-at-zero design must fail every generated testbench
    ports = judge.problem_facts(problem).ports
    decls = ", ".join(p.describe() for p in ports)
    outputs = "".join(f"  assign {p.name} = '0;\n" for p in ports if p.direction == "Out")
    stuck = f"module TopModule({decls});\n{outputs}endmodule\n"
    assert not judge.judge(problem, gold_action(stuck)).result.success


@pytest.mark.slow
@pytest.mark.parametrize("suite_name", ["verilogeval", "generated-train", "generated-dev", "generated-test"])
def test_full_suite_gold_and_wrong(suite_name: str, judge: RtlJudge) -> None:
    for task in load_suite(f"rtl/{suite_name}"):
        _assert_gold_passes_wrong_fails(judge, task)


def test_the_easy_suites_and_fresh_training_problems_use_disjoint_seeds() -> None:
    from rlvr_gym_rtl.env import TASKLESS_MIN_SEED

    seeds = {name: {t.data["generator_seed"] for t in load_suite(f"rtl/generated-easy-{name}")} for name in ("dev", "test")}
    assert len(seeds["dev"]) == 40 and len(seeds["test"]) == 200
    assert not seeds["dev"] & seeds["test"]
    assert max(seeds["dev"] | seeds["test"]) < TASKLESS_MIN_SEED  # training draws task-less problems above
