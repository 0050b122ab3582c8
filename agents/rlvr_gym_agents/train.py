"""The trainer: the only reader of the whole :class:`TrainConfig`. Read :func:`train` top to bottom, then :func:`rl_step`.

One RL step (Shao et al. 2024, DeepSeekMath §4; DAPO, Yu et al. 2025, for clip-higher, token-mean and dropping
zero-variance groups), each line a stage package:

1. **sample** (:mod:`rlvr_gym_agents.rollout`): ``tasks_per_step`` training tasks, ``group_size`` episodes each
   (``rollout.sampler: flat``) or one rollout tree of ``group_size`` leaves per task (``tree``; ARPO/AEPO
   branching at turn boundaries), through the one episode runner;
2. **credit** (:mod:`rlvr_gym_agents.credit`): per-token advantages of ``algorithm.credit`` (soft, gigpo, treerl,
   ...), the invalid-action penalty applied once;
3. **drop** the groups whose returns are all equal (zero advantage; DAPO dynamic sampling);
4. **update** (:mod:`rlvr_gym_agents.update`): ``epochs`` x ``num_minibatches`` clipped policy-gradient steps, in
   this process or on ``cluster.learners`` torch.distributed ranks (:class:`rlvr_gym_agents.cluster.LearnerGroup`);
5. **sync** the weights to a separate rollout engine (vLLM); no-op for the transformers engine;
6. **log / evaluate / checkpoint** (metrics.jsonl, TensorBoard; held-out evaluation every ``eval.every_steps``
   or ``eval.every_generated_tokens``; an atomic checkpoint every ``train.checkpoint_every``; a rerun in the same
   ``output.dir`` resumes from it).

Before RL the policy is built (or loaded), warm-started by behaviour cloning (:mod:`rlvr_gym_agents.warmstart`)
and evaluated on held-out tasks (:mod:`rlvr_gym_agents.evaluate`); after RL it is evaluated again, both are
printed side by side and the learning curve is written to ``learning_curve.png``.

Envs run in the trainer's process, or with ``env.num_workers > 0`` in a pool of Ray workers
(:class:`rlvr_gym.workers.EnvPool`): a worker that dies ends its episodes with an ``ENV_CRASH`` failure and is
replaced; the run goes on. A step in which every episode crashed stops the run (:class:`TrainingError`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import json
import random
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

import rlvr_gym
from rlvr_gym import Env, FailureKind, Task, load_suite, spec
from rlvr_gym_agents.cluster.rollout_workers import AsyncRollouts, RolloutWorkers, remote_sampler
from rlvr_gym_agents.config import ConfigError, TrainConfig, TrainLoopConfig, to_dict
from rlvr_gym_agents.console import Console
from rlvr_gym_agents.credit import CreditConfig, assign_credit, informative_groups, sibling_advantage_metrics
from rlvr_gym_agents.credit.rewards import Penalty
from rlvr_gym_agents.evaluate import evaluate_both
from rlvr_gym_agents.policy import Policy, SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.policy.lora import apply_lora, merged_named_parameters
from rlvr_gym_agents.policy.transformers import check_model_source
from rlvr_gym_agents.rollout.flat import FlatSampler
from rlvr_gym_agents.rollout.tree_sampler import TreeSampler
from rlvr_gym_agents.rollout.types import RolloutBatch, Trajectory
from rlvr_gym_agents.run_io import (
    MetricsLogger,
    load_checkpoint,
    plot_learning_curve,
    recover_checkpoint,
    save_checkpoint,
    save_model_dir,
)
from rlvr_gym_agents.update.ppo import PPOUpdater, UpdateConfig, Updater
from rlvr_gym_agents.update.precision import autocast_dtype, parameter_dtype
from rlvr_gym_agents.warmstart import build_tiny_policy, sft_demonstrations, warm_start
from rlvr_gym_agents.warmstart.demonstrations import Demonstration

Sampler = FlatSampler | TreeSampler | RolloutWorkers | AsyncRollouts
"""What samples a step's episodes: in-process, or on Ray rollout workers (``cluster.rollout_workers``)."""


class TrainingError(RuntimeError):
    """The run cannot go on (for example every episode of a step crashed); the message says why and how to fix it."""


@dataclasses.dataclass
class Run:
    """What one run's RL steps share: the stages' objects and configs, built once by :func:`train`."""

    config: TrainConfig
    policy: TransformersPolicy
    rollout_policy: Policy
    sampler: Sampler
    optimizer: torch.optim.Optimizer
    credit: CreditConfig
    updater: Updater
    train_tasks: list[Task] | None
    lost_steps: int = 0
    """Consecutive steps so far whose every episode was lost with its rollout worker (:func:`check_not_all_crashed`)."""


def train(config: TrainConfig, started: float | None = None) -> dict[str, Any]:
    """Runs a whole recipe: build/load the policy, SFT warm start, evaluate, RL, evaluate, plot.

    Envs of rollouts and evaluations run in-process, or in ``env.num_workers`` Ray workers (closed at the end).

    Args:
        config: the recipe.
        started: the ``time.monotonic()`` reading at which the run began, from which ``train.run_budget_s`` and the
            summary's ``elapsed_s`` count (default: now). ``rlvr-gym train`` passes its process's start, so the
            budget covers the imports too.

    Returns:
        ``{"before": metrics, "after": metrics, "run_dir": str, "elapsed_s": float}``.

    Raises:
        rlvr_gym.UnknownEnvError / rlvr_gym.SuiteNotFoundError: an env id or suite of the recipe does not exist
            (before any work).
        TrainingError: every episode of an RL step crashed, or a learner rank died (``cluster.learners > 1``; a
            rerun resumes from the last checkpoint).
    """
    with (contextlib.ExitStack() as closing, env_factory_of(config) as env_factory,
          step_executor_of(config) as step_executor):
        return _train(config, env_factory, step_executor, time.monotonic() if started is None else started, closing)


def _train(config: TrainConfig, env_factory: Callable[..., Env], step_executor: Executor | None,
           began: float, closing: contextlib.ExitStack) -> dict[str, Any]:
    """:func:`train` with envs from ``env_factory`` (stepped on ``step_executor``), counting time from ``began``;
    what the run starts on Ray (rollout workers, a learner group) is closed with ``closing``."""
    train_tasks, test_tasks = load_task_sources(config)
    run_dir = Path(config.output.dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(to_dict(config), indent=2) + "\n", encoding="utf-8")
    _seed_everything(config.seed, config.model.num_threads)
    console = Console(config.output.progress)
    logger = MetricsLogger(run_dir, (["tensorboard"] if config.output.tensorboard else []) + list(config.output.trackers),
                           to_dict(config))
    demos = _shared_demonstrations(config, train_tasks, console)
    policy, chat = build_policy(config, run_dir, train_tasks, test_tasks, console, demos)
    optimizer = build_optimizer(config, policy.model)
    rollout_policy = build_rollout_policy(config, policy, config.model.path_or_id or str(run_dir / "tiny_init"))
    evaluate = _evaluator(config, rollout_policy, chat, test_tasks, console, env_factory, step_executor)
    checkpoint_dir = run_dir / "checkpoint"
    start_step, state = 0, dict[str, Any]()
    recover_checkpoint(checkpoint_dir)
    if config.train.resume and (checkpoint_dir / "trainer_state.pt").is_file():
        start_step, state = load_checkpoint(checkpoint_dir, policy.model, optimizer, policy.generator)
        logger.truncate(state.get("metrics_lines", logger.num_lines()))  # lines after the checkpoint come again
        console.note(f"resumed from {checkpoint_dir} at RL step {start_step}")
    else:
        logger.truncate(0)  # a run that starts over starts its log over
        if config.sft.enabled:
            state["sft"] = warm_start(config.sft, config.env, config.seed, policy.model, chat, train_tasks, console,
                                      autocast_dtype(config.train.precision, config.model.dtype), demos and demos())
            logger.log({"phase": "sft", "step": 0, **state["sft"]})
        # The reference policy of the KL term (also on resume), and a model directory `rlvr-gym eval` loads.
        save_model_dir(run_dir / "sft_model", policy.model, policy.tokenizer)
        sync_weights(policy, rollout_policy)
        state["before"] = evaluate("before RL")
        logger.log({"phase": "eval", "step": 0, **_eval_scalars(state["before"])})
        state["metrics_lines"] = logger.num_lines()
        save_checkpoint(checkpoint_dir, policy.model, policy.tokenizer, optimizer, 0, policy.generator, state)
    if config.cluster.rollout_workers:  # Ray actors sample (rlvr_gym_agents.cluster), loaded with this version
        sampler: Sampler = closing.enter_context(contextlib.closing(remote_sampler(
            config, config.model.path_or_id or str(run_dir / "tiny_init"), lambda s: draw_tasks(train_tasks, config, s))))
    else:
        sampler = build_sampler(config, rollout_policy, chat, env_factory, step_executor)
    sync_weights(policy, rollout_policy, sampler, start_step)  # also on resume
    updater = closing.enter_context(contextlib.closing(build_updater(config, policy, optimizer, run_dir)))
    updater.load_loss_scaler_state(state.get("loss_scaler"))  # float16's loss scale, on resume
    run = Run(config, policy, rollout_policy, sampler, optimizer, credit_config(config), updater, train_tasks)
    rl_began = time.monotonic()
    tokens = sum(r["tokens_generated"] for r in logger.read() if r["phase"] == "rl")  # a resumed run's so far
    for step in range(start_step + 1, config.train.num_steps + 1):
        record = rl_step(run, step)
        logger.log(record)
        console.step(step, config.train.num_steps, record)
        previous, tokens = tokens, tokens + record["tokens_generated"]
        if evaluation_due(config, step, previous, tokens):
            logger.log({"phase": "eval", "step": step, **_eval_scalars(evaluate(f"step {step}"))})
        now = time.monotonic()
        stop = rl_stop_reason(config.train, now - began, now - rl_began, record["step_s"],
                              state["before"].get("elapsed_s", 0.0), tokens)
        periodic = config.train.checkpoint_every and step % config.train.checkpoint_every == 0
        if stop or periodic or step == config.train.num_steps:
            state["metrics_lines"] = logger.num_lines()
            run.updater.pull_optimizer_state()  # a learner group's; the trainer's model already has its weights
            state["loss_scaler"] = run.updater.loss_scaler_state()
            save_checkpoint(checkpoint_dir, policy.model, policy.tokenizer, optimizer, step, policy.generator, state)
        if stop:
            console.note(f"RL stopped by {stop} after step {step}")
            break

    state["after"] = evaluate("after RL")
    last_step = max([start_step] + [r["step"] for r in logger.read() if r["phase"] == "rl"])
    logger.log({"phase": "eval", "step": last_step, **_eval_scalars(state["after"])})
    plot_learning_curve(logger.read(), run_dir / "learning_curve.png")
    summary = {"before": state["before"], "after": state["after"], "run_dir": str(run_dir),
               "elapsed_s": time.monotonic() - began, "process_cpu_s": time.process_time()}
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=float) + "\n", encoding="utf-8")
    console.side_by_side(state["before"], state["after"], run_dir)
    logger.close()
    if rollout_policy is not policy and hasattr(rollout_policy, "close"):
        rollout_policy.close()  # a vLLM engine's processes
    return summary


def rl_step(run: Run, step: int) -> dict[str, Any]:
    """One RL step: sample -> credit -> drop zero-variance groups -> update -> sync weights; returns its log record.

    Raises:
        TrainingError: every episode of the step crashed, or of :data:`LOST_STEPS_LIMIT` steps in a row was lost
            with its rollout worker (:func:`check_not_all_crashed`; the message is the first failure's).
    """
    began = time.monotonic()
    tasks = draw_tasks(run.train_tasks, run.config, step)
    batch = run.sampler.sample_batch(tasks, step)
    batch.stamp_policy_version(step - 1)  # the in-process sampler's; rollout workers stamp the version they had
    run.lost_steps = check_not_all_crashed(batch, step, run.lost_steps)
    advantages = assign_credit(batch, run.credit)
    keep = (informative_groups(batch, run.credit) if run.config.algorithm.drop_zero_variance_groups
            else torch.ones(len(batch.trajectories), dtype=torch.bool))
    kept = [t for t, k in zip(batch.trajectories, keep.tolist()) if k]
    rollout_s = time.monotonic() - began
    sleep_rollout_engine(run.rollout_policy, run.policy)
    update = run.updater.update(kept, advantages[keep]) if kept else {}  # in-process or a learner group
    sync_weights(run.policy, run.rollout_policy, run.sampler, step, changed=bool(kept))
    return {"phase": "rl", "step": step, "process_cpu_s": time.process_time(), **rollout_metrics(batch.trajectories),
            **batch.metrics, **sibling_advantage_metrics(batch, advantages), **update, "tokens_generated": batch.tokens_generated,
            "groups_kept": int(keep.sum()) // run.config.train.group_size, "rollout_s": rollout_s,
            "step_s": time.monotonic() - began}


# -- building the stages from the recipe ----------------------------------------------------------------------


def check_recipe_inputs(config: TrainConfig) -> None:
    """Checks what a recipe names before any work starts: the env id, the suites (and the env id of every task in
    them) and the model.

    Raises:
        rlvr_gym.UnknownEnvError: an env id is not registered (the message suggests the closest).
        rlvr_gym.tasks.SuiteNotFoundError: a suite does not exist (the message suggests the closest).
        ValueError: too few test tasks, or train and test suites share ids (``load_task_sources``).
        FileNotFoundError / UnknownModelError: ``model.path_or_id`` names no loadable model.
        ConfigError: ``env.kwargs`` holds an argument ``env.env_id`` does not take, or a value it refuses.
    """
    train_tasks, test_tasks = load_task_sources(config)
    for env_id in sorted({task.env_id for task in [*(train_tasks or []), *test_tasks]}):
        spec(env_id)
    if config.env.kwargs:
        try:
            config.env.factory()(config.env.env_id).close()
        except (TypeError, ValueError) as error:
            raise ConfigError(f"env.kwargs {config.env.kwargs} do not fit {config.env.env_id}: {error}") from None
    if config.model.path_or_id is not None:
        check_model_source(config.model.path_or_id)


def load_task_sources(config: TrainConfig) -> tuple[list[Task] | None, list[Task]]:
    """``(train tasks or None for seeded generation, the first eval.num_tasks held-out tasks)``, checked before any
    work: the env id must be registered and every suite must exist.

    Raises:
        rlvr_gym.UnknownEnvError: ``env.env_id`` is not registered (the message suggests close ids).
        rlvr_gym.SuiteNotFoundError: a suite does not exist. ValueError: too few test tasks, or shared ids.
    """
    env_spec = spec(config.env.env_id)
    train = list(load_suite(config.env.train_suite)) if config.env.train_suite else None
    test_name = config.env.test_suite or env_spec.default_suite
    if test_name is None:
        raise ValueError(f"{config.env.env_id} has no default suite; set env.test_suite=family/suite")
    test = list(load_suite(test_name))
    if len(test) < config.eval.num_tasks:
        raise ValueError(f"test suite {test_name} has {len(test)} tasks, fewer than eval.num_tasks={config.eval.num_tasks}")
    test = test[: config.eval.num_tasks]
    if train and {t.id for t in train} & {t.id for t in test}:
        raise ValueError(f"train suite {config.env.train_suite} and test suite {test_name} share task ids")
    return train, test


def _shared_demonstrations(config: TrainConfig, train_tasks: list[Task] | None,
                           console: Console) -> Callable[[], list[Demonstration]] | None:
    """With ``model.corpus_from_demos``: the SFT demonstrations, collected on the first call only (a resumed run that
    needs neither a tokenizer nor a warm start collects none); else None."""
    if not config.model.corpus_from_demos:
        return None
    return functools.cache(lambda: sft_demonstrations(config.sft, config.env, config.seed, train_tasks, console))


def build_policy(config: TrainConfig, run_dir: Path, train_tasks: list[Task] | None, test_tasks: list[Task],
                 console: Console, demos: Callable[[], list[Demonstration]] | None = None,
                 ) -> tuple[TransformersPolicy, ChatFormat]:
    """Loads ``model.path_or_id``, or builds the tiny policy once into ``run_dir/tiny_init``
    (:func:`rlvr_gym_agents.warmstart.build_tiny_policy`, its tokenizer trained on ``demos()`` when given) and loads it
    through the same code path as a hub model."""
    path = config.model.path_or_id
    if path is None:
        path = str(run_dir / "tiny_init")
        if not (Path(path) / "config.json").is_file():
            corpus = demos and demos()
            with console.status("building the tiny tokenizer and model from env text"):
                build_tiny_policy(config.model, config.sft, config.env, config.seed, train_tasks, test_tasks, path,
                                  corpus)
    policy = load_policy(config, path)
    chat = ChatFormat.for_policy(policy, config.env.system_prompt)
    console.note(f"policy {path}: {sum(p.numel() for p in policy.model.parameters()):,} parameters, "
                 f"vocabulary {len(policy.tokenizer)}")
    return policy, chat


def load_policy(config: TrainConfig, path: str) -> TransformersPolicy:
    """The model directory ``path`` as the trained policy: on ``model.device``, fp32 master weights under mixed
    precision (:mod:`rlvr_gym_agents.update.precision`), LoRA adapters when ``model.lora.rank > 0``."""
    dtype = parameter_dtype(config.train.precision, config.model.dtype)
    policy = TransformersPolicy.from_pretrained(path, device=config.model.device, dtype=dtype,
                                                max_context_tokens=config.model.max_context_tokens, seed=config.seed)
    if config.model.lora.rank > 0:
        apply_lora(policy.model, config.model.lora)
    return policy


def trainable_model(config: TrainConfig, path: str) -> torch.nn.Module:
    """The model :func:`load_policy` loads (what each learner rank builds)."""
    return load_policy(config, path).model


def build_optimizer(config: TrainConfig, model: torch.nn.Module) -> torch.optim.Optimizer:
    """AdamW over ``model``'s trainable parameters (the adapters only, with LoRA), ``train.learning_rate`` and
    ``train.weight_decay``."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(trainable, lr=config.train.learning_rate, weight_decay=config.train.weight_decay)


def build_updater(config: TrainConfig, policy: TransformersPolicy, optimizer: torch.optim.Optimizer,
                  run_dir: Path) -> Updater:
    """What updates the policy: :func:`ppo_update` in this process (``cluster.learners = 1``), or a
    :class:`~rlvr_gym_agents.cluster.LearnerGroup` of ``cluster.learners`` torch.distributed ranks on Ray that
    starts from ``policy``'s weights and ``optimizer``'s state and loads its new weights back into ``policy``."""
    sft_dir, model_dir = run_dir / "sft_model", config.model.path_or_id or str(run_dir / "tiny_init")
    with_kl = config.algorithm.loss.kl_coef > 0
    if config.cluster.learners == 1:
        return PPOUpdater(policy.model, optimizer, update_config(config),
                          _reference_model(policy.model, sft_dir) if with_kl else None, policy.pad_token_id)
    from rlvr_gym_agents.cluster import LearnerGroup

    group = LearnerGroup(
        config.cluster.learners, functools.partial(trainable_model, config, model_dir),
        functools.partial(build_optimizer, config), update_config(config), policy.pad_token_id,
        reference_factory=functools.partial(_reference_model, sft_dir=sft_dir) if with_kl else None,
        mirror=policy.model, mirror_optimizer=optimizer, backend=config.cluster.backend, device=config.model.device,
        ray_address=config.cluster.ray_address, strategy=config.cluster.learner_strategy,
        threads_per_rank=max(1, config.model.num_threads // config.cluster.learners))
    group.load_state(policy.model.state_dict(), optimizer.state_dict())
    return group


def build_rollout_policy(config: TrainConfig, policy: TransformersPolicy, model_path: str) -> Policy:
    """The policy that samples episodes: ``policy`` itself, or a vLLM engine over the same weights
    (``rollout.engine=vllm``; the trainer pushes weights to it after every update)."""
    if config.rollout.engine == "transformers":
        return policy
    from rlvr_gym_agents.policy import fake_vllm
    from rlvr_gym_agents.policy.vllm import VLLMPolicy

    rollout = config.rollout
    return VLLMPolicy(model_path, policy.stop_token_ids, max_context_tokens=config.model.max_context_tokens,
                      dtype=config.model.dtype, weight_sync=rollout.weight_sync, trainer_device=config.model.device,
                      gpu_memory_utilization=rollout.gpu_memory_utilization, seed=config.seed,
                      engine=fake_vllm if rollout.engine == "fake_vllm" else None)


def build_sampler(config: TrainConfig, policy: Policy, chat: ChatFormat,
                  env_factory: Callable[..., Env] = rlvr_gym.make,
                  step_executor: Executor | None = None) -> FlatSampler | TreeSampler:
    """The recipe's sampler (``rollout.sampler``), with ``group_size`` episodes (or leaves) per task, stepping each
    turn's envs on ``step_executor`` (None: one after another)."""
    sampling = SamplingParams(config.rollout.temperature, config.rollout.top_p, config.rollout.max_new_tokens)
    if config.rollout.sampler == "tree":
        return TreeSampler(policy, chat, config.rollout.tree, env_factory, sampling, step_executor)
    return FlatSampler(policy, chat, config.train.group_size, sampling, env_factory, config.env.max_turns,
                       config.rollout.reuse_kv_cache, step_executor)


def credit_config(config: TrainConfig) -> CreditConfig:
    """The credit stage's settings from the recipe's ``algorithm`` section."""
    algorithm = config.algorithm
    penalty = Penalty(algorithm.invalid_action_penalty, frozenset(FailureKind(k) for k in algorithm.penalized_failures))
    return CreditConfig(algorithm.credit, algorithm.estimator, algorithm.gigpo, penalty, algorithm.tree_baseline,
                        algorithm.dedup_shared_prefix)


def update_config(config: TrainConfig) -> UpdateConfig:
    """The update stage's settings from the recipe's ``algorithm``, ``rollout`` and ``train`` sections."""
    algorithm = config.algorithm
    return UpdateConfig(algorithm.epochs, algorithm.num_minibatches, algorithm.micro_batch_tokens, algorithm.loss,
                        config.rollout.temperature, config.train.max_grad_norm,
                        autocast_dtype(config.train.precision, config.model.dtype),
                        share_tree_prefixes=algorithm.share_tree_prefixes,
                        min_shared_tokens=algorithm.min_shared_tokens)


def _evaluator(config: TrainConfig, policy: Policy, chat: ChatFormat, tasks: list[Task], console: Console,
               env_factory: Callable[..., Env], step_executor: Executor | None) -> Callable[[str], dict[str, Any]]:
    """``evaluate(label)``: the held-out evaluation of ``eval`` (:func:`rlvr_gym_agents.evaluate.evaluate_both`)."""
    return lambda label: evaluate_both(config.eval, config.rollout.max_new_tokens, config.env.max_turns, policy,
                                       chat, tasks, console, label, env_factory, step_executor)


# -- the RL step's helpers --------------------------------------------------------------------------------------


LOST_STEPS_LIMIT = 3
"""Consecutive RL steps whose every episode was lost with its rollout worker (hung or died, then restarted) before
the run stops: a restarted worker may run the next step, a worker that hangs on every step never will."""


def check_not_all_crashed(batch: RolloutBatch, step: int, lost_steps: int = 0) -> int:
    """Stops the run when a step has nothing to learn from because every episode failed before generating a token:
    at once when its env crashed (``env_crash`` from the env: it crashes again on the next step), after
    :data:`LOST_STEPS_LIMIT` such steps in a row when the episodes were lost with their rollout workers (failures
    whose ``details`` name a ``rollout_worker``: the workers hung past ``cluster.rollout_timeout_s`` or died, and
    were restarted).

    Args:
        batch: the step's rollouts.
        step: the RL step (for the message).
        lost_steps: the count this function returned for the previous step (0 for the first step of a process).

    Returns:
        The consecutive steps up to this one whose every episode was lost with its worker (0 when this one was not).

    Raises:
        TrainingError: naming the step(s), the env and the first failure's message.
    """
    if not batch.trajectories or batch.tokens_generated > 0:
        return 0
    if all(any("rollout_worker" in f.details for f in t.failures) for t in batch.trajectories):
        first = batch.trajectories[0]
        if lost_steps + 1 >= LOST_STEPS_LIMIT:
            raise TrainingError(f"every episode of RL steps {step - lost_steps}-{step} was lost with its rollout "
                                f"worker ({len(batch.trajectories)} episodes of {first.env_id} per step); the last "
                                f"first: {first.failures[0].message}. An env step that never returns hangs its "
                                "worker on every step: run the env alone (rlvr-gym check) to find it")
        return lost_steps + 1
    crashed = [t for t in batch.trajectories if any(f.kind.value == "env_crash" for f in t.failures)]
    if len(crashed) == len(batch.trajectories):
        first = crashed[0]
        raise TrainingError(f"every episode of RL step {step} crashed ({len(crashed)} episodes of {first.env_id}); "
                            f"the first: {first.failures[0].message}")
    return 0


def rl_stop_reason(loop: TrainLoopConfig, run_s: float, rl_s: float, step_s: float, eval_s: float,
                   tokens_generated: int = 0) -> str | None:
    """Why RL stops after the current step (the cap that binds, for the log), or None to go on.

    Args:
        loop: ``max_generated_tokens`` caps the RL rollouts' generated tokens; ``max_time_s`` caps the RL loop;
            ``run_budget_s`` caps the whole run (see :class:`TrainLoopConfig`).
        run_s: seconds since the run began (:func:`train`'s ``started``).
        rl_s: seconds since the RL loop began.
        step_s: seconds the step just done took (the next one is expected to take as long).
        eval_s: seconds the evaluation before RL took (the final one is expected to take as long).
        tokens_generated: tokens the RL steps so far generated (their ``tokens_generated`` summed).
    """
    if loop.max_generated_tokens is not None and tokens_generated >= loop.max_generated_tokens:
        return f"train.max_generated_tokens={loop.max_generated_tokens} ({tokens_generated:,} generated)"
    if loop.max_time_s is not None and rl_s > loop.max_time_s:
        return f"train.max_time_s={loop.max_time_s}"
    if loop.run_budget_s is not None and run_s + step_s + eval_s > loop.run_budget_s:
        return (f"train.run_budget_s={loop.run_budget_s} ({run_s:.0f} s spent, one more step ~{step_s:.0f} s, "
                f"final evaluation ~{eval_s:.0f} s)")
    return None


def evaluation_due(config: TrainConfig, step: int, previous_tokens: int, tokens: int) -> bool:
    """Whether to evaluate after RL step ``step``: every ``eval.every_steps`` steps, and at the first step at or past
    each multiple of ``eval.every_generated_tokens`` (``previous_tokens`` -> ``tokens`` generated in RL so far);
    never at the step that ends RL by ``train.num_steps`` or ``train.max_generated_tokens`` (the evaluation after RL
    follows it)."""
    every_steps, every_tokens = config.eval.every_steps, config.eval.every_generated_tokens
    budget = config.train.max_generated_tokens
    if step >= config.train.num_steps or (budget is not None and tokens >= budget):
        return False
    by_tokens = every_tokens is not None and tokens // every_tokens > previous_tokens // every_tokens
    return bool(every_steps and step % every_steps == 0) or by_tokens


@contextlib.contextmanager
def env_factory_of(config: TrainConfig) -> Iterator[Callable[..., Env]]:
    """``rlvr_gym.make``, or with ``env.num_workers > 0`` the ``make`` of an :class:`EnvPool` (envs matching
    ``env.remote`` run in Ray workers) that is closed when the block ends. In-process, what the env class shares
    (the web family's Chromium) stays open for the whole run: demonstrations, evaluations and RL steps make and
    close envs all along."""
    if config.env.num_workers == 0:
        with spec(config.env.env_id).hold_shared_resources():
            yield config.env.factory(rlvr_gym.make)
        return
    from rlvr_gym.workers import EnvPool

    with EnvPool(config.env.num_workers, remote=config.env.remote, ray_address=config.cluster.ray_address) as pool:
        yield config.env.factory(pool.make)


@contextlib.contextmanager
def step_executor_of(config: TrainConfig) -> Iterator[Executor | None]:
    """A thread pool of :meth:`EnvConfig.step_thread_count` threads that steps a turn's envs concurrently, shut
    down when the block ends; None when that is 0."""
    threads = config.env.step_thread_count()
    if threads == 0:
        yield None
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="env-step") as executor:
        yield executor


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


def sleep_rollout_engine(rollout_policy: Any, policy: Any) -> None:
    """Lets a colocated rollout engine free its GPU memory for the update (vLLM sleep mode; the next sync or
    generation wakes it); no-op for the transformers engine."""
    if rollout_policy is not policy and hasattr(rollout_policy, "sleep"):
        rollout_policy.sleep()


def sync_weights(policy: TransformersPolicy, rollout_policy: Any, sampler: Sampler | None = None, version: int = 0,
                 changed: bool = True) -> None:
    """Pushes the trained weights (LoRA merged in, plain HF names) to whatever samples apart from ``policy``: a
    separate rollout engine (vLLM), and rollout workers (:mod:`rlvr_gym_agents.cluster`) as policy ``version``.

    ``changed=False`` (no update this step) only moves the workers' version. No-op for the in-process transformers
    engine and samplers, which sample with the trained weights themselves. The weights are gathered once.
    """
    workers = sampler if isinstance(sampler, (RolloutWorkers, AsyncRollouts)) else None
    to_engine = changed and rollout_policy is not policy
    named = merged_named_parameters(policy.model) if changed and (to_engine or workers) else None
    if to_engine:
        rollout_policy.sync_weights(named)
    if workers is not None:
        workers.sync_weights(named, version)


def _reference_model(model: torch.nn.Module, sft_dir: Path) -> torch.nn.Module:
    """A frozen copy of ``model`` holding the weights saved after the warm start."""
    from safetensors.torch import load_file

    ref = copy.deepcopy(model)
    ref.load_state_dict(load_file(str(sft_dir / "model.safetensors")), strict=False)
    if getattr(ref.config, "tie_word_embeddings", False):
        ref.tie_weights()  # type: ignore[operator]
    return ref.eval().requires_grad_(False)


def _eval_scalars(result: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in result.items() if isinstance(value, (int, float)) or value is None}


def _seed_everything(seed: int, num_threads: int) -> None:
    """Seeds Python, NumPy and torch (the CPU generator; the policies' samplers have their own, from the same
    seed) and sets torch's CPU threads, once at the start of every run.

    The same seed on the same machine gives identical metrics (every key but wall-clock ones) with the default 2
    threads (docs/results.md, "Reproducibility"; test_reproducible.py), so no deterministic-algorithms switch or
    thread setting is added here. A run still differs when a time cap binds (``sft.max_time_s``,
    ``train.max_time_s``, ``train.run_budget_s``): how far it gets then depends on the machine's speed."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.set_num_threads(max(1, num_threads))
