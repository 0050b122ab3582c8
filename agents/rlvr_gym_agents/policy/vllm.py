"""A vLLM rollout policy implementing :class:`rlvr_gym_agents.policy.Policy` (GPU).

UNTESTED ON A GPU: this machine has none and vLLM is not installed here. The code follows vLLM's public
offline API (``LLM.generate`` over ``TokensPrompt`` s, ``SamplingParams(logprobs=...)``, automatic prefix
caching, ``LLM.collective_rpc``/``apply_model`` for weight updates); check it on a GPU before relying on it.

Differences from :class:`rlvr_gym_agents.policy.TransformersPolicy`, stated honestly:

- KV reuse across turns comes from vLLM's automatic prefix caching, so the state is just each row's ids
  (:class:`TokenState`); ``select`` copies rows the same way, so tree samplers work unchanged.
- vLLM returns log-probs of the top ``num_logprobs`` tokens, not the full distribution: ``entropies`` are
  the entropy of that renormalised top-k distribution, a lower-resolution estimate of the true entropy.
- Log-probs are of the processed (temperature-scaled) distribution when the installed vLLM supports
  ``logprobs_mode="processed_logprobs"``, matching what the trainer recomputes; older versions return raw
  log-probs (the trainer's PPO ratio then starts away from 1 at temperatures other than 1).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from rlvr_gym_agents.policy import Generation, SamplingParams


class TokenState:
    """Per-row full contexts (ids); vLLM's prefix cache makes re-sending them cheap."""

    def __init__(self, contexts: list[list[int]]) -> None:
        self.contexts = contexts

    def __len__(self) -> int:
        return len(self.contexts)

    def context_lengths(self) -> list[int]:
        return [len(c) for c in self.contexts]

    def select(self, rows: Sequence[int]) -> TokenState:
        """Copies of ``rows`` (repeats allowed)."""
        return TokenState([list(self.contexts[r]) for r in rows])


class VLLMPolicy:
    """Generates with a vLLM engine; the trainer keeps a transformers copy and pushes weights after updates.

    Args:
        model_id: hub id or model directory (the same one the trainer loads with transformers).
        stop_token_ids: ids that end a turn.
        max_context_tokens: the engine's ``max_model_len``.
        gpu_memory_utilization: fraction of GPU memory vLLM may take (leave room for the trainer).
        num_logprobs: top-k log-probs returned per token (for the entropy estimate).
        seed: the engine's sampling seed.
        **engine_kwargs: passed to ``vllm.LLM``.
    """

    def __init__(self, model_id: str, stop_token_ids: Iterable[int], max_context_tokens: int = 4096,
                 gpu_memory_utilization: float = 0.4, num_logprobs: int = 20, seed: int = 0,
                 **engine_kwargs: Any) -> None:
        import vllm  # lazily: vLLM is an optional GPU dependency (pip install rlvr-gym-agents[vllm])

        self._vllm = vllm
        self.stop_token_ids = frozenset(int(i) for i in stop_token_ids)
        self.max_context_tokens = int(max_context_tokens)
        self.num_logprobs = int(num_logprobs)
        kwargs = dict(model=model_id, max_model_len=max_context_tokens, seed=seed, enable_prefix_caching=True,
                      gpu_memory_utilization=gpu_memory_utilization, **engine_kwargs)
        try:
            self.llm = vllm.LLM(logprobs_mode="processed_logprobs", **kwargs)
        except TypeError:  # vLLM without logprobs_mode: raw log-probs (see the module docstring)
            self.llm = vllm.LLM(**kwargs)

    def generate(self, token_ids: Sequence[Sequence[int]], sampling: SamplingParams,
                 state: TokenState | None = None) -> tuple[list[Generation], TokenState]:
        """See :class:`rlvr_gym_agents.policy.Policy`."""
        if state is None:
            state = TokenState([[] for _ in token_ids])
        if len(state) != len(token_ids):
            raise ValueError(f"state has {len(state)} rows but {len(token_ids)} rows of token ids were given")
        contexts = [list(c) + [int(t) for t in row] for c, row in zip(state.contexts, token_ids)]
        params = self._vllm.SamplingParams(
            temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_new_tokens,
            stop_token_ids=sorted(self.stop_token_ids), logprobs=self.num_logprobs, detokenize=False,
        )
        prompts = [self._vllm.inputs.TokensPrompt(prompt_token_ids=c) for c in contexts]
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        generations = [_generation(out.outputs[0], self.stop_token_ids) for out in outputs]
        return generations, TokenState([c + g.token_ids for c, g in zip(contexts, generations)])

    def sync_weights(self, named_parameters: Iterable[tuple[str, Any]]) -> None:
        """Loads the trainer's updated weights into the engine (call after each optimizer phase)."""
        weights = [(name, tensor.detach()) for name, tensor in named_parameters]
        self.llm.apply_model(lambda model: model.load_weights(weights))
        self.llm.reset_prefix_cache()  # cached keys/values were computed with the old weights


def _generation(completion: Any, stop_token_ids: frozenset[int]) -> Generation:
    ids = [int(i) for i in completion.token_ids]
    logps, entropies = [], []
    for token, top in zip(ids, completion.logprobs or []):
        logps.append(float(top[token].logprob))
        entropies.append(_topk_entropy([float(lp.logprob) for lp in top.values()]))
    finish = "stop" if ids and ids[-1] in stop_token_ids else "length"
    return Generation(ids, logps, entropies, finish)


def _topk_entropy(logprobs: list[float]) -> float:
    """Entropy (nats) of the top-k distribution renormalised to sum to one."""
    top = max(logprobs)
    weights = [math.exp(lp - top) for lp in logprobs]
    total = sum(weights)
    return -sum(w / total * math.log(w / total) for w in weights if w > 0)
