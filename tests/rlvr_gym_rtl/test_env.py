"""The registered RTL envs: conformance checker, single- and multi-turn episodes, task-less resets."""

from __future__ import annotations

import shutil

import pytest

import rlvr_gym
from rlvr_gym import FailureKind
from rlvr_gym.tasks import load_suite
from rlvr_gym.testing import check_env

ENV_IDS = ["rtl/VerilogEval-v0", "rtl/VerilogEval-Refine-v0", "rtl/Generated-v0", "rtl/Generated-Refine-v0",
           "rtl/GeneratedEasy-Refine-v0"]


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_conformance_checker_passes(env_id: str, judge: object) -> None:
    report = check_env(env_id, num_tasks=2)  # raises CheckError naming the failed check
    assert report.passed and {r.name for r in report.results if r.status == "passed"} >= {
        "gold_and_wrong", "fork_equivalence", "seed_determinism", "close"}


def test_single_turn_gold_and_wrong(judge: object) -> None:
    task = load_suite("rtl/verilogeval")[10]
    env = rlvr_gym.make("rtl/VerilogEval-v0")
    obs, info = env.reset(options={"task": task})
    assert "TopModule" in obs and "```verilog" in obs and info["problem"] == task.data["name"]
    obs, reward, terminated, truncated, info = env.step(task.gold[0])
    assert (reward, terminated, truncated, info["success"]) == (1.0, True, False, True)
    assert info["reward_details"]["components"]["pass"] == 1.0
    env.reset(options={"task": task})
    obs, reward, terminated, truncated, info = env.step(task.wrong[0])
    assert (reward, terminated, info["success"]) == (0.0, True, False)
    assert obs.startswith("FAIL")


def test_refine_returns_feedback_then_accepts_a_fix(judge: object) -> None:
    task = load_suite("rtl/verilogeval-refine")[10]
    env = rlvr_gym.make("rtl/VerilogEval-Refine-v0")
    env.reset(options={"task": task})
    obs, reward, terminated, truncated, info = env.step("I think it is an AND gate.")
    assert not terminated and reward == 0.0 and info["failure"].kind == FailureKind.PARSE_ERROR
    assert "```verilog" in obs and "2 submissions left" in obs
    obs, reward, terminated, truncated, info = env.step(task.wrong[0])
    assert not terminated and "mismatches" in obs and "first at time" in obs and info["attempts_left"] == 1
    branch = env.fork()
    obs, reward, terminated, truncated, info = env.step(task.gold[0])
    assert (reward, terminated, info["success"]) == (1.0, True, True)
    obs, reward, terminated, truncated, info = branch.step(task.wrong[0])
    assert (reward, terminated, truncated, info["success"]) == (0.0, True, False, False)


def test_lint_rejection_is_an_invalid_action_with_the_reason(judge: object) -> None:
    task = load_suite("rtl/verilogeval")[0]
    env = rlvr_gym.make("rtl/VerilogEval-v0")
    env.reset(options={"task": task})
    cheat = task.gold[0].replace("endmodule", "initial $finish;\nendmodule")
    obs, reward, _, _, info = env.step(cheat)
    assert reward == 0.0 and info["failure"].kind == FailureKind.INVALID_ACTION and "$finish" in obs


def test_taskless_resets_draw_problems_from_the_seed(judge: object) -> None:
    env = rlvr_gym.make("rtl/Generated-v0")
    first, _ = env.reset(seed=7)
    again, _ = env.reset(seed=7)
    other, _ = env.reset(seed=8)
    assert first == again != other
    _, info = env.reset(seed=1, options={"task": {"id": "x", "env_id": "rtl/Generated-v0", "options": {"kind": "seqdet"}}})
    assert info["problem"].startswith("gen_seqdet_")
    obs, info = rlvr_gym.make("rtl/VerilogEval-v0").reset(seed=3)
    assert info["problem"].startswith("Prob") and "TopModule" in obs


def test_partial_credit_option(judge: object) -> None:
    task = load_suite("rtl/generated-dev")[4]
    env = rlvr_gym.make("rtl/Generated-v0", partial_credit=True)
    env.reset(options={"task": task})
    _, reward, _, _, info = env.step(task.wrong[0])
    fraction = info["reward_details"]["components"]["match_fraction"]
    assert reward == pytest.approx(0.5 * fraction) and reward < 0.5


def test_oracle_action_solves_a_generated_problem(judge: object) -> None:
    env = rlvr_gym.make("rtl/Generated-Refine-v0")
    with pytest.raises(RuntimeError, match="reset"):
        env.oracle_action()  # type: ignore[attr-defined]
    env.reset(seed=11)
    _, reward, terminated, _, info = env.step(env.oracle_action())  # type: ignore[attr-defined]
    assert (reward, terminated, info["success"]) == (1.0, True, True)


def test_synthesis_requirement_uses_yosys(judge: object) -> None:
    if shutil.which("yosys") is None:
        pytest.skip("yosys not installed")
    task = load_suite("rtl/generated-dev")[2]  # a counter: sequential, with a reset input
    env = rlvr_gym.make("rtl/Generated-v0", require_synthesis=True)
    env.reset(options={"task": task})
    _, reward, _, _, info = env.step(task.gold[0])
    assert reward == 1.0 and info["reward_details"]["components"]["synthesizable"] == 1.0
    # simulates identically, but `wait` is not synthesisable
    unsynthesisable = task.gold[0].replace("endmodule", "  initial begin wait (reset); end\nendmodule", 1)
    env.reset(options={"task": task})
    _, reward, _, _, info = env.step(unsynthesisable)
    assert reward == 0.0 and info["reward_details"]["components"] == {
        "lint": 1.0, "compiled": 1.0, "sim_completed": 1.0, "match_fraction": 1.0, "pass": 0.0, "synthesizable": 0.0}


def test_easy_variant_draws_only_its_kinds_and_gives_partial_credit(judge: object) -> None:
    env = rlvr_gym.make("rtl/GeneratedEasy-Refine-v0")
    kinds = {env.reset(seed=seed)[1]["problem"].split("_")[1] for seed in range(12)}
    assert kinds <= {"adder", "comparator", "decoder", "mux", "reduce"} and len(kinds) >= 3
    with pytest.raises(ValueError, match="kinds"):
        rlvr_gym.make("rtl/Generated-v0", kinds=["alu"])
    task = next(t for t in load_suite("rtl/generated-easy-dev") if t.data["kind"] == "adder")
    near_miss = task.gold[0].replace("assign {cout, sum} =", "assign cout = 1'b0;\n  assign sum =")
    env.reset(options={"task": task})
    _, reward, terminated, _, info = env.step(near_miss)
    assert not terminated and reward == 0.0  # intermediate submissions earn nothing yet
    # cout is wrong only on carries (about half the random samples): 0.5 x match fraction, well above 0
    assert 0.1 < info["attempt"]["value"] < 0.4
    for _ in range(2):
        _, reward, terminated, _, info = env.step(near_miss)
    assert terminated and reward == info["attempt"]["value"] == info["reward_details"]["value"] > 0.1
