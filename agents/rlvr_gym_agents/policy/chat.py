"""Chat formatting with token-in/token-out (TITO).

A multi-turn context is built from ids only: the prompt ids (system + first observation, rendered once with
the tokenizer's chat template), then per turn the ids the policy generated and the ids of the observation
*delta* (the text the template puts between the end of the assistant turn and the start of the next
assistant turn, tokenised once on its own). History is never decoded and re-encoded, so the ids trained on
are exactly the ids generated (algorithms.md §7.4; verl#3720, prime-rl#1334).

The delta (:func:`rlvr_gym.adapters.tokens.chat_template_delta`, shared with the adapters for TRL and verl) is
found by rendering a probe conversation with and without one more user message and diffing the texts; the text
the template writes after an assistant's end-of-turn token (Qwen's ``"\\n"`` after ``<|im_end|>``, which engines
never generate) is prepended to every delta. For append-only templates the
result equals a full re-render; :meth:`ChatFormat.render_ids` gives that re-render for checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

from rlvr_gym.adapters.tokens import chat_template_delta


class ChatFormat:
    """Turns observations into ids and assembles multi-turn contexts token-in/token-out.

    Args:
        tokenizer: a tokenizer with a chat template.
        system_prompt: an optional system message put before the first observation.
        end_of_turn_token: the token that ends an assistant turn (default: the tokenizer's EOS token).

    Raises:
        ValueError: when the tokenizer has no chat template, no end-of-turn token, or a template whose
            renders are not prefixes of one another (TITO impossible without a custom template).
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, system_prompt: str | None = None,
                 end_of_turn_token: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        eot = end_of_turn_token or tokenizer.eos_token
        if eot is None:
            raise ValueError("no end-of-turn token: the tokenizer has no eos_token; pass end_of_turn_token=")
        self.end_of_turn_token = eot
        self.end_of_turn_id: int = tokenizer.convert_tokens_to_ids(eot)  # type: ignore[assignment]
        self._delta_prefix, self._delta_suffix = chat_template_delta(tokenizer, eot, system_prompt)

    @classmethod
    def for_policy(cls, policy: Any, system_prompt: str | None = None) -> ChatFormat:
        """The chat format of ``policy``'s tokenizer, with its end-of-turn id added to the policy's stop ids (so a
        turn ends where the template ends an assistant message). Used by training and by ``rlvr-gym eval``."""
        chat = cls(policy.tokenizer, system_prompt=system_prompt)
        policy.stop_token_ids = frozenset(policy.stop_token_ids | {chat.end_of_turn_id})
        return chat

    def _messages(self, first_observation: str) -> list[dict[str, str]]:
        system = [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        return system + [{"role": "user", "content": first_observation}]

    def _render(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> str:
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
        return str(text)

    def encode(self, text: str) -> list[int]:
        """Tokenises ``text`` once, without adding special tokens."""
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def prompt_ids(self, first_observation: str) -> list[int]:
        """Ids of the system prompt, the first observation and the generation prompt."""
        return self.encode(self._render(self._messages(first_observation), add_generation_prompt=True))

    def observation_ids(self, observation: str, previous_turn_ended: bool = True) -> list[int]:
        """Ids to append after a generated turn: the rest of the assistant turn, the observation as a user
        message, and the next generation prompt.

        Args:
            observation: the env's observation text.
            previous_turn_ended: False when the generation hit ``max_new_tokens`` without the end-of-turn
                token; the token is then inserted here (it is not trained on).
        """
        ids = [] if previous_turn_ended else [self.end_of_turn_id]
        return ids + self.encode(self._delta_prefix + observation + self._delta_suffix)

    def decode_action(self, generated_ids: Sequence[int]) -> str:
        """The action text of a generated turn (special tokens, hence the end-of-turn token, dropped)."""
        return str(self.tokenizer.decode(list(generated_ids), skip_special_tokens=True)).strip()

    def render_ids(self, observations: Sequence[str], actions: Sequence[str]) -> list[int]:
        """A full re-render of a conversation (for checks): ``observations[i]`` precedes ``actions[i]``;
        ends with a generation prompt when there is one more observation than actions."""
        messages: list[dict[str, Any]] = self._messages(observations[0])
        for i, action in enumerate(actions):
            messages.append({"role": "assistant", "content": action})
            if i + 1 < len(observations):
                messages.append({"role": "user", "content": observations[i + 1]})
        return self.encode(self._render(messages, add_generation_prompt=len(observations) > len(actions)))
