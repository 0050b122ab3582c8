"""Flat rollouts: token-in/token-out, loss masks, context overflow, env crashes."""

from __future__ import annotations

from typing import Any

from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout import run_episodes

import rlvr_gym
from rlvr_gym import Env, FailureKind, StepResult, Task
from rlvr_gym.testing.toy import EchoEnv, echo_tasks


class _LongEcho(EchoEnv):
    """Echo with 6 turns, so episodes of a random policy are multi-turn."""

    max_turns = 6


def test_ids_trained_on_are_the_generated_ids_plus_observation_ids(tiny_policy: TransformersPolicy) -> None:
    """Over >= 100 multi-turn episodes: context = prompt | gen 1 | obs 1 | gen 2 | ...; mask = generated."""
    chat = ChatFormat(tiny_policy.tokenizer)
    tasks = echo_tasks(120)
    trajectories = run_episodes(tiny_policy, chat, tasks, SamplingParams(max_new_tokens=4),
                                env_factory=lambda env_id, **kw: _LongEcho(**kw))
    assert len(trajectories) == 120
    assert sum(len(t.turns) > 1 for t in trajectories) >= 50
    for task, trajectory in zip(tasks, trajectories):
        expected = chat.prompt_ids(f"Say the word: {task.data['target']}")
        mask = [0] * len(expected)
        for i, turn in enumerate(trajectory.turns):
            start, end = turn.span
            generated = trajectory.token_ids[start:end]
            assert start == len(expected) and chat.decode_action(generated) == turn.action
            expected += generated
            mask += [1] * len(generated)
            if i + 1 < len(trajectory.turns):
                obs = chat.observation_ids(trajectory.turns[i + 1].observation, turn.finish_reason == "stop")
                expected += obs
                mask += [0] * len(obs)
        assert trajectory.token_ids == expected
        assert trajectory.loss_mask == mask
        assert all(lp == 0.0 for lp, m in zip(trajectory.logps, mask) if not m)
        assert all(lp < 0.0 for lp, m in zip(trajectory.logps, mask) if m)


def test_rollouts_with_and_without_kv_cache_are_identical(tiny_model_dir: Any) -> None:
    """Groups of 2 episodes per task: with the cache, each group's prompt is prefilled once and copied."""
    results = []
    for reuse in (True, False):
        policy = TransformersPolicy.from_pretrained(str(tiny_model_dir), seed=3)
        groups = [task for task in echo_tasks(8) for _ in range(2)]
        trajectories = run_episodes(policy, ChatFormat(policy.tokenizer), groups,
                                    SamplingParams(max_new_tokens=4), reuse_kv_cache=reuse,
                                    env_factory=lambda env_id, **kw: _LongEcho(**kw))
        results.append([(t.token_ids, t.reward) for t in trajectories])
    assert results[0] == results[1]


def test_gold_actions_score_through_the_rollout(tiny_policy: TransformersPolicy) -> None:
    """Episode bookkeeping: reward, success and termination come from the env."""
    chat = ChatFormat(tiny_policy.tokenizer)
    say_apple = chat.encode("say apple") + [chat.end_of_turn_id]

    class _Fixed:
        stop_token_ids = tiny_policy.stop_token_ids
        max_context_tokens = 256

        def generate(self, token_ids: Any, sampling: Any, state: Any = None) -> Any:
            from rlvr_gym_agents.policy import Generation

            return [Generation(list(say_apple), [-0.1] * len(say_apple), [1.0] * len(say_apple), "stop")
                    for _ in token_ids], None

    tasks = echo_tasks(2)  # targets: apple, bread
    first, second = run_episodes(_Fixed(), chat, tasks, SamplingParams(), reuse_kv_cache=False)
    assert (first.reward, first.success, first.terminated, first.truncated) == (1.0, True, True, False)
    assert (second.reward, second.success, len(second.turns)) == (0.0, False, 1)


def test_context_overflow_truncates_without_crashing(tiny_model_dir: Any) -> None:
    policy = TransformersPolicy.from_pretrained(str(tiny_model_dir), max_context_tokens=24)
    trajectories = run_episodes(policy, ChatFormat(policy.tokenizer), echo_tasks(8),
                                SamplingParams(max_new_tokens=8), env_factory=lambda env_id, **kw: _LongEcho(**kw))
    overflowed = [t for t in trajectories if any(f.kind is FailureKind.CONTEXT_OVERFLOW for f in t.failures)]
    assert overflowed, "a 24-token window must overflow within a 6-turn episode"
    for trajectory in overflowed:
        assert trajectory.truncated and not trajectory.terminated
        overflow = trajectory.failures[-1]
        assert overflow.kind is FailureKind.CONTEXT_OVERFLOW and overflow.details["context_tokens"] + 8 > 24
        # the observation the policy never saw is not part of the trajectory
        assert len(trajectory.token_ids) == trajectory.turns[-1].span[1]
    assert all(len(t.token_ids) <= 24 for t in trajectories)


class _CrashingEnv(Env):
    """Raises in step on its second turn (or in reset when the task says so)."""

    max_turns = 5

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        if task is not None and task.data.get("crash_in_reset"):
            raise RuntimeError("back-end died during reset")
        return "Say the word: apple", {}

    def _step(self, action: str) -> StepResult:
        if self.turn >= 2:
            raise RuntimeError("back-end died")
        return StepResult("Wrong.", 0.0, False, False, {})


def test_env_raising_becomes_env_crash(tiny_policy: TransformersPolicy) -> None:
    tasks = [Task(id="a", env_id="testing/Crash-v0"), Task(id="b", env_id="testing/Crash-v0", data={"crash_in_reset": True})]
    step_crash, reset_crash = run_episodes(tiny_policy, ChatFormat(tiny_policy.tokenizer), tasks,
                                           SamplingParams(max_new_tokens=3),
                                           env_factory=lambda env_id, **kw: _CrashingEnv(**kw))
    assert [f.kind for f in step_crash.failures][-1] is FailureKind.ENV_CRASH
    assert "back-end died" in step_crash.failures[-1].message
    assert len(step_crash.turns) == 2 and step_crash.truncated and step_crash.reward == 0.0
    assert reset_crash.failures[0].kind is FailureKind.ENV_CRASH and reset_crash.turns == []


def test_real_registry_env_runs(tiny_policy: TransformersPolicy) -> None:
    trajectories = run_episodes(tiny_policy, ChatFormat(tiny_policy.tokenizer), echo_tasks(4),
                                SamplingParams(max_new_tokens=4), env_factory=rlvr_gym.make)
    assert all(t.terminated or t.truncated for t in trajectories)
    assert all(t.turn_spans == [turn.span for turn in t.turns] for t in trajectories)


def test_concurrent_env_steps_overlap_and_give_the_same_trajectories(tiny_policy: TransformersPolicy) -> None:
    """A turn's env steps dispatched at once on a thread pool (a slow env held the whole batch): 8 episodes of an env
    whose steps sleep give the same ids, rewards and failures as stepping them one after another, and the steps
    really run at the same time (the speed-up is measured by ``benchmarks/distributed_scaling.py``)."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from rlvr_gym.testing.toy import SlowEchoEnv

    lock, in_flight, most = threading.Lock(), [0], [0]

    class Counting(SlowEchoEnv):
        def _step(self, action: str) -> StepResult:
            with lock:
                in_flight[0] += 1
                most[0] = max(most[0], in_flight[0])
            try:
                return super()._step(action)
            finally:
                with lock:
                    in_flight[0] -= 1

    def make(env_id: str, **kwargs: Any) -> SlowEchoEnv:
        return Counting(step_delay_s=0.2, **kwargs)

    tasks = echo_tasks(8)
    chat = ChatFormat(tiny_policy.tokenizer)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=4)
    serial = run_episodes(tiny_policy, chat, tasks, sampling, env_factory=make)
    assert most[0] == 1
    with ThreadPoolExecutor(max_workers=8) as executor:
        concurrent = run_episodes(tiny_policy, chat, tasks, sampling, env_factory=make, step_executor=executor)
    assert most[0] > 1
    assert [t.token_ids for t in concurrent] == [t.token_ids for t in serial]
    assert [(t.reward, t.success, [f.kind for f in t.failures]) for t in concurrent] == \
        [(t.reward, t.success, [f.kind for f in t.failures]) for t in serial]
