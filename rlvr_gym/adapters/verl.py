"""rlvr_gym envs in verl's agent loop (``verl.experimental.agent_loop.AgentLoopBase``; written against verl
0.9.1's source).

verl runs one ``AgentLoopBase.run(sampling_params, **row)`` per trajectory, where ``row`` is the dataset row
and ``self.server_manager.generate(request_id=, prompt_ids=, sampling_params=)`` returns a ``TokenOutput``
(``token_ids``, ``log_probs``). :class:`RlvrGymAgentLoop`, registered as ``agent_name: rlvr_gym``, plays the
row's task (``row["extra_info"]["task"]``, or ``row["task"]``) token-in/token-out
(:mod:`rlvr_gym.adapters.tokens`) and returns an ``AgentLoopOutput`` with ``response_mask`` 0 on observation
ids and ``reward_score`` = the episode return. Rows come from :func:`verl_dataset`::

    # data: datasets.Dataset.from_list(verl_dataset(tasks)).to_parquet("train.parquet")
    # config: actor_rollout_ref.rollout.agent.agent_loop_config_path pointing at a file with
    #   - name: rlvr_gym
    #     _target_: rlvr_gym.adapters.verl.RlvrGymAgentLoop

Env steps run in a worker thread (``asyncio.to_thread``), so a slow env does not block other trajectories'
generation. :func:`run_verl_episode` is the loop without verl's base class, for tests and other hosts with the
same server interface. verl itself is not a dependency: ``pip install verl`` (it pins ``transformers<5.11``,
which is why this repository's environment does not install it).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from rlvr_gym.adapters.tokens import TokenEpisode, observation_ids, record_turn, start_episode
from rlvr_gym.core import Env
from rlvr_gym.registry import make
from rlvr_gym.tasks import Task

AGENT_NAME = "rlvr_gym"


def verl_dataset(tasks: Iterable[Task], agent_name: str = AGENT_NAME) -> list[dict[str, Any]]:
    """Rows in verl's RL dataset layout: ``data_source`` (the env id), ``prompt`` (a placeholder message; the
    agent loop prompts with the env's observation), ``agent_name`` and ``extra_info.task`` (the task's JSON)."""
    return [{"data_source": t.env_id, "prompt": [{"role": "user", "content": f"rlvr_gym task {t.id}"}],
             "agent_name": agent_name, "reward_model": {"style": "rule", "ground_truth": ""},
             "extra_info": {"task": t.model_dump_json(), "task_id": t.id}} for t in tasks]


def task_from_row(row: dict[str, Any]) -> Task:
    """The task of a dataset row (``extra_info.task`` or ``task``: a dict, JSON text or :class:`Task`).

    Raises:
        ValueError: when the row has no task.
    """
    raw = (row.get("extra_info") or {}).get("task", row.get("task"))
    if raw is None:
        raise ValueError("the row has no extra_info.task; build the dataset with rlvr_gym.adapters.verl.verl_dataset")
    return raw if isinstance(raw, Task) else Task.model_validate(json.loads(raw) if isinstance(raw, str) else raw)


async def run_verl_episode(server_manager: Any, tokenizer: Any, task: Task, sampling_params: dict[str, Any], *,
                           max_response_tokens: int, request_id: str | None = None,
                           env_factory: Callable[[str], Env] = make) -> dict[str, Any]:
    """Plays ``task`` with a verl-style server manager; returns the fields of verl's ``AgentLoopOutput``
    (``prompt_ids``, ``response_ids``, ``response_mask``, ``response_logprobs``, ``reward_score``,
    ``num_turns``, ``extra_fields``), ``response_*`` at most ``max_response_tokens`` long."""
    request_id = request_id or uuid.uuid4().hex
    env, episode = await asyncio.to_thread(start_episode, task, tokenizer, env_factory)
    try:
        done = env is None
        while not done:
            budget = max_response_tokens - len(episode.response_ids)
            params = {**sampling_params, "max_tokens": min(int(sampling_params.get("max_tokens", budget)), budget)}
            output = await server_manager.generate(request_id=request_id, prompt_ids=episode.prompt_ids
                                                   + episode.response_ids, sampling_params=params)
            new_ids = list(output.token_ids)[:budget]
            logprobs = list(output.log_probs or [0.0] * len(new_ids))[: len(new_ids)]
            done = await asyncio.to_thread(_turn, episode, env, tokenizer, new_ids, logprobs, max_response_tokens)
    finally:
        if env is not None and (failure := await asyncio.to_thread(env.close)) is not None:
            episode.failures.append(failure.to_dict())
    return {"prompt_ids": episode.prompt_ids, "response_ids": episode.response_ids,
            "response_mask": episode.response_mask, "response_logprobs": episode.response_logprobs,
            "reward_score": episode.reward, "num_turns": 2 * episode.num_turns,  # verl counts user + assistant
            "extra_fields": {"success": episode.success, "actions": episode.actions, "failures": episode.failures}}


def _turn(episode: TokenEpisode, env: Any, tokenizer: Any, new_ids: list[int], logprobs: list[float],
          max_response_tokens: int) -> bool:
    if not new_ids:
        return True
    return record_turn(episode, env, tokenizer, new_ids, logprobs, max_response_tokens, observation_ids)


try:  # verl is optional; the agent loop class exists only where it is installed
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised where verl is absent
    _VERL_MISSING: ModuleNotFoundError | None = _missing
else:
    _VERL_MISSING = None

    @register(AGENT_NAME)
    class RlvrGymAgentLoop(AgentLoopBase):  # type: ignore[misc,valid-type]
        """verl agent loop over an rlvr_gym task (see the module docstring)."""

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
            fields = await run_verl_episode(self.server_manager, self.tokenizer, task_from_row(kwargs), sampling_params,
                                            max_response_tokens=int(self.rollout_config.response_length))
            return AgentLoopOutput(**fields, metrics=AgentLoopMetrics())


def __getattr__(name: str) -> Any:
    if name == "RlvrGymAgentLoop" and _VERL_MISSING is not None:
        raise ModuleNotFoundError(f"RlvrGymAgentLoop needs verl (pip install verl): {_VERL_MISSING}") from None
    raise AttributeError(name)
