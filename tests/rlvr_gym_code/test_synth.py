"""code/Synth-v0: the generated task grammar, its held-out split, the multi-turn env and its SFT hooks."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from rlvr_gym_code import malformed_programs
from rlvr_gym_code.batch import judge_many
from rlvr_gym_code.judge import JudgeReport
from rlvr_gym_code.synth import (
    FRAME_NAMES,
    NUM_CASES,
    POOLS,
    all_structures,
    compile_function,
    generate_task,
    generate_tasks,
    is_held_out,
)
from rlvr_gym_code.synth_env import SynthEnv, feedback, synth_tests

import rlvr_gym
from rlvr_gym import FailureKind, Task, load_suite

ENV_ID = "code/Synth-v0"


@pytest.fixture(scope="module")
def train() -> list[Task]:
    return load_suite("code/synth-train").tasks


@pytest.fixture(scope="module")
def test_split() -> list[Task]:
    return load_suite("code/synth-test").tasks


@pytest.fixture
def env() -> Iterator[SynthEnv]:
    made = rlvr_gym.make(ENV_ID, timeout_s=2.0)
    yield made
    made.close()


# -- the grammar -------------------------------------------------------------------------------------------
def test_a_task_is_a_function_of_its_seed_and_the_shipped_suites_are_what_the_script_makes(
        train: list[Task], test_split: list[Task]) -> None:
    assert generate_task(7) == generate_task(7)
    assert generate_task(7) != generate_task(8)
    assert generate_tasks(ENV_ID, "train", 30) == train[:30]
    assert generate_tasks(ENV_ID, "test", 24) == test_split[:24]
    assert generate_tasks(ENV_ID, "train", 5, seed_offset=10) == train[10:15]


def test_the_solution_gives_the_expected_outputs_and_every_near_miss_misses_one(train: list[Task]) -> None:
    for task in train[:60]:
        solution = compile_function(task.data["solution"])
        assert [solution(*args) for args, _ in task.data["cases"]] == [want for _, want in task.data["cases"]]
        assert len(task.data["cases"]) == NUM_CASES and task.gold == [task.data["solution"]]
        for near in task.data["near_misses"]:
            miss = compile_function(near)
            outputs = []
            for args, _ in task.data["cases"]:
                try:
                    outputs.append(miss(*args))
                except Exception as error:  # noqa: BLE001
                    outputs.append(error)
            assert outputs != [want for _, want in task.data["cases"]], near
        assert 1 <= len(task.wrong or []) <= 3


def test_a_hand_checked_task() -> None:
    task = generate_task(0, "filter_map")
    assert task.prompt == ("Write def f(xs): return the list of x squared for each x in xs where x is odd.\n"
                           "f([4, 0, 1]) == [1]\nf([2, 13, 10]) == [169]")
    assert task.solution == "def f(xs):\n    return [x * x for x in xs if x % 2 == 1]\n"
    assert "def f(xs):\n    return [x + x for x in xs if x % 2 == 1]\n" in task.near_misses  # * -> +
    assert task.structure == "filter_map:square+odd"


def test_bad_arguments_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="unknown frame"):
        generate_task(0, "recursion")
    with pytest.raises(ValueError, match="split must be one of"):
        generate_tasks(ENV_ID, "valid", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="makes tasks for"):
        generate_tasks("code/HumanEval-v0", "train", 1)


# -- the held-out split ------------------------------------------------------------------------------------
def test_held_out_structures_never_appear_in_training_but_their_parts_do(
        train: list[Task], test_split: list[Task]) -> None:
    trained = {t.metadata["structure"] for t in train}
    held = {t.metadata["structure"] for t in test_split if t.metadata["held_out"]}
    seen = {t.metadata["structure"] for t in test_split if not t.metadata["held_out"]}
    assert not trained & held
    assert seen <= trained
    assert held <= set(all_structures(True)) and trained <= set(all_structures(False))
    assert len(held) >= 20 and len(trained) == len(all_structures(False))
    # every primitive of a held-out structure is trained: in the same frame and slot when the frame has two
    # slots (with another partner), in other frames when it has one
    parts = {(t.metadata["frame"], slot, name) for t in train for slot, name in enumerate(t.metadata["primitives"][:2])}
    for task in (t for t in test_split if t.metadata["held_out"]):
        frame, names = task.metadata["frame"], task.metadata["primitives"]
        if len(names) == 1:
            assert any(name == names[0] and other != frame for other, _, name in parts), task.metadata
        else:
            assert all((frame, slot, name) in parts for slot, name in enumerate(names[:2])), task.metadata
    assert {t.options["seed"] for t in train}.isdisjoint({t.options["seed"] for t in test_split})
    assert [t.metadata["held_out"] for t in test_split] == [(i // 6) % 2 == 1 for i in range(len(test_split))]
    assert {t.metadata["frame"] for t in test_split if t.metadata["held_out"]} == set(FRAME_NAMES)


def test_the_held_out_rule() -> None:
    maps, conds = [p.name for p in POOLS["map"]], [p.name for p in POOLS["cond"]]
    assert is_held_out((maps.index("minus"), conds.index("gt"))) and not is_held_out((0, 0))
    assert "filter_map:minus+gt" in all_structures(True) and "filter_map:plus+gt" in all_structures(False)
    assert "count_if:lt" in all_structures(True) and "count_if:gt" in all_structures(False)


# -- the env -----------------------------------------------------------------------------------------------
def test_wrong_then_feedback_then_a_fix_is_rewarded(env: SynthEnv, train: list[Task]) -> None:
    task = train[0]
    obs, info = env.reset(options={"task": task})
    assert obs == task.data["prompt"] and info["entry_point"] == "f"
    assert task.gold[0] not in info["admissible_actions"] and task.wrong[0] in info["admissible_actions"]  # type: ignore[index]
    obs, reward, terminated, truncated, info = env.step(task.wrong[0])  # type: ignore[index]
    assert (reward, terminated, truncated) == (0.0, False, False) and "failure" not in info
    assert obs == "Test failed: f([4, 0, 1]) should be [1], got [2].\nFix the function."  # x + x, not x * x
    assert info["reward_details"]["components"]["cases_passed"] == 0.0
    obs, reward, terminated, truncated, info = env.step(f"```python\n{task.gold[0]}```")  # type: ignore[index]
    assert (obs, reward, terminated, truncated, info["success"]) == ("All tests passed.", 1.0, True, False, True)
    assert info["reward_details"]["components"]["cases_passed"] == NUM_CASES


def test_three_wrong_answers_end_at_the_turn_limit(env: SynthEnv, train: list[Task]) -> None:
    task = train[3]
    env.reset(options={"task": task})
    for _ in range(3):
        _, reward, terminated, truncated, info = env.step(task.wrong[0])  # type: ignore[index]
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert info["failure"].kind is FailureKind.TURN_LIMIT and info["success"] is False


@pytest.mark.parametrize(("program", "kind", "says"), [
    ("def f(xs)\n    return xs\n", FailureKind.PARSE_ERROR, "SyntaxError: expected ':' (line 1)."),
    ("I do not know", FailureKind.PARSE_ERROR, "SyntaxError"),
    ("", FailureKind.PARSE_ERROR, "No code found"),
    ("def g(xs):\n    return xs\n", FailureKind.INVALID_ACTION, "Your code does not define f"),
    ("def f(xs):\n    while True:\n        pass\n", FailureKind.TIMEOUT, "timed out"),
    ("def f(xs):\n    while True:\n        print('y' * 4096)\n", FailureKind.OUTPUT_LIMIT, "output limit"),
    ("def f(xs):\n    return 1 // 0\n", None,
     "Test failed: f([4, 0, 1]) raised ZeroDivisionError: integer division or modulo by zero."),
    ("def f(xs):\n    return tuple(x * x for x in xs if x % 2)\n", None, "should be [1], got (1,)."),
])
def test_a_bad_program_gets_its_typed_failure_and_a_short_observation(
        env: SynthEnv, train: list[Task], program: str, kind: FailureKind | None, says: str) -> None:
    env.reset(options={"task": train[0]})
    obs, reward, terminated, truncated, info = env.step(program)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert (info["failure"].kind if "failure" in info else None) is kind, info.get("failure")
    assert says in obs and obs.endswith("Fix the function.") and len(obs) < 400, obs


def test_feedback_is_the_failing_call_or_the_last_line_of_what_went_wrong() -> None:
    failed = JudgeReport(False, reason="test failed (assertion 2): assert ok\nf([1]) should be [2], got [3]")
    assert feedback(failed) == "Test failed: f([1]) should be [2], got [3].\nFix the function."
    loading = JudgeReport(False, reason="the program raised while loading:\nTraceback ...\nNameError: name 'y' is "
                                        "not defined", output="debug 1\ndebug 2\ndebug 3\n")
    assert feedback(loading) == ("Your code raised while loading: NameError: name 'y' is not defined.\n"
                                 "It printed: debug 2 / debug 3\nFix the function.")


def test_a_task_without_data_is_generated_from_its_seed(env: SynthEnv) -> None:
    obs, _ = env.reset(options={"task": Task(id="s", env_id=ENV_ID, options={"seed": 11})})
    assert obs == generate_task(11).prompt
    assert env.oracle_action() == generate_task(11).solution
    assert env.step(env.oracle_action()).reward == 1.0
    first, _ = env.reset(seed=5)
    again, _ = env.reset(seed=5)
    assert first == again


def test_gold_passes_and_every_near_miss_fails_in_the_sandbox_on_a_sample(test_split: list[Task]) -> None:
    sample = test_split[::20]
    jobs = [(program, synth_tests(t.data)) for t in sample for program in [t.gold[0], *t.data["near_misses"]]]  # type: ignore[index]
    reports = judge_many(jobs, batch_size=20, max_workers=2)
    expected = [program == t.gold[0] for t in sample for program in [t.gold[0], *t.data["near_misses"]]]  # type: ignore[index]
    assert [r.passed for r in reports] == expected, [r.reason for r in reports]


def test_conformance() -> None:
    from rlvr_gym.testing import check_env

    assert check_env(ENV_ID, num_tasks=1).passed


# -- warm-start hooks --------------------------------------------------------------------------------------
def test_malformed_programs_are_rejected_without_running(env: SynthEnv, train: list[Task]) -> None:
    env.reset(options={"task": train[4]})
    slips = malformed_programs(env)
    assert len(slips) == 4 and env.oracle_action() not in slips
    for slip in slips:
        env.reset(options={"task": train[4]})
        _, _, _, _, info = env.step(slip)
        assert info["failure"].kind in (FailureKind.PARSE_ERROR, FailureKind.INVALID_ACTION), slip
        assert info["failure"].kind is FailureKind.PARSE_ERROR or "define f" in info["failure"].message
    with pytest.raises(TypeError, match="needs a SynthEnv"):
        malformed_programs(rlvr_gym.make("testing/Echo-v0"))


def test_demonstrations_recover_from_near_misses_and_slips(train: list[Task]) -> None:
    from rlvr_gym_agents.warmstart.demonstrations import demonstrate, oracle_expert

    rng = random.Random(0)
    demos = [demonstrate(task, oracle_expert, 0.4, rng, invalid_rate=0.3, invalid_actions=malformed_programs)
             for task in train[:8]]
    assert all(d.actions[-1] == t.gold[0] for d, t in zip(demos, train) if d.success)  # type: ignore[index]
    assert sum(d.success for d in demos) >= 6
    recovered = [d for d in demos if d.success and len(d.actions) > 1]
    assert recovered and all(not all(d.trained) for d in recovered)
    seen = "\n".join(o for d in demos for o in d.observations)
    assert "Test failed: f(" in seen and ("SyntaxError" in seen or "does not define f" in seen)


def test_mistake_streaks_run_distinct_near_misses(train: list[Task]) -> None:
    from rlvr_gym_agents.warmstart.demonstrations import demonstrate, oracle_expert

    tasks = [t for t in train[:40] if len(t.data["near_misses"]) >= 3][:10]
    near = {t.id: set(t.data["near_misses"]) for t in tasks}
    for task in tasks:  # streak 1: after a first near miss every turn is another, different one; the episode fails
        demo = demonstrate(task, oracle_expert, 0.999, random.Random(0), mistake_streak=1.0)
        assert not demo.success and len(demo.actions) == 3
        assert set(demo.actions) <= near[task.id] and len(set(demo.actions)) == 3
    for task in tasks:  # streak 0: the turn after a mistake is the oracle's
        demo = demonstrate(task, oracle_expert, 0.999, random.Random(0), mistake_streak=0.0)
        assert demo.success and demo.actions[0] in near[task.id] and demo.actions[1] == task.gold[0]  # type: ignore[index]
    # None (the default) draws every turn independently, with the same random numbers as before the option existed:
    # these episodes (g: the oracle's action, a digit: that near miss) are what the code before it produced
    independent = [demonstrate(t, oracle_expert, 0.5, random.Random(i)) for i, t in enumerate(tasks)]
    shown = ["".join("g" if a == t.gold[0] else str(t.data["near_misses"].index(a)) for a in d.actions)  # type: ignore[index]
             for d, t in zip(independent, tasks)]
    assert shown == ["g", "03g", "g", "222", "0g", "g", "g", "104", "120", "10g"]


def test_reject_repeats_answers_a_resubmission_without_judging(train: list[Task]) -> None:
    task = train[0]
    wrong = task.data["near_misses"][0]
    env = rlvr_gym.make(ENV_ID, reject_repeats=True)
    env.reset(options={"task": task})
    first, _, _, _, info = env.step(wrong)
    assert first.startswith("Test failed") and "failure" not in info
    fork = env.fork()  # a tree rollout's branch remembers the failed submission too
    assert fork.step(wrong)[0].startswith("You submitted this function before")
    fork.close()
    spaced = "\n\n" + wrong.replace("\n", "  \n") + "\n\n"  # the same code: trailing spaces and blank lines aside
    again, reward, terminated, truncated, info = env.step(spaced)
    assert again.startswith("You submitted this function before: Test failed") and again.endswith("Change the function.")
    assert first.splitlines()[0] in again and reward == 0.0 and not terminated and not truncated
    assert info["failure"].kind is FailureKind.INVALID_ACTION and info["reward_details"]["value"] == 0.0
    _, reward, terminated, _, _ = env.step(task.gold[0])  # type: ignore[index]
    assert reward == 1.0 and terminated  # it took a turn (the third), and the episode goes on until then
    env.close()
    plain = rlvr_gym.make(ENV_ID)  # the default judges a repeat again
    plain.reset(options={"task": task})
    plain.step(wrong)
    observation, _, _, _, info = plain.step(wrong)
    assert observation == first and "failure" not in info
    plain.close()


def test_reject_repeats_keeps_indentation_and_judges_load_failures_again(train: list[Task]) -> None:
    task = train[0]
    gold = task.gold[0]  # type: ignore[index]
    env = rlvr_gym.make(ENV_ID, reject_repeats=True)
    env.reset(options={"task": task})
    _, _, _, _, info = env.step("  " + gold)  # an indented first line: a syntax error, not the same code as the repair
    assert info["failure"].kind is FailureKind.PARSE_ERROR
    _, reward, terminated, _, _ = env.step(gold)
    assert reward == 1.0 and terminated
    env.close()
    slow = rlvr_gym.make(ENV_ID, reject_repeats=True, timeout_s=0.001, persistent_sandbox=False)
    slow.reset(options={"task": task})
    _, _, _, _, info = slow.step(gold)  # the machine was too slow this time: a timeout, not a verdict on the code
    assert info["failure"].kind is FailureKind.TIMEOUT
    slow.limits = rlvr_gym.make(ENV_ID).limits
    observation, reward, terminated, _, _ = slow.step(gold)
    assert observation == "All tests passed." and reward == 1.0 and terminated
    slow.close()
