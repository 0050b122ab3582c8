"""The verl agent loop over an rlvr_gym env, driven here by an in-process stand-in for verl's server manager.

In verl (``pip install verl``), ``rlvr_gym.adapters.verl.RlvrGymAgentLoop`` is registered as ``agent_name:
rlvr_gym``; write the rows of ``verl_dataset(tasks)`` to parquet and point
``actor_rollout_ref.rollout.agent.agent_loop_config_path`` at a YAML list holding
``{name: rlvr_gym, _target_: rlvr_gym.adapters.verl.RlvrGymAgentLoop}``. This script runs the same episode
code (:func:`rlvr_gym.adapters.verl.run_verl_episode`) with a ``generate`` that has verl's signature and returns
verl's ``TokenOutput`` fields, so it runs without verl and without a GPU:

    python examples/verl_agent_loop.py --num-tasks 2
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
from typing import Any

from rlvr_gym import load_suite
from rlvr_gym.adapters.verl import run_verl_episode, task_from_row, verl_dataset


@dataclasses.dataclass
class TokenOutput:
    """The fields of ``verl.workers.rollout.replica.TokenOutput`` that agent loops read."""

    token_ids: list[int]
    log_probs: list[float] | None = None


class LocalServerManager:
    """``generate(request_id=, prompt_ids=, sampling_params=)`` like verl's ``LLMServerClient``, sampling from a
    transformers model in this process."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model, self.tokenizer = model, tokenizer

    async def generate(self, *, request_id: str, prompt_ids: list[int], sampling_params: dict[str, Any],
                       **_: Any) -> TokenOutput:
        from rlvr_gym.adapters.trl import hf_generate

        generate = hf_generate(self.model, self.tokenizer, int(sampling_params.get("max_tokens", 16)),
                               float(sampling_params.get("temperature", 1.0)))
        ids, logprobs = await asyncio.to_thread(generate, prompt_ids)
        return TokenOutput(ids, logprobs)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="textworld/starter-test")
    parser.add_argument("--num-tasks", type=int, default=2)
    parser.add_argument("--response-length", type=int, default=160)
    args = parser.parse_args(argv)
    from trl_grpo_textworld import tiny_model_and_tokenizer  # the same tiny model as the TRL example

    model, tokenizer = tiny_model_and_tokenizer()
    server = LocalServerManager(model, tokenizer)
    rows = verl_dataset(load_suite(args.suite).tasks[: args.num_tasks])

    async def run_all() -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(
            run_verl_episode(server, tokenizer, task_from_row(row), {"temperature": 1.0, "max_tokens": 12},
                             max_response_tokens=args.response_length) for row in rows)))

    outputs = asyncio.run(run_all())
    for row, out in zip(rows, outputs, strict=True):
        generated = sum(out["response_mask"])
        print(f"{row['extra_info']['task_id']}: reward {out['reward_score']:g}, {out['num_turns'] // 2} turns, "
              f"{generated} generated + {len(out['response_ids']) - generated} observation tokens")
    return outputs


if __name__ == "__main__":
    main()
