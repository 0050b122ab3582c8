"""The registered envs: reset/step contract, seeding, forking, truncation, admissible-action listing."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rlvr_gym_textworld import ALFWorldEnv, generate_tasks, oracle_plan

import rlvr_gym
from rlvr_gym.failures import FailureKind
from rlvr_gym.tasks import Task

ENV_IDS = ["textworld/ALFWorld-Easy-v0", "textworld/ALFWorld-v0", "textworld/ALFWorld-Hard-v0"]


@pytest.mark.parametrize(("env_id", "max_turns"), list(zip(ENV_IDS, [12, 30, 50])))
def test_registered_with_turn_limit_and_default_suite(env_id: str, max_turns: int) -> None:
    spec = rlvr_gym.spec(env_id)
    env = rlvr_gym.make(env_id)
    assert isinstance(env, ALFWorldEnv) and env.max_turns == max_turns
    assert spec.description and spec.default_suite is not None
    assert len(rlvr_gym.load_suite(spec.default_suite)) > 0


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_gold_earns_one_and_wrong_earns_zero(env_id: str) -> None:
    for task in generate_tasks(env_id, "dev", 12):
        for actions, expected in ((task.gold, 1.0), (task.wrong, 0.0)):
            env = rlvr_gym.make(env_id)
            obs, info = env.reset(options={"task": task})
            assert task.data["goal_text"] in obs and info["task_id"] == task.id
            total = 0.0
            for action in actions or []:
                obs, reward, terminated, truncated, info = env.step(action)
                assert "failure" not in info, (action, obs)
                total += reward
                if terminated or truncated:
                    break
            assert total == expected
            if expected == 1.0:
                assert terminated and info["success"] is True and info["reward_details"]["value"] == 1.0


def test_task_seed_decides_the_world_whatever_the_reset_seed() -> None:
    task = generate_tasks("textworld/ALFWorld-v0", "train", 1)[0]
    env = rlvr_gym.make("textworld/ALFWorld-v0")
    obs_a, _ = env.reset(seed=1, options={"task": task})
    obs_b, _ = env.reset(seed=2, options={"task": task})
    assert obs_a == obs_b


def test_reset_without_task_is_seeded_by_the_reset_seed() -> None:
    env = rlvr_gym.make("textworld/ALFWorld-Hard-v0")
    first = [env.reset(seed=3)[0], env.step("look").observation]
    second = [env.reset(seed=3)[0], env.step("look").observation]
    assert first == second
    assert env.reset(seed=4)[0] != first[0]
    plan = oracle_plan(env.world_state)
    results = [env.step(a) for a in plan]
    assert results[-1].terminated and results[-1].reward == 1.0


def test_same_seed_same_trajectory() -> None:
    rng = np.random.default_rng(0)
    env_a, env_b = rlvr_gym.make("textworld/ALFWorld-v0"), rlvr_gym.make("textworld/ALFWorld-v0")
    obs_a, info_a = env_a.reset(seed=11)
    obs_b, _ = env_b.reset(seed=11)
    assert obs_a == obs_b
    for _ in range(25):
        action = info_a["admissible_actions"][int(rng.integers(len(info_a["admissible_actions"])))]
        step_a, step_b = env_a.step(action), env_b.step(action)
        assert step_a[:4] == step_b[:4]
        info_a = step_a.info
        if step_a.terminated or step_a.truncated:
            break


def test_fork_is_equivalent_and_independent() -> None:
    env = rlvr_gym.make("textworld/ALFWorld-Hard-v0")
    env.reset(seed=5)
    plan = oracle_plan(env.world_state)
    for action in plan[:2]:
        env.step(action)
    before = (env.world_state.copy(), list(env.action_history), env.turn)
    for fork in (env.fork(), env.fork_by_deepcopy()):
        replica = env.fork()
        for action in plan[2:]:
            assert fork.step(action)[:4] == replica.step(action)[:4]
        assert fork.world_state == replica.world_state and fork.turn == env.turn + len(plan) - 2
    assert (env.world_state, env.action_history, env.turn) == before
    last = None
    for action in plan[2:]:
        last = env.step(action)
    assert last is not None and last.terminated and last.reward == 1.0


def test_invalid_action_is_observation_and_typed_failure() -> None:
    env = rlvr_gym.make("textworld/ALFWorld-Easy-v0")
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step("grab the apple")
    assert obs.startswith("Unknown command 'grab'.") and reward == 0.0 and not (terminated or truncated)
    assert info["failure"].kind is FailureKind.PARSE_ERROR
    obs, *_, info = env.step("take apple 1 from fridge 1")
    assert info["failure"].kind is FailureKind.INVALID_ACTION


def test_turn_limit_truncates_with_reward_details() -> None:
    env = rlvr_gym.make("textworld/ALFWorld-Easy-v0", max_turns=3)
    env.reset(seed=0)
    results = [env.step("look") for _ in range(3)]
    assert [r.truncated for r in results] == [False, False, True]
    assert results[-1].info["failure"].kind is FailureKind.TURN_LIMIT
    assert results[-1].info["success"] is False and results[-1].info["reward_details"]["value"] == 0.0


def test_admissible_actions_in_info_and_optionally_in_observation() -> None:
    plain = rlvr_gym.make("textworld/ALFWorld-Easy-v0")
    listed = rlvr_gym.make("textworld/ALFWorld-Easy-v0", list_admissible=True)
    obs_plain, info = plain.reset(seed=2)
    obs_listed, _ = listed.reset(seed=2)
    actions = info["admissible_actions"]
    assert actions == sorted(actions) and "look" in actions
    assert "Admissible actions" not in obs_plain
    assert obs_listed == f"{obs_plain}\nAdmissible actions: {', '.join(actions)}."


def test_task_dict_is_accepted_and_bad_options_raise() -> None:
    task = generate_tasks("textworld/ALFWorld-Easy-v0", "train", 1)[0]
    env = rlvr_gym.make("textworld/ALFWorld-Easy-v0")
    assert env.reset(options={"task": task.model_dump()})[0] == env.reset(options={"task": task})[0]
    bad = Task(id="bad", env_id=task.env_id, options={"seed": 1, "layout": "kitchen-99"})
    with pytest.raises(ValueError, match="unknown room template"):
        env.reset(options={"task": bad})


def test_world_state_before_reset_raises() -> None:
    with pytest.raises(RuntimeError, match="reset"):
        _ = ALFWorldEnv().world_state


def test_fork_copies_the_random_generator() -> None:
    """An unseeded reset draws from the env's generator: a fork must draw the same world, independently."""
    env = rlvr_gym.make("textworld/ALFWorld-v0")
    env.reset(seed=3)
    fork = env.fork()
    assert fork.np_random is not env.np_random
    assert fork.reset()[0] == env.reset()[0]
    assert fork.reset()[0] == env.reset()[0]
    env.action_space.sample()  # gives the space a generator, which a fork must copy
    fork = env.fork()
    assert fork.action_space.sample() == env.action_space.sample()


def test_stale_task_goal_is_reported() -> None:
    task = generate_tasks("textworld/ALFWorld-Easy-v0", "train", 1)[0]
    stale = task.model_copy(update={"data": {"goal": {**task.data["goal"], "object_type": "unicorn"}}})
    with pytest.raises(ValueError, match="regenerate it"):
        rlvr_gym.make("textworld/ALFWorld-Easy-v0").reset(options={"task": stale})


def test_custom_difficulty_from_a_dict() -> None:
    knobs = {"num_rooms": [3, 3], "num_objects": [4, 4], "closed_fraction": 1.0, "task_types": ["pick_and_place"]}
    env = rlvr_gym.make("textworld/ALFWorld-v0", difficulty=knobs)
    env.reset(seed=0)
    state = env.world_state
    assert len(state.house.rooms) == 3 and len(state.house.objects) == 4
    assert state.goal.task_type == "pick_and_place" and all(not is_open for is_open in state.is_open.values())
    with pytest.raises(ValueError, match="unknown difficulty field"):
        rlvr_gym.make("textworld/ALFWorld-v0", difficulty={"rooms": 2})


def test_contents_in_sight_lists_every_open_receptacle_on_the_first_observation() -> None:
    env = rlvr_gym.make("textworld/ALFWorld-Starter-v0")
    obs, _ = env.reset(seed=0)
    state = env.world_state
    for receptacle in state.house.room_receptacles[state.room]:
        assert f"the {receptacle}, you see " in obs
        for obj in state.contents[receptacle]:
            assert f"{obj}" in obs
    assert state.observed == set(state.house.room_receptacles[state.room])
    look = env.step("look")[0]  # look describes the room again, contents included
    assert all(f"the {r}, you see " in look for r in state.house.room_receptacles[state.room])
    easy = rlvr_gym.make("textworld/ALFWorld-Easy-v0")
    obs, _ = easy.reset(seed=0)
    assert ", you see a" not in obs.split("Looking around, you see", 1)[1]  # ALFWorld: contents on arrival only
    assert easy.world_state.observed == set()


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=40))
def test_env_step_never_raises_on_any_text(text: str) -> None:
    env = FUZZ_ENV.fork()
    obs, reward, *_, info = env.step(text)
    assert isinstance(obs, str) and obs and reward in (0.0, 1.0)
    assert "admissible_actions" in info
    if "failure" in info:
        assert info["failure"].kind in (FailureKind.PARSE_ERROR, FailureKind.INVALID_ACTION)


FUZZ_ENV = rlvr_gym.make("textworld/ALFWorld-v0")
FUZZ_ENV.reset(seed=0)


def test_exploring_expert_solves_easy_tasks_with_a_longer_budget() -> None:
    from rlvr_gym_textworld import exploring_expert

    for task in generate_tasks("textworld/ALFWorld-Easy-v0", "dev", 20):
        env = rlvr_gym.make("textworld/ALFWorld-Easy-v0", max_turns=20)
        env.reset(options={"task": task})
        result = None
        while result is None or not (result.terminated or result.truncated):
            result = env.step(exploring_expert(env))
        assert result.terminated and result.reward == 1.0
        with pytest.raises(ValueError, match="already holds"):
            exploring_expert(env)
    with pytest.raises(TypeError, match="ALFWorldEnv"):
        exploring_expert(rlvr_gym.make("testing/Echo-v0"))


def test_state_key_names_the_state_not_the_path_to_it() -> None:
    env = rlvr_gym.make("textworld/ALFWorld-Easy-v0")
    _, info = env.reset(seed=3)
    start = info["state_key"]
    receptacles = [a.removeprefix("go to ") for a in info["admissible_actions"] if a.startswith("go to ")]
    first, second = receptacles[0], receptacles[1]
    _, *_, via_first = env.step(f"go to {first}")
    assert via_first["state_key"] != start  # the agent moved
    _, *_, rejected = env.step("grab the apple")
    assert rejected["state_key"] == via_first["state_key"]  # a rejected command changes nothing
    _, *_, there = env.step(f"go to {second}")
    direct = env.fork()
    direct.reset(seed=3)
    _, *_, straight = direct.step(f"go to {second}")
    # same place, same objects: equal keys, although one agent saw more on the way
    assert straight["state_key"] == there["state_key"]
    assert env.world_state.observed != direct.world_state.observed


def test_state_key_returns_when_a_receptacle_is_opened_and_closed_again() -> None:
    env = rlvr_gym.make("textworld/ALFWorld-Easy-v0")
    env.reset(seed=1)
    closed = env.step("go to cabinet 1").info["state_key"]
    opened = env.step("open cabinet 1").info["state_key"]
    assert opened != closed and env.step("close cabinet 1").info["state_key"] == closed
