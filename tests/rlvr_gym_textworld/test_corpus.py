"""The tokenizer corpus covers every word the env shows, on unseen worlds, held-out layouts included."""

from __future__ import annotations

import re

import numpy as np
import pytest
from rlvr_gym_textworld.corpus import all_commands, corpus_texts
from rlvr_gym_textworld.engine import apply_command
from rlvr_gym_textworld.suites import generate_tasks

import rlvr_gym


def words(texts: list[str]) -> set[str]:
    return {w for text in texts for w in re.findall(r"\w+|[^\w\s]+", text)}


@pytest.mark.parametrize("env_id", ["textworld/ALFWorld-Starter-v0", "textworld/ALFWorld-Easy-v0", "textworld/ALFWorld-v0"])
def test_corpus_covers_unseen_episodes(env_id: str) -> None:
    # actions: admissible, impossible in this house, and naming another house's things (a policy can say any
    # word it knows: "go to cabinet 2" in a kitchen without one must not answer "There is no <unk> <unk> ...")
    vocabulary = words(corpus_texts(env_id, num_episodes=200))
    rng = np.random.default_rng(1)
    seen: list[str] = []
    tasks = generate_tasks(env_id, "test", 40)
    for task, other in zip(tasks, tasks[1:] + tasks[:1]):
        env, elsewhere = rlvr_gym.make(env_id, list_admissible=True), rlvr_gym.make(env_id)
        obs, info = env.reset(options={"task": task})
        elsewhere.reset(options={"task": other})
        seen += [obs]
        for _ in range(10):
            draw = rng.random()
            if draw < 0.4:
                action = info["admissible_actions"][int(rng.integers(len(info["admissible_actions"])))]
            else:
                commands = all_commands(env.world_state if draw < 0.7 else elsewhere.world_state)
                action = commands[int(rng.integers(len(commands)))]
            obs, _, terminated, truncated, info = env.step(action)
            seen += [action, obs]
            if terminated or truncated:
                break
    missing = words(seen) - vocabulary
    assert not missing, sorted(missing)


def test_corpus_contains_failure_messages() -> None:
    texts = corpus_texts(num_episodes=30)
    assert any("go to it first" in t for t in texts) and any(t.startswith("Unknown command") for t in texts)
    assert any("Use: take X from Y." in t for t in texts)


def test_all_commands_are_well_formed(state) -> None:  # type: ignore[no-untyped-def]
    for command in all_commands(state):
        outcome = apply_command(state.copy(), command)
        assert outcome.failure is None or outcome.failure.kind.value == "invalid_action", command


def test_impossible_actions_are_exactly_the_rejected_commands() -> None:
    from rlvr_gym_textworld import impossible_actions

    for task in generate_tasks("textworld/ALFWorld-Easy-v0", "train", 5):
        env = rlvr_gym.make(task.env_id)
        _, info = env.reset(options={"task": task})
        for step in range(3):
            rejected = impossible_actions(env)
            assert rejected and not set(rejected) & set(info["admissible_actions"])
            for command in rejected:
                assert env.fork().step(command).info["failure"] is not None, command
            for command in set(all_commands(env.world_state)) - set(rejected):
                assert env.fork().step(command).info.get("failure") is None, command
            _, _, _, _, info = env.step(env.oracle_action())
        env.close()
    with pytest.raises(TypeError, match="ALFWorldEnv"):
        impossible_actions(rlvr_gym.make("testing/Echo-v0"))
