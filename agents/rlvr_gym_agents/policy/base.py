"""What every rollout engine shares: sampling parameters, one row's generation, the Policy protocol.

A policy maps a batch of token-id contexts to generated token ids. It never sees text: chat formatting and
tokenisation live in :mod:`rlvr_gym_agents.policy.chat`, so the ids trained on are exactly the ids generated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to sample one turn.

    Attributes:
        temperature: softmax temperature; 0 means greedy (argmax).
        top_p: nucleus sampling mass in (0, 1]; 1 disables it.
        max_new_tokens: the most tokens generated per row in one call.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 32

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclasses.dataclass
class Generation:
    """What one row generated in one call.

    Attributes:
        token_ids: generated ids, ending with the stop token when ``finish_reason == "stop"``.
        logps: log-probability of each generated id under the temperature-scaled distribution
            (the distribution the trainer recomputes), one per id.
        entropies: entropy in nats of the full temperature-scaled next-token distribution, one per id.
        finish_reason: ``"stop"`` (a stop token was generated) or ``"length"`` (``max_new_tokens`` reached).
    """

    token_ids: list[int]
    logps: list[float]
    entropies: list[float]
    finish_reason: str


@runtime_checkable
class Policy(Protocol):
    """What rollouts need from a policy (transformers here; :mod:`rlvr_gym_agents.policy.vllm` on GPUs).

    ``generate(token_ids, sampling, state=None)``: with ``state=None`` each row of ``token_ids`` is a full
    context; with a state returned by an earlier call, each row holds only the ids to append to that row
    (the state's rows and ``token_ids`` rows align). Returns the generations and the new state, which
    covers every context id and every generated id.
    """

    stop_token_ids: frozenset[int]
    max_context_tokens: int

    def generate(
        self, token_ids: Sequence[Sequence[int]], sampling: SamplingParams, state: Any | None = None
    ) -> tuple[list[Generation], Any]:
        """Generates one turn per row; see the class docstring."""
        ...
