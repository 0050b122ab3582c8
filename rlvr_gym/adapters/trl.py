"""rlvr_gym envs in TRL's ``GRPOTrainer``, through its ``rollout_func`` (TRL >= 1.0; tested with 1.16).

TRL calls ``rollout_func(prompts, trainer)`` with the prompts of its batch and trains on what it returns:
``prompt_ids``, ``completion_ids`` and ``logprobs`` per episode, plus ``env_mask`` (1 on generated ids, 0 on
observation ids: TRL leaves the zeros out of the loss) and any other field, passed on to the reward
functions. :class:`RlvrGymRollout` plays one episode per prompt of the batch (TRL's sampler repeats each
prompt ``num_generations`` times, so each task gets a group) with the trainer's own model
(multi-turn, token-in/token-out, :mod:`rlvr_gym.adapters.tokens`) and returns the env's reward as
``env_reward``, which :func:`env_reward` hands to TRL::

    from trl import GRPOConfig, GRPOTrainer
    from rlvr_gym import load_suite
    from rlvr_gym.adapters.trl import RlvrGymRollout, env_reward, task_dataset

    tasks = load_suite("textworld/starter-train").tasks[:64]
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=env_reward,
                          train_dataset=task_dataset(tasks), rollout_func=RlvrGymRollout(tasks),
                          args=GRPOConfig(output_dir="runs/trl", num_generations=4, ...))
    trainer.train()

A dataset row's ``prompt`` only names its task (``"rlvr_gym:<task id>"``); the model sees the env's own reset
observation, rendered with the tokenizer's chat template. Generation uses ``model.generate`` of the trainer's
model (one episode at a time; TRL's vLLM server is not used by this rollout).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rlvr_gym.adapters.tokens import Generate, TokenEpisode, run_token_episode
from rlvr_gym.core import Env
from rlvr_gym.registry import make
from rlvr_gym.tasks import Task

PROMPT_PREFIX = "rlvr_gym:"
"""Dataset prompts are ``PROMPT_PREFIX + task.id``."""


def task_dataset(tasks: Sequence[Task]) -> Any:
    """A ``datasets.Dataset`` with one row per task: ``prompt`` (``"rlvr_gym:<task id>"``), ``task_id``,
    ``env_id``. Rows beyond ``prompt`` reach the reward functions as keyword arguments.

    Raises:
        ModuleNotFoundError: without ``datasets`` (``pip install 'rlvr-gym[hf]'``).
    """
    import datasets

    return datasets.Dataset.from_dict({"prompt": [PROMPT_PREFIX + t.id for t in tasks],
                                       "task_id": [t.id for t in tasks], "env_id": [t.env_id for t in tasks]})


def env_reward(completions: list[Any], env_reward: list[float], **kwargs: Any) -> list[float]:
    """The reward function to pass to ``GRPOTrainer(reward_funcs=...)``: the env's episode return, which
    :class:`RlvrGymRollout` put in the ``env_reward`` field."""
    return [float(r) for r in env_reward]


class RlvrGymRollout:
    """A ``rollout_func`` for ``GRPOTrainer``: multi-turn episodes of rlvr_gym tasks with the trainer's model.

    Args:
        tasks: the tasks the dataset's prompts name (see :func:`task_dataset`).
        max_new_tokens: the most ids generated per turn.
        max_response_tokens: the most ids after the first prompt (generated plus observations); keep it at or
            under ``GRPOConfig.max_completion_length``.
        env_factory: builds an env from its id.

    Raises:
        ValueError: from ``__call__`` for a prompt that names no known task.
    """

    def __init__(self, tasks: Sequence[Task], *, max_new_tokens: int = 64, max_response_tokens: int = 256,
                 env_factory: Callable[[str], Env] = make) -> None:
        self.tasks = {task.id: task for task in tasks}
        self.max_new_tokens, self.max_response_tokens = max_new_tokens, max_response_tokens
        self.env_factory = env_factory
        self.last_episodes: list[TokenEpisode] = []

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """Plays one episode per prompt (TRL's sampler already repeats each prompt ``num_generations`` times in
        the batch); returns TRL's fields plus ``env_mask``, ``env_reward`` and ``env_success``."""
        model = trainer.accelerator.unwrap_model(trainer.model)
        tokenizer = trainer.processing_class
        generate = hf_generate(model, tokenizer, self.max_new_tokens, float(trainer.args.temperature))
        episodes = [run_token_episode(self._task(prompt), generate, tokenizer, env_factory=self.env_factory,
                                      max_response_tokens=self.max_response_tokens) for prompt in prompts]
        self.last_episodes = episodes
        return {"prompt_ids": [e.prompt_ids for e in episodes], "completion_ids": [e.response_ids for e in episodes],
                "logprobs": [e.response_logprobs for e in episodes], "env_mask": [e.response_mask for e in episodes],
                "env_reward": [e.reward for e in episodes], "env_success": [e.success for e in episodes]}

    def _task(self, prompt: Any) -> Task:
        text = prompt if isinstance(prompt, str) else str(prompt[-1]["content"])  # plain or conversational
        task = self.tasks.get(text.removeprefix(PROMPT_PREFIX))
        if task is None:
            raise ValueError(f"prompt {text[:80]!r} names no task of this rollout; build the dataset with "
                             "rlvr_gym.adapters.trl.task_dataset(tasks) from the same tasks")
        return task


def hf_generate(model: Any, tokenizer: Any, max_new_tokens: int, temperature: float = 1.0) -> Generate:
    """A :data:`~rlvr_gym.adapters.tokens.Generate` over a transformers causal LM: samples one turn (up to
    ``max_new_tokens`` ids, stopping at the tokenizer's EOS) and returns the ids with their log-probs under
    the sampling distribution (temperature applied, as TRL's importance ratios expect)."""
    import torch

    def generate(context_ids: list[int]) -> tuple[list[int], list[float]]:
        input_ids = torch.tensor([context_ids], device=model.device)
        with torch.no_grad():
            out = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), do_sample=True,
                                 temperature=temperature, top_p=1.0, top_k=0, max_new_tokens=max_new_tokens,
                                 output_scores=True, return_dict_in_generate=True,
                                 pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        new_ids = out.sequences[0, len(context_ids):]
        scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)[0]
        return new_ids.tolist(), scores[: len(new_ids)].tolist()

    return generate
