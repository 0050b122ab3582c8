"""Near misses and slips of generated RTL problems, for warm starts that show the judge's feedback and the
recovery from it: every near miss compiles and fails simulation; every slip is rejected before simulating."""

from __future__ import annotations

import random

import pytest
from rlvr_gym_agents.warmstart.demonstrations import demonstrate, oracle_expert
from rlvr_gym_rtl import malformed_designs
from rlvr_gym_rtl.generated import EASY_KINDS, generate_problem
from rlvr_gym_rtl.judge import RtlJudge
from rlvr_gym_rtl.problem import design_slips, near_miss_designs

import rlvr_gym


def test_near_misses_edit_one_site_of_the_body_and_never_the_interface() -> None:
    design = "module TopModule (\n  input [3:0] a,\n  output [3:0] y\n);\n  assign y = a + 4'd1 + a;\nendmodule"
    misses = near_miss_designs(design)
    bodies = [m.partition(");")[2] for m in misses]
    assert bodies == ["\n  assign y = a - 4'd1 + a;\nendmodule\n```", "\n  assign y = a + 4'd2 + a;\nendmodule\n```"]
    assert all(m.startswith("```verilog\nmodule TopModule (\n  input [3:0] a,\n  output [3:0] y\n);") for m in misses)
    assert near_miss_designs("not verilog at all") == []
    assert len(near_miss_designs(design, limit=1)) == 1


@pytest.mark.parametrize("kind", EASY_KINDS)
def test_every_near_miss_of_a_generated_problem_compiles_and_fails_simulation(kind: str, judge: RtlJudge) -> None:
    for seed in (3, 4):
        problem = generate_problem(seed, kind)
        misses = near_miss_designs(problem.reference_solution())
        assert misses, f"{problem.name} has no near miss"
        for miss in misses:
            judgement = judge.judge(problem, miss)
            assert judgement.failure is None, (problem.name, miss, judgement.failure)  # compiled, simulated
            assert not judgement.result.success and judgement.result.to_dict()["components"]["compiled"] == 1.0, miss


def test_every_slip_is_rejected_before_simulation(judge: RtlJudge) -> None:
    for problem in (generate_problem(5, "comparator"), generate_problem(3, "reduce")):
        slips = design_slips(problem.reference_solution())
        assert len(slips) == 5
        for slip in slips:
            judgement = judge.judge(problem, slip)
            assert judgement.failure is not None and not judgement.result.to_dict()["components"].get("sim_completed")
        assert "wrong interface" in judge.judge(problem, slips[-1]).failure.message


def test_the_env_offers_near_misses_and_a_demonstration_recovers_from_them(judge: RtlJudge) -> None:
    env = rlvr_gym.make("rtl/GeneratedEasy-Refine-v0", max_turns=2)
    _, info = env.reset(seed=7)
    assert info["admissible_actions"] == near_miss_designs(env.unwrapped.problem.reference_solution())
    with pytest.raises(TypeError, match="VerilogEnv"):
        malformed_designs(object())  # type: ignore[arg-type]
    assert malformed_designs(env.unwrapped) == design_slips(env.unwrapped.problem.reference_solution())
    task = rlvr_gym.Task(id="t", env_id="rtl/GeneratedEasy-Refine-v0", data={"generator_seed": 7, "kind": "mux"})
    demos = [demonstrate(task, oracle_expert, 0.5, random.Random(seed), max_turns=2) for seed in range(6)]
    recovered = [d for d in demos if d.trained == [False, True]]  # a near miss, the simulator's report, the fix
    assert recovered and all(d.success for d in recovered)
    assert all("mismatch" in d.observations[1].lower() for d in recovered), recovered[0].observations[1]
    assert all(d.trained == [True] and d.success for d in demos if d.trained[0])
