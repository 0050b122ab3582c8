"""The stages around the RL loop: task sources, building the policy, the SFT warm start, evaluation."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import rlvr_gym
from rlvr_gym import Env, Task, load_suite, spec
from rlvr_gym_agents.chat import ChatFormat
from rlvr_gym_agents.config import TrainConfig
from rlvr_gym_agents.console import Console
from rlvr_gym_agents.policy import Policy, SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy_eval import evaluate_policy
from rlvr_gym_agents.sft import (
    Demonstration,
    behaviour_cloning,
    demonstrate,
    demonstration_ids,
    import_callable,
    load_expert,
)
from rlvr_gym_agents.tiny import save_tiny_policy


def load_task_sources(config: TrainConfig) -> tuple[list[Task] | None, list[Task]]:
    """``(train tasks or None for seeded generation, the first eval.num_tasks held-out tasks)``.

    Raises:
        ValueError: when the test suite has fewer tasks than ``eval.num_tasks`` or shares ids with training.
    """
    train = list(load_suite(config.env.train_suite)) if config.env.train_suite else None
    test_name = config.env.test_suite or spec(config.env.env_id).default_suite
    if test_name is None:
        raise ValueError(f"{config.env.env_id} has no default suite; set env.test_suite=family/suite")
    test = list(load_suite(test_name))
    if len(test) < config.eval.num_tasks:
        raise ValueError(f"test suite {test_name} has {len(test)} tasks, fewer than eval.num_tasks={config.eval.num_tasks}")
    test = test[: config.eval.num_tasks]
    if train and {t.id for t in train} & {t.id for t in test}:
        raise ValueError(f"train suite {config.env.train_suite} and test suite {test_name} share task ids")
    return train, test


def collect_demonstrations(config: TrainConfig, tasks: list[Task] | None, num_episodes: int,
                           seed: int) -> list[Demonstration]:
    """``num_episodes`` expert episodes with injected mistakes, cycling over ``tasks`` (or seeded tasks)."""
    rng = random.Random(seed)
    expert = load_expert(config.sft.expert)
    invalid = None if config.sft.invalid_actions is None else import_callable(config.sft.invalid_actions,
                                                                              "sft.invalid_actions")
    pool = tasks or [Task(id=f"demo-{i}", env_id=config.env.env_id, options={"seed": 3_000_000 + i})
                     for i in range(num_episodes)]
    order = [pool[i % len(pool)] for i in range(num_episodes)]
    return [demonstrate(task, expert, config.sft.mistake_rate, rng, max_turns=config.env.max_turns,
                        train_on_mistakes=config.sft.train_on_mistakes, invalid_rate=config.sft.invalid_rate,
                        invalid_actions=invalid) for task in order]


def demonstration_tasks(config: TrainConfig, train_tasks: list[Task] | None) -> list[Task] | None:
    """The tasks demonstrated in the warm start: ``train_tasks``, or ``sft.num_demos`` tasks from the generator
    named by ``sft.demo_tasks`` (training split, seeds after the train suite's).

    Raises:
        ValueError: when ``sft.demo_tasks`` is not ``package.module:function``.
    """
    if config.sft.demo_tasks is None:
        return train_tasks
    generate = import_callable(config.sft.demo_tasks, "sft.demo_tasks")
    return list(generate(config.env.env_id, "train", config.sft.num_demos, len(train_tasks or [])))


def build_policy(config: TrainConfig, run_dir: Path, train_tasks: list[Task] | None, test_tasks: list[Task],
                 console: Console) -> tuple[TransformersPolicy, ChatFormat]:
    """Loads ``model.path_or_id``, or builds the tiny policy once into ``run_dir/tiny_init`` and loads it through
    the same code path as a hub model.

    The tiny tokenizer is trained on the text of expert episodes (with admissible mistakes) on training tasks
    and on the held-out tasks, plus ``model.corpus``'s texts (the env's failure messages, which admissible
    actions never produce): the vocabulary must cover every word the agent can see; only the text is used, no
    held-out episode is trained on.
    """
    path = config.model.path_or_id
    if path is None:
        path = str(run_dir / "tiny_init")
        if not (Path(path) / "config.json").is_file():
            with console.status("building the tiny tokenizer and model from env text"):
                demos = collect_demonstrations(config, train_tasks, config.model.corpus_episodes, config.seed)
                demos += collect_demonstrations(config, test_tasks, len(test_tasks), config.seed + 1)
                save_tiny_policy(_corpus(demos) + extra_corpus(config), path, seed=config.seed,
                                 hidden_size=config.model.hidden_size, num_layers=config.model.num_layers,
                                 num_heads=config.model.num_heads, intermediate_size=config.model.intermediate_size,
                                 max_context_tokens=config.model.max_context_tokens)
    policy = TransformersPolicy.from_pretrained(path, device=config.model.device, dtype=config.model.dtype,
                                                max_context_tokens=config.model.max_context_tokens, seed=config.seed)
    chat = ChatFormat(policy.tokenizer, system_prompt=config.env.system_prompt)
    policy.stop_token_ids = frozenset(policy.stop_token_ids | {chat.end_of_turn_id})
    console.note(f"policy {path}: {sum(p.numel() for p in policy.model.parameters()):,} parameters, "
                 f"vocabulary {len(policy.tokenizer)}")
    return policy, chat


def build_rollout_policy(config: TrainConfig, policy: TransformersPolicy, model_path: str) -> Policy:
    """The policy that samples episodes: ``policy`` itself, or a vLLM engine over the same weights
    (``rollout.engine=vllm``; the trainer pushes weights to it after every update)."""
    if config.rollout.engine == "transformers":
        return policy
    from rlvr_gym_agents.vllm_policy import VLLMPolicy

    return VLLMPolicy(model_path, policy.stop_token_ids, max_context_tokens=config.model.max_context_tokens,
                      seed=config.seed)


def extra_corpus(config: TrainConfig) -> list[str]:
    """``model.corpus``'s texts for the tiny tokenizer (none when unset).

    Raises:
        ValueError: when ``model.corpus`` is not ``package.module:function``.
    """
    if config.model.corpus is None:
        return []
    return list(import_callable(config.model.corpus, "model.corpus")(config.env.env_id, config.model.corpus_episodes,
                                                                      config.seed))


def _corpus(demos: list[Demonstration]) -> list[str]:
    return [text for demo in demos for text in demo.observations + demo.actions]


def warm_start(config: TrainConfig, model: Any, chat: ChatFormat, train_tasks: list[Task] | None,
               console: Console) -> dict[str, Any]:
    """Behaviour cloning on ``sft.num_demos`` expert episodes; returns its metrics."""
    with console.status(f"collecting {config.sft.num_demos} demonstrations"):
        tasks = demonstration_tasks(config, train_tasks)
        demos = collect_demonstrations(config, tasks, config.sft.num_demos, config.seed + 7)
    examples = [demonstration_ids(demo, chat) for demo in demos]
    sft = config.sft
    with console.progress(sft.max_steps, "SFT warm start") as advance:
        result = behaviour_cloning(
            model, examples, episodes_per_batch=sft.episodes_per_batch, learning_rate=sft.learning_rate,
            warmup_steps=sft.warmup_steps, max_steps=sft.max_steps, loss_threshold=sft.loss_threshold,
            max_time_s=sft.max_time_s, seed=config.seed, on_step=lambda step, loss: advance(loss=loss),
            ema_decay=sft.ema_decay,
        )
    result["process_cpu_s"] = time.process_time()
    result["demo_success_rate"] = sum(d.success for d in demos) / max(1, len(demos))
    console.note("SFT: {steps} steps, loss {loss:.3f}, {tokens_per_s:.0f} tokens/s, {elapsed_s:.0f} s, "
                 "stopped by {stopped_by}".format(**result))
    if result["time_schedule_from_step"] is not None:
        console.note(f"SFT learning rate followed sft.max_time_s from step {result['time_schedule_from_step']}: "
                     "this warm start depends on the machine's speed (raise sft.max_time_s to make it reproducible)")
    return result


def evaluate_both(config: TrainConfig, policy: Policy, chat: ChatFormat, tasks: list[Task],
                  console: Console, label: str, env_factory: Callable[..., Env] = rlvr_gym.make) -> dict[str, Any]:
    """Held-out evaluation: ``eval.k`` samples per task at ``eval.temperature``, and greedy pass@1.

    Envs come from ``env_factory`` (default :func:`rlvr_gym.make`; the trainer passes its env pool's ``make``).

    Returns:
        ``pass@1_sampled``, ``pass@{k}_sampled``, ``pass@1_greedy`` (None when off), ``mean_turns``,
        ``num_tasks``, ``k``, ``elapsed_s`` (wall seconds) and the full sampled/greedy metrics under ``sampled`` /
        ``greedy``.
    """
    k, max_new = config.eval.k, config.rollout.max_new_tokens
    began = time.monotonic()
    with console.status(f"evaluating {label}: {len(tasks)} tasks x {k} samples + greedy"):
        sampled, _ = evaluate_policy(policy, chat, tasks, k, SamplingParams(config.eval.temperature, 1.0, max_new),
                                     env_factory=env_factory, max_turns=config.env.max_turns)
        greedy = None
        if config.eval.greedy:
            greedy, _ = evaluate_policy(policy, chat, tasks, 1, SamplingParams(0.0, 1.0, max_new),
                                        env_factory=env_factory, max_turns=config.env.max_turns)
    result = {
        "pass@1_sampled": sampled["pass@1"], f"pass@{k}_sampled": sampled[f"pass@{k}"],
        "pass@1_greedy": greedy["pass@1"] if greedy else None, "mean_turns_sampled": sampled["mean_turns"],
        "num_tasks": len(tasks), "k": k, "process_cpu_s": time.process_time(), "elapsed_s": time.monotonic() - began,
        "sampled": sampled, "greedy": greedy,
    }
    console.note(f"{label}: pass@1 sampled {result['pass@1_sampled']:.3f}, pass@{k} {result[f'pass@{k}_sampled']:.3f}"
                 + (f", greedy {result['pass@1_greedy']:.3f}" if greedy else ""))
    return result
