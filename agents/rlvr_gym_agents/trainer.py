"""The GRPO-family trainer on flat or tree multi-turn rollouts. Read :func:`train` top to bottom.

One RL step (Shao et al. 2024, DeepSeekMath §4; DAPO, Yu et al. 2025, for clip-higher, token-mean and
dropping zero-variance groups):

1. draw ``tasks_per_step`` training tasks; run ``group_size`` episodes of each at ``rollout.temperature``
   (``rollout.sampler: flat``), or grow one rollout tree per task with ``group_size`` leaves
   (``rollout.sampler: tree``, :mod:`rlvr_gym_agents.tree_sampler`; ARPO/AEPO branching at turn boundaries);
2. flat: one advantage per episode from its group's rewards (``advantages.group_advantages``), broadcast to
   the episode's generated tokens (observation and prompt tokens have mask 0); tree: per-token advantages of
   ``algorithm.credit`` (``RolloutTree.token_advantages``: soft = the same group advantage per leaf, or
   TreeRL / ARPO-hard / TreePO / GiGPO segment credit); both in :func:`collect_rollouts`;
3. optionally drop groups whose rewards are all equal (zero advantage);
4. ``epochs`` x ``num_minibatches`` optimizer steps of the policy loss (``losses.policy_loss``: PPO-clip
   with clip-higher, token-mean aggregation, optional KL to the reference model), each distinct prompt run
   once and gradients accumulated over length-sorted micro-batches of at most ``algorithm.micro_batch_tokens``
   padded continuation tokens, then clipped (:func:`rlvr_gym_agents.update.ppo_update`);
5. log metrics (JSONL, TensorBoard), evaluate every ``eval.every_steps``, checkpoint every
   ``train.checkpoint_every`` (model, optimizer, step, RNG); resume from the last checkpoint.

Envs run in the trainer's process, or with ``env.num_workers > 0`` in a pool of Ray workers
(:class:`rlvr_gym.workers.EnvPool`): a worker that dies ends its episodes with an ``ENV_CRASH`` failure (a
zero-reward episode in the batch, counted in ``failures/env_crash``) and is replaced; the run goes on.

Before RL the policy is built (or loaded), warm-started by behaviour cloning (:mod:`rlvr_gym_agents.sft`)
and evaluated on held-out tasks; after RL it is evaluated again, both evaluations are printed side by side
and the learning curve is written to ``learning_curve.png``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import json
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

import rlvr_gym
from rlvr_gym import Env, Task
from rlvr_gym_agents.advantages import group_advantages, nonzero_variance_groups
from rlvr_gym_agents.batching import pad_right
from rlvr_gym_agents.chat import ChatFormat
from rlvr_gym_agents.config import TrainConfig, TrainLoopConfig, to_dict
from rlvr_gym_agents.console import Console
from rlvr_gym_agents.flat_credit import gigpo_token_advantages, rejected_turns
from rlvr_gym_agents.policy import Policy, SamplingParams
from rlvr_gym_agents.rollout import Trajectory, run_episodes
from rlvr_gym_agents.run_io import (
    MetricsLogger,
    load_checkpoint,
    plot_learning_curve,
    save_checkpoint,
    save_model_dir,
)
from rlvr_gym_agents.stages import build_policy, build_rollout_policy, evaluate_both, load_task_sources, warm_start
from rlvr_gym_agents.tree_sampler import TreeSampler
from rlvr_gym_agents.update import ppo_update


def train(config: TrainConfig, started: float | None = None) -> dict[str, Any]:
    """Runs a whole recipe: build/load the policy, SFT warm start, evaluate, GRPO, evaluate, plot.

    Envs of rollouts and evaluations run in-process, or in ``env.num_workers`` Ray workers (closed at the end).

    Args:
        config: the recipe.
        started: the ``time.monotonic()`` reading at which the run began, from which ``train.run_budget_s`` and the
            summary's ``elapsed_s`` count (default: now). ``rlvr-gym train`` passes its process's start, so the
            budget covers the imports too (~3 s warm; 58 s on a cold first start on 2026-12-02).

    Returns:
        ``{"before": metrics, "after": metrics, "run_dir": str, "elapsed_s": float}``.
    """
    with env_factory_of(config) as env_factory:
        return _train(config, env_factory, time.monotonic() if started is None else started)


def _train(config: TrainConfig, env_factory: Callable[..., Env], began: float) -> dict[str, Any]:
    """:func:`train` with envs from ``env_factory``, counting time from ``began`` (``time.monotonic()``)."""
    run_dir = Path(config.output.dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(to_dict(config), indent=2) + "\n", encoding="utf-8")
    _seed_everything(config.seed, config.model.num_threads)
    console = Console(config.output.progress)
    logger = MetricsLogger(run_dir, config.output.tensorboard)
    train_tasks, test_tasks = load_task_sources(config)
    policy, chat = build_policy(config, run_dir, train_tasks, test_tasks, console)
    model = policy.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.train.learning_rate,
                                  weight_decay=config.train.weight_decay)
    rollout_policy = build_rollout_policy(config, policy, config.model.path_or_id or str(run_dir / "tiny_init"))
    checkpoint_dir = run_dir / "checkpoint"
    start_step, state = 0, dict[str, Any]()
    if config.train.resume and (checkpoint_dir / "trainer_state.pt").is_file():
        start_step, state = load_checkpoint(checkpoint_dir, model, optimizer, policy.generator)
        console.note(f"resumed from {checkpoint_dir} at RL step {start_step}")
    else:
        if config.sft.enabled:
            state["sft"] = warm_start(config, model, chat, train_tasks, console)
            logger.log({"phase": "sft", "step": 0, **state["sft"]})
        # The reference policy of the KL term (also on resume), and a model directory `rlvr-gym eval` loads.
        save_model_dir(run_dir / "sft_model", model, policy.tokenizer)
        _sync(rollout_policy, policy)
        state["before"] = evaluate_both(config, rollout_policy, chat, test_tasks, console, "before RL", env_factory)
        logger.log({"phase": "eval", "step": 0, **_eval_scalars(state["before"])})
        save_checkpoint(checkpoint_dir, model, policy.tokenizer, optimizer, 0, policy.generator, state)
    _sync(rollout_policy, policy)
    ref_model = _reference_model(model, run_dir / "sft_model") if config.algorithm.loss.kl_coef > 0 else None
    sampling = SamplingParams(config.rollout.temperature, config.rollout.top_p, config.rollout.max_new_tokens)
    tree_sampler = (TreeSampler(rollout_policy, chat, config.rollout.tree, env_factory)
                    if config.rollout.sampler == "tree" else None)
    rl_began = time.monotonic()

    for step in range(start_step + 1, config.train.num_steps + 1):
        step_began = time.monotonic()
        # 1. Tasks and rollouts (group_size episodes, or one tree of group_size leaves, per task);
        # 2. advantages (per episode, or per token for tree credit); 3. dropping zero-variance groups.
        tasks = draw_tasks(train_tasks, config, step)
        rollouts = collect_rollouts(config, rollout_policy, chat, tasks, sampling, step, env_factory, tree_sampler)
        trajectories, keep = rollouts.trajectories, rollouts.keep
        rollout_s = time.monotonic() - step_began
        kept = [t for t, k in zip(trajectories, keep.tolist()) if k]
        advantages = rollouts.advantages[keep]
        # 4. Policy update.
        update = (ppo_update(model, optimizer, kept, advantages, config, ref_model, policy.pad_token_id)
                  if kept else {})
        if kept:
            _sync(rollout_policy, policy)
        # 5. Log, evaluate, checkpoint.
        record = {"phase": "rl", "step": step, "process_cpu_s": time.process_time(), **rollout_metrics(trajectories),
                  **rollouts.metrics, **update, "tokens_generated": generated_tokens(rollouts),
                  "groups_kept": int(keep.sum()) // config.train.group_size, "rollout_s": rollout_s,
                  "step_s": time.monotonic() - step_began}
        logger.log(record)
        console.step(step, config.train.num_steps, record)
        if config.eval.every_steps and step % config.eval.every_steps == 0 and step < config.train.num_steps:
            logger.log({"phase": "eval", "step": step,
                        **_eval_scalars(evaluate_both(config, rollout_policy, chat, test_tasks, console, f"step {step}",
                                                      env_factory))})
        now = time.monotonic()
        stop = rl_stop_reason(config.train, now - began, now - rl_began, now - step_began,
                              state["before"].get("elapsed_s", 0.0))
        periodic = config.train.checkpoint_every and step % config.train.checkpoint_every == 0
        if stop or periodic or step == config.train.num_steps:
            save_checkpoint(checkpoint_dir, model, policy.tokenizer, optimizer, step, policy.generator, state)
        if stop:
            console.note(f"RL stopped by {stop} after step {step}")
            break

    state["after"] = evaluate_both(config, rollout_policy, chat, test_tasks, console, "after RL", env_factory)
    last_step = max([start_step] + [r["step"] for r in logger.read() if r["phase"] == "rl"])
    logger.log({"phase": "eval", "step": last_step, **_eval_scalars(state["after"])})
    plot_learning_curve(logger.read(), run_dir / "learning_curve.png")
    # CPU seconds of this process: with one torch thread, what the run takes on an otherwise idle machine.
    summary = {"before": state["before"], "after": state["after"], "run_dir": str(run_dir),
               "elapsed_s": time.monotonic() - began, "process_cpu_s": time.process_time()}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float) + "\n", encoding="utf-8")
    console.side_by_side(state["before"], state["after"], run_dir)
    logger.close()
    return summary


def rl_stop_reason(loop: TrainLoopConfig, run_s: float, rl_s: float, step_s: float, eval_s: float) -> str | None:
    """Why RL stops after the current step (the cap that binds, for the log), or None to go on.

    Args:
        loop: ``max_time_s`` caps the RL loop; ``run_budget_s`` caps the whole run (see :class:`TrainLoopConfig`).
        run_s: seconds since the run began (:func:`train`'s ``started``).
        rl_s: seconds since the RL loop began.
        step_s: seconds the step just done took (the next one is expected to take as long).
        eval_s: seconds the evaluation before RL took (the final one is expected to take as long).
    """
    if loop.max_time_s is not None and rl_s > loop.max_time_s:
        return f"train.max_time_s={loop.max_time_s}"
    if loop.run_budget_s is not None and run_s + step_s + eval_s > loop.run_budget_s:
        return (f"train.run_budget_s={loop.run_budget_s} ({run_s:.0f} s spent, one more step ~{step_s:.0f} s, "
                f"final evaluation ~{eval_s:.0f} s)")
    return None


@dataclasses.dataclass
class Rollouts:
    """One RL step's rollouts, ready for the update.

    Attributes:
        trajectories: B episodes (flat: ``group_size`` per task in a row; tree: each tree's leaves in a row).
        advantages: (B,) one per episode (flat), or (B, T) per token, right-padded with 0 (tree).
        keep: (B,) bool, False for the episodes of groups dropped for zero reward variance.
        metrics: the sampler's scalars for the step log (tree metrics under ``tree/``; empty for flat).
    """

    trajectories: list[Trajectory]
    advantages: torch.Tensor
    keep: torch.Tensor
    metrics: dict[str, Any]


def collect_rollouts(config: TrainConfig, policy: Policy, chat: ChatFormat, tasks: list[Task],
                     sampling: SamplingParams, step: int, env_factory: Callable[..., Env] = rlvr_gym.make,
                     tree_sampler: TreeSampler | None = None) -> Rollouts:
    """Samples ``group_size`` episodes per task (flat, or the leaves of one tree per task) and credits them.

    Flat: one group advantage per episode (``algorithm.estimator``; credit ``soft``), or per-turn GiGPO
    advantages (credit ``gigpo``, :func:`flat_credit.gigpo_token_advantages`). Tree: per-token advantages of
    ``algorithm.credit`` from :meth:`TreeRollout.training_batch`, whose branching draws are seeded by
    ``(rollout.tree.seed, step)`` so a resumed run samples the same trees. Either way the zero-variance mask
    (DAPO dynamic sampling) is over each task's episode rewards.

    Raises:
        ValueError: ``rollout.sampler == "tree"`` without a ``tree_sampler``.
    """
    groups = torch.arange(len(tasks)).repeat_interleave(config.train.group_size)
    metrics: dict[str, Any] = {}
    if config.rollout.sampler == "tree":
        if tree_sampler is None:
            raise ValueError("rollout.sampler=tree needs a TreeSampler")
        tree_sampler.num_calls = step  # the call index seeds this step's branching draws
        rollout = tree_sampler.sample(tasks, sampling)
        trajectories, rows = rollout.training_batch(config.algorithm.credit, config.algorithm.estimator,
                                                    gigpo=config.algorithm.gigpo,
                                                    invalid_action_penalty=config.algorithm.invalid_action_penalty)
        advantages = pad_right([row.tolist() for row in rows], 0.0, torch.float32)
        metrics = _tree_scalars(rollout.metrics)
        groups = torch.tensor([t.group for t in trajectories])
    else:
        batch = [task for task in tasks for _ in range(config.train.group_size)]
        trajectories = run_episodes(policy, chat, batch, sampling, reuse_kv_cache=config.rollout.reuse_kv_cache,
                                    env_factory=env_factory, max_turns=config.env.max_turns)
        for trajectory, group in zip(trajectories, groups.tolist()):
            trajectory.group = group
    penalty = config.algorithm.invalid_action_penalty
    rewards = torch.tensor([t.reward - penalty * rejected_turns(t) for t in trajectories], dtype=torch.float32)
    if config.rollout.sampler == "flat" and config.algorithm.credit == "gigpo":
        gigpo = config.algorithm.gigpo
        rows = gigpo_token_advantages(trajectories, gigpo.gamma, gigpo.omega, gigpo.std_norm, penalty)
        advantages = pad_right([row.tolist() for row in rows], 0.0, torch.float32)
    elif config.rollout.sampler == "flat":
        advantages = group_advantages(rewards, groups, config.algorithm.estimator)
    keep = (nonzero_variance_groups(rewards, groups) if config.algorithm.drop_zero_variance_groups
            else torch.ones_like(rewards, dtype=torch.bool))
    return Rollouts(trajectories, advantages, keep, metrics)


def generated_tokens(rollouts: Rollouts) -> int:
    """Tokens the policy generated for one RL step: the ``tokens_generated`` of the step record.

    Flat: the sum of ``Trajectory.num_generated_tokens`` over the step's episodes. Tree: each token of a shared
    prefix counted once (the tree metric ``tree/tokens_generated``), not once per leaf that holds it.
    """
    if "tree/tokens_generated" in rollouts.metrics:
        return int(rollouts.metrics["tree/tokens_generated"])
    return sum(t.num_generated_tokens for t in rollouts.trajectories)


@contextlib.contextmanager
def env_factory_of(config: TrainConfig) -> Iterator[Callable[..., Env]]:
    """``rlvr_gym.make``, or with ``env.num_workers > 0`` the ``make`` of an :class:`EnvPool` (envs matching
    ``env.remote`` run in Ray workers) that is closed when the block ends."""
    if config.env.num_workers == 0:
        yield rlvr_gym.make
        return
    from rlvr_gym.workers import EnvPool

    with EnvPool(config.env.num_workers, remote=config.env.remote) as pool:
        yield pool.make


def _tree_scalars(metrics: dict[str, Any]) -> dict[str, Any]:
    """Tree metrics as flat log keys: ``tree/<name>``, dicts as ``tree/<name>/<key>`` (lists kept as lists)."""
    flat: dict[str, Any] = {}
    for name, value in metrics.items():
        if isinstance(value, dict):
            flat.update({f"tree/{name}/{key}": v for key, v in value.items()})
        else:
            flat[f"tree/{name}"] = value
    return flat


def draw_tasks(train_tasks: list[Task] | None, config: TrainConfig, step: int) -> list[Task]:
    """The training tasks of one RL step, a pure function of (seed, step) so a resumed run draws the same.

    From ``train_tasks`` when given (without replacement within a step), else fresh seeded tasks of
    ``env.env_id`` (seeds from 1,000,000 up, away from suite seeds).
    """
    rng = random.Random(config.seed * 1_000_003 + step)
    count = config.train.tasks_per_step
    if train_tasks:
        return rng.sample(train_tasks, min(count, len(train_tasks)))
    seeds = [1_000_000 + rng.randrange(10**9) for _ in range(count)]
    return [Task(id=f"train-{s}", env_id=config.env.env_id, options={"seed": s}) for s in seeds]


def rollout_metrics(trajectories: list[Trajectory]) -> dict[str, float]:
    """Mean reward, success rate, turns, generated tokens, entropy and failure rates of a batch."""
    generated = sum(t.num_generated_tokens for t in trajectories)
    entropy = sum(sum(e for e, m in zip(t.entropies, t.loss_mask) if m) for t in trajectories)
    failures: dict[str, int] = {}
    for trajectory in trajectories:
        for failure in trajectory.failures:
            failures[failure.kind.value] = failures.get(failure.kind.value, 0) + 1
    metrics = {
        "reward_mean": float(np.mean([t.reward for t in trajectories])),
        "success_rate": float(np.mean([t.success for t in trajectories])),
        "turns_mean": float(np.mean([len(t.turns) for t in trajectories])),
        "tokens_mean": float(np.mean([len(t.token_ids) for t in trajectories])),
        "rollout_entropy": entropy / max(generated, 1),
    }
    metrics.update({f"failures/{kind}": count / len(trajectories) for kind, count in sorted(failures.items())})
    return metrics


def _reference_model(model: torch.nn.Module, sft_dir: Path) -> torch.nn.Module:
    """A frozen copy of ``model`` holding the weights saved after the warm start."""
    from safetensors.torch import load_file

    ref = copy.deepcopy(model)
    ref.load_state_dict(load_file(str(sft_dir / "model.safetensors")), strict=False)
    if getattr(ref.config, "tie_word_embeddings", False):
        ref.tie_weights()  # type: ignore[operator]
    return ref.eval().requires_grad_(False)


def _sync(rollout_policy: Any, policy: Any) -> None:
    """Pushes the trained weights to a separate rollout engine (vLLM); no-op when they are the same object."""
    if rollout_policy is not policy:
        rollout_policy.sync_weights(policy.model.named_parameters())


def _eval_scalars(result: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in result.items() if isinstance(value, (int, float)) or value is None}


def _seed_everything(seed: int, num_threads: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, num_threads))
