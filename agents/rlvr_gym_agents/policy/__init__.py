"""The policy stage: the Policy protocol, the transformers and vLLM engines, the KV state and the chat format.

A policy maps a batch of token-id contexts to generated token ids with their log-probs and entropies; it never
sees text (:mod:`.chat` turns observations into ids and generated ids into actions).
"""

from rlvr_gym_agents.policy.base import Generation, Policy, SamplingParams
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.policy.kv import KVState
from rlvr_gym_agents.policy.transformers import (
    TransformersPolicy,
    load_model_and_tokenizer,
    load_tokenizer,
    sample_tokens,
)

__all__ = [
    "ChatFormat",
    "Generation",
    "KVState",
    "Policy",
    "SamplingParams",
    "TransformersPolicy",
    "load_model_and_tokenizer",
    "load_tokenizer",
    "sample_tokens",
]
