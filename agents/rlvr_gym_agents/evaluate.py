"""Held-out evaluation of a policy with the core metrics, and the model agent of ``rlvr-gym eval``.

:func:`evaluate_policy` runs token-in/token-out rollouts through the one episode runner (KV cache reused, the
model's context window enforced) and turns them into :class:`rlvr_gym.evaluation.EpisodeRecord` s summarised by
:func:`rlvr_gym.evaluation.summarize`. :class:`PolicyAgent` is the same route as an
:class:`rlvr_gym.evaluation.EpisodeAgent` for ``rlvr-gym eval --agent <model dir or hub id>``, so a checkpoint is
evaluated exactly as the trainer evaluates it. :func:`evaluate_both` is the trainer's before/after evaluation.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

import rlvr_gym
from rlvr_gym import Env, Failure, Task
from rlvr_gym.evaluation import EpisodeRecord, clip_text, summarize
from rlvr_gym_agents.policy import Policy, SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout import Trajectory, run_episodes
from rlvr_gym_agents.rollout.episode import with_env_kwargs

if TYPE_CHECKING:
    from rlvr_gym_agents.config import EvalConfig
    from rlvr_gym_agents.console import Console


def trajectory_record(trajectory: Trajectory, sample: int, elapsed_s: float = 0.0,
                      task_type: str | None = None, metadata: dict[str, Any] | None = None) -> EpisodeRecord:
    """The evaluation record of a trajectory: the same fields, transcript included, as the harness fills."""
    failures = [f.to_dict() for f in trajectory.failures]
    last_turn_failure = trajectory.turns[-1].failure if trajectory.turns else None
    if trajectory.failures and (last_turn_failure is None or trajectory.failures[-1] is not last_turn_failure):
        last_turn_failure = trajectory.failures[-1]  # an episode-level failure (overflow, crash) ended it
    ended_by = last_turn_failure.kind.value if isinstance(last_turn_failure, Failure) else None
    return EpisodeRecord(
        task_id=trajectory.task_id, sample=sample, env_id=trajectory.env_id, reward=trajectory.reward,
        success=trajectory.success, turns=len(trajectory.turns), terminated=trajectory.terminated,
        truncated=trajectory.truncated, failure=ended_by, failures=failures,
        actions=[t.action for t in trajectory.turns], elapsed_s=elapsed_s, task_type=task_type,
        observations=[clip_text(t.observation) for t in trajectory.turns]
        + ([clip_text(trajectory.last_observation)] if trajectory.turns and trajectory.last_observation else []),
        step_rewards=[t.reward for t in trajectory.turns],
        step_failures=[t.failure.kind.value if t.failure else None for t in trajectory.turns],
        metadata=dict(metadata or {}),
    )


def evaluate_policy(policy: Policy, chat: ChatFormat, tasks: Sequence[Task], k: int, sampling: SamplingParams, *,
                    env_factory: Callable[..., Env] = rlvr_gym.make, max_turns: int | None = None,
                    batch_size: int = 128,
                    step_executor: Executor | None = None) -> tuple[dict[str, Any], list[EpisodeRecord]]:
    """Runs ``k`` episodes per task and summarises them.

    Args:
        policy / chat: what acts.
        tasks: held-out tasks.
        k: samples per task (k of pass@k).
        sampling: temperature 0 for greedy.
        batch_size: episodes run in lock-step at once.
        step_executor: steps each turn's envs concurrently (None: one after another).

    Returns:
        ``(metrics, records)``: :func:`rlvr_gym.evaluation.summarize` metrics and one record per episode.
    """
    jobs = [(task, sample) for task in tasks for sample in range(k)]
    records = policy_records(policy, chat, jobs, sampling, env_factory=env_factory, max_turns=max_turns,
                             batch_size=batch_size, step_executor=step_executor)
    return summarize(records, k), records


def policy_records(policy: Policy, chat: ChatFormat, jobs: Sequence[tuple[Task, int]], sampling: SamplingParams, *,
                   env_factory: Callable[..., Env] = rlvr_gym.make, max_turns: int | None = None,
                   batch_size: int = 128, step_executor: Executor | None = None) -> list[EpisodeRecord]:
    """One evaluation record per ``(task, sample)`` job, the episodes run by the flat sampler's episode runner
    (:func:`rlvr_gym_agents.rollout.run_episodes`: KV cache reused, the context-window policy applied)."""
    records: list[EpisodeRecord] = []
    for start in range(0, len(jobs), batch_size):
        chunk = jobs[start:start + batch_size]
        began = time.monotonic()
        trajectories = run_episodes(policy, chat, [t for t, _ in chunk], sampling, env_factory=env_factory,
                                    max_turns=max_turns, step_executor=step_executor)
        elapsed = (time.monotonic() - began) / max(1, len(chunk))
        for (task, sample), trajectory in zip(chunk, trajectories):
            records.append(trajectory_record(trajectory, sample, elapsed, task.metadata.get("task_type"),
                                             task.metadata))
    return records


class PolicyAgent:
    """The model agent of ``rlvr-gym eval``: a :class:`rlvr_gym.evaluation.EpisodeAgent` that runs its episodes
    through the trainer's episode runner, so a checkpoint is evaluated exactly as training evaluates it
    (token-in/token-out, the model's context window enforced: an episode that would outgrow it ends as truncated
    with a ``context_overflow`` failure).

    Args:
        policy: the policy. chat: the chat format of its tokenizer. sampling: sampling of every turn.
        max_turns: overrides the envs' turn limit when given.
        env_id, env_kwargs: constructor arguments of every ``env_id`` env (the run's ``env.env_id`` and
            ``env.kwargs``); envs of other ids are built without them.
    """

    def __init__(self, policy: Policy, chat: ChatFormat, sampling: SamplingParams,
                 max_turns: int | None = None, env_id: str | None = None,
                 env_kwargs: dict[str, Any] | None = None) -> None:
        self.policy, self.chat, self.sampling, self.max_turns = policy, chat, sampling, max_turns
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs or {})

    def run_episodes(self, jobs: list[tuple[Task, int]], env_factory: Callable[..., Env]) -> list[EpisodeRecord]:
        """One record per ``(task, sample)`` job (see :class:`rlvr_gym.evaluation.EpisodeAgent`)."""
        return policy_records(self.policy, self.chat, jobs, self.sampling,
                              env_factory=with_env_kwargs(env_factory, self.env_id or "", self.env_kwargs),
                              max_turns=self.max_turns)


def load_agent(spec: str, temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int | None = None,
               device: str | None = None, system_prompt: str | None = None, seed: int = 0,
               dtype: str | None = None, max_turns: int | None = None) -> PolicyAgent:
    """A :class:`PolicyAgent` from a model directory or hub id (``rlvr-gym eval --agent SPEC``).

    A checkpoint is evaluated as it was trained: when ``spec`` is a directory inside a run directory (the trainer's
    ``checkpoint``, ``sft_model`` or ``tiny_init``), the run's ``config.json`` supplies the defaults of every
    argument left None: ``system_prompt`` (``env.system_prompt``), ``max_new_tokens`` (``rollout.max_new_tokens``),
    ``max_turns`` (``env.max_turns``), the constructor arguments of the run's env (``env.kwargs`` for
    ``env.env_id``), ``device`` and ``dtype`` (``model.*``; a CUDA device falls back to the CPU when none is
    available) and the context window (``model.max_context_tokens``). Without a run: 32 new tokens,
    the CPU, float32, no system prompt. An empty ``system_prompt`` means none.

    Raises:
        FileNotFoundError: when a local model directory or its tokenizer is missing.
    """
    run = run_config_of(spec)
    model, env, rollout = run.get("model", {}), run.get("env", {}), run.get("rollout", {})
    if device is None:
        device = model.get("device", "cpu")
        if str(device).startswith("cuda") and not torch.cuda.is_available():
            device = "cpu"
    system_prompt = (system_prompt if system_prompt is not None else env.get("system_prompt")) or None
    policy = TransformersPolicy.from_pretrained(spec, device=device, dtype=dtype or model.get("dtype", "float32"),
                                                max_context_tokens=model.get("max_context_tokens"), seed=seed)
    if (model.get("lora") or {}).get("rank", 0) > 0:  # a LoRA run saves adapter-injected names: merge them
        _load_merged_lora(policy, spec, float(model["lora"]["alpha"]))
    sampling = SamplingParams(temperature=temperature, top_p=top_p,
                              max_new_tokens=max_new_tokens or rollout.get("max_new_tokens", 32))
    return PolicyAgent(policy, ChatFormat.for_policy(policy, system_prompt), sampling,
                       max_turns if max_turns is not None else env.get("max_turns"), env.get("env_id"),
                       env.get("kwargs"))


def _load_merged_lora(policy: TransformersPolicy, model_dir: str, alpha: float) -> None:
    """Loads ``model_dir``'s adapter-injected weights into ``policy``'s plain model with the adapters merged."""
    from safetensors.torch import load_file

    from rlvr_gym_agents.policy.lora import merge_lora_state_dict

    state = merge_lora_state_dict(load_file(str(Path(model_dir).expanduser() / "model.safetensors")), alpha)
    missing, _ = policy.model.load_state_dict(state, strict=False)
    if any(not name.endswith("lm_head.weight") for name in missing):  # a tied head is not saved
        raise ValueError(f"{model_dir}: the merged LoRA weights lack {sorted(missing)[:3]}")


def run_config_of(model_dir: str) -> dict[str, Any]:
    """The training run's config (``config.json`` of the run directory holding ``model_dir``), or {} when
    ``model_dir`` is not inside a run directory (a hub id, a plain model folder)."""
    path = Path(model_dir).expanduser()
    candidate = path.parent / "config.json"
    if not path.is_dir() or not candidate.is_file():
        return {}
    try:
        config = json.loads(candidate.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    is_run = isinstance(config, dict) and all(isinstance(config.get(k), dict) for k in ("model", "env", "rollout"))
    return config if is_run else {}


@contextlib.contextmanager
def seeded_sampling(policy: Policy, seed: int | None) -> Iterator[None]:
    """Within the block the policy samples from ``seed`` (``eval.seed``); after it, from where it was before, so
    what the policy samples later is as without the block. No-op when ``seed`` is None or the policy has no
    ``torch.Generator`` of its own (only :class:`TransformersPolicy` has one; a vLLM engine seeds per request)."""
    generator = getattr(policy, "generator", None)
    if seed is None or not isinstance(generator, torch.Generator):
        yield
        return
    state = generator.get_state()
    generator.manual_seed(seed)
    try:
        yield
    finally:
        generator.set_state(state)


def evaluate_both(config: EvalConfig, max_new_tokens: int, max_turns: int | None, policy: Policy, chat: ChatFormat,
                  tasks: list[Task], console: Console, label: str,
                  env_factory: Callable[..., Env] = rlvr_gym.make,
                  step_executor: Executor | None = None) -> dict[str, Any]:
    """Held-out evaluation: ``config.k`` samples per task at ``config.temperature``, and greedy pass@1 (``greedy``).

    Envs come from ``env_factory`` (default :func:`rlvr_gym.make`; the trainer passes its env pool's ``make``);
    ``max_new_tokens`` per turn and ``max_turns`` (None: the env's limit) as in training. With ``config.seed``
    every call samples the same random numbers (:func:`seeded_sampling`).

    Returns:
        ``pass@1_sampled``, ``pass@{k}_sampled``, ``pass@1_greedy`` (None when off), ``mean_turns``,
        ``num_tasks``, ``k``, ``elapsed_s`` (wall seconds) and the full sampled/greedy metrics under ``sampled`` /
        ``greedy``.
    """
    k, max_new = config.k, max_new_tokens
    began = time.monotonic()
    with (console.status(f"evaluating {label}: {len(tasks)} tasks x {k} samples + greedy"),
          seeded_sampling(policy, config.seed)):
        sampled, _ = evaluate_policy(policy, chat, tasks, k, SamplingParams(config.temperature, 1.0, max_new),
                                     env_factory=env_factory, max_turns=max_turns, step_executor=step_executor)
        greedy = None
        if config.greedy:
            greedy, _ = evaluate_policy(policy, chat, tasks, 1, SamplingParams(0.0, 1.0, max_new),
                                        env_factory=env_factory, max_turns=max_turns, step_executor=step_executor)
    result = {
        "pass@1_sampled": sampled["pass@1"], f"pass@{k}_sampled": sampled[f"pass@{k}"],
        "pass@1_greedy": greedy["pass@1"] if greedy else None, "mean_turns_sampled": sampled["mean_turns"],
        "num_tasks": len(tasks), "k": k, "process_cpu_s": time.process_time(), "elapsed_s": time.monotonic() - began,
        "sampled": sampled, "greedy": greedy,
    }
    console.note(f"{label}: pass@1 sampled {result['pass@1_sampled']:.3f}, pass@{k} {result[f'pass@{k}_sampled']:.3f}"
                 + (f", greedy {result['pass@1_greedy']:.3f}" if greedy else ""))
    return result
