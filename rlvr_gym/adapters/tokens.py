"""One multi-turn episode at the token level, for hosts that train on token ids (TRL, verl).

Token-in/token-out: the ids a policy generated are kept exactly as generated; between turns the ids of the
env's next observation (rendered as a user turn by the tokenizer's chat template) are appended, never
re-encoding the history. ``response_mask`` is 1 on generated ids and 0 on observation ids, so hosts mask the
observations out of the loss; observation positions get log-prob 0.0.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from rlvr_gym.core import Env
from rlvr_gym.episode import EnvEpisode
from rlvr_gym.registry import make
from rlvr_gym.tasks import Task

Generate = Callable[[list[int]], tuple[list[int], list[float]]]
"""``generate(prompt_ids) -> (new_ids, logprobs)``: one turn of the policy; ``len(logprobs) == len(new_ids)``."""
AsyncGenerate = Callable[[list[int]], Awaitable[tuple[list[int], list[float]]]]


@dataclasses.dataclass
class TokenEpisode:
    """One episode as token ids.

    Attributes:
        prompt_ids: the first prompt (the reset observation as a user turn, with the generation prompt).
        response_ids: every generated id and every observation id after the prompt, in order.
        response_mask: 1 for generated ids, 0 for observation ids; same length as ``response_ids``.
        response_logprobs: the policy's log-prob of each generated id, 0.0 at observation ids.
        reward: the episode return (sum of step rewards).
        success: ``info["success"]`` of the last step.
        num_turns: env steps taken.
        actions: the decoded actions (for logging).
        failures: the typed failures of the episode (``Failure.to_dict()``), an env crash included: a crash ends
            the episode, it never reaches the host trainer as an exception.
    """

    prompt_ids: list[int]
    response_ids: list[int] = dataclasses.field(default_factory=list)
    response_mask: list[int] = dataclasses.field(default_factory=list)
    response_logprobs: list[float] = dataclasses.field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    num_turns: int = 0
    actions: list[str] = dataclasses.field(default_factory=list)
    failures: list[dict[str, Any]] = dataclasses.field(default_factory=list)


def prompt_ids(tokenizer: Any, observation: str) -> list[int]:
    """The ids of the first prompt: ``observation`` as a user message with the generation prompt (the chat
    template), or the plain encoding when the tokenizer has no chat template."""
    if getattr(tokenizer, "chat_template", None):
        return list(tokenizer.apply_chat_template([{"role": "user", "content": observation}],
                                                  add_generation_prompt=True, tokenize=True, return_dict=False))
    return list(tokenizer.encode(observation, add_special_tokens=True))


_PROBE_USER, _PROBE_ASSISTANT, _PROBE_OBS = "probe question", "probe answer", "@@OBSERVATION@@"


def chat_template_delta(tokenizer: Any, end_of_turn_token: str | None = None,
                        system_prompt: str | None = None) -> tuple[str, str]:
    """The text a chat template puts ``(before, after)`` an observation appended as one more user message, from
    just after the assistant turn's end-of-turn token up to the next generation prompt (the token-in/token-out
    delta; algorithms.md §7.4). The text the template writes after the end-of-turn token (Qwen's ``"\\n"`` after
    ``<|im_end|>``, which engines never generate) starts ``before``, so a context of generated ids plus
    ``encode(before + observation + after)`` equals the template's full re-render for append-only templates.

    Found by rendering a probe conversation with and without the extra message and diffing the texts.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template (``apply_chat_template``).
        end_of_turn_token: the token that ends an assistant turn (default: the tokenizer's EOS token).
        system_prompt: the system message the conversations start with, if any.

    Raises:
        ValueError: no chat template, no end-of-turn token, a template that is not append-only (rendering one
            more message changes earlier text), or one that does not end assistant turns with the token.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat_template; set one or pick a chat model")
    eot = end_of_turn_token or tokenizer.eos_token
    if eot is None:
        raise ValueError("no end-of-turn token: the tokenizer has no eos_token; pass end_of_turn_token=")
    system = [{"role": "system", "content": system_prompt}] if system_prompt else []
    base = [*system, {"role": "user", "content": _PROBE_USER}, {"role": "assistant", "content": _PROBE_ASSISTANT}]
    base_text = str(tokenizer.apply_chat_template(base, tokenize=False, add_generation_prompt=False))
    extended = str(tokenizer.apply_chat_template([*base, {"role": "user", "content": _PROBE_OBS}], tokenize=False,
                                                 add_generation_prompt=True))
    if not extended.startswith(base_text):
        raise ValueError("chat template is not append-only: rendering one more message changes earlier text")
    end = base_text.rfind(eot)
    if end < 0 or _PROBE_ASSISTANT not in base_text[:end]:
        raise ValueError(f"the template does not end assistant turns with {eot!r}")
    before, _, after = (base_text[end + len(eot):] + extended[len(base_text):]).partition(_PROBE_OBS)
    return before, after


def observation_ids(tokenizer: Any, observation: str) -> list[int]:
    """The ids appended after a generated turn that ends with the end-of-turn (EOS) id: the template's delta
    around one more user message and the next generation prompt (:func:`chat_template_delta`), or a
    newline-wrapped plain encoding without a chat template.

    Raises:
        ValueError: as :func:`chat_template_delta` (pass ``encode_observation=`` to the episode runner then).
    """
    if not getattr(tokenizer, "chat_template", None):
        return list(tokenizer.encode(f"\n{observation}\n", add_special_tokens=False))
    before, after = chat_template_delta(tokenizer)
    return list(tokenizer.encode(before + observation + after, add_special_tokens=False))


def start_episode(task: Task, tokenizer: Any, env_factory: Callable[[str], Env] = make
                  ) -> tuple[EnvEpisode | None, TokenEpisode]:
    """Builds and resets the env of ``task`` (:class:`rlvr_gym.episode.EnvEpisode`, crash-safe) and the token
    episode of its first prompt; ``(None, episode with the crash in failures)`` when the env could not start."""
    env, failure = EnvEpisode.start(task, env_factory)
    if env is None:
        return None, TokenEpisode([], failures=[failure.to_dict()] if failure else [])
    return env, TokenEpisode(prompt_ids(tokenizer, env.observation))


def record_turn(episode: TokenEpisode, env: EnvEpisode, tokenizer: Any, new_ids: list[int], logprobs: list[float],
                max_response_tokens: int, encode_observation: Callable[[Any, str], list[int]]) -> bool:
    """Records one generated turn (ids and log-probs), steps ``env`` with its decoded text and appends the next
    observation's ids (mask 0); returns whether the episode is over (ended, or no room for another turn).

    Raises:
        ValueError: when ``logprobs`` and ``new_ids`` differ in length.
    """
    if len(logprobs) != len(new_ids):
        raise ValueError(f"generate returned {len(new_ids)} ids but {len(logprobs)} log-probs")
    episode.response_ids += new_ids
    episode.response_mask += [1] * len(new_ids)
    episode.response_logprobs += [float(x) for x in logprobs]
    action = tokenizer.decode(new_ids, skip_special_tokens=True)
    episode.actions.append(action)
    outcome = env.step(action)
    episode.num_turns += 1
    episode.reward += outcome.reward
    if outcome.failure is not None:
        episode.failures.append(outcome.failure.to_dict())
    if outcome.done:
        episode.success = outcome.success
        return True
    obs_ids = encode_observation(tokenizer, outcome.observation)
    if len(episode.response_ids) + len(obs_ids) >= max_response_tokens:
        return True  # no room for the observation and another turn: the episode is cut (reward so far)
    episode.response_ids += obs_ids
    episode.response_mask += [0] * len(obs_ids)
    episode.response_logprobs += [0.0] * len(obs_ids)
    return False


def run_token_episode(task: Task, generate: Generate, tokenizer: Any, *, max_response_tokens: int = 1024,
                      env_factory: Callable[[str], Env] = make,
                      encode_observation: Callable[[Any, str], list[int]] = observation_ids) -> TokenEpisode:
    """Plays ``task`` with ``generate`` until the env ends the episode or ``max_response_tokens`` run out.

    Args:
        task: the task (its ``env_id`` picks the env).
        generate: one policy turn, ``prompt_ids -> (new_ids, logprobs)``; it sees the whole context so far.
        tokenizer: a Hugging Face tokenizer (``encode``, ``decode``, optionally ``apply_chat_template``).
        max_response_tokens: the most ids after the prompt (generated plus observation).
        env_factory: builds the env from its id.
        encode_observation: ``(tokenizer, observation) -> ids`` appended between turns.

    Returns:
        The :class:`TokenEpisode`; the env is closed.
    """
    env, episode = start_episode(task, tokenizer, env_factory)
    if env is None:
        return episode
    try:
        while True:
            new_ids, logprobs = generate(episode.prompt_ids + episode.response_ids)
            if record_turn(episode, env, tokenizer, list(new_ids), list(logprobs), max_response_tokens,
                           encode_observation):
                return episode
    finally:
        _close(env, episode)


async def run_token_episode_async(task: Task, generate: AsyncGenerate, tokenizer: Any, *,
                                  max_response_tokens: int = 1024, env_factory: Callable[[str], Env] = make,
                                  encode_observation: Callable[[Any, str], list[int]] = observation_ids
                                  ) -> TokenEpisode:
    """:func:`run_token_episode` with an async ``generate`` (verl's server manager). Env steps run inline."""
    env, episode = start_episode(task, tokenizer, env_factory)
    if env is None:
        return episode
    try:
        while True:
            new_ids, logprobs = await generate(episode.prompt_ids + episode.response_ids)
            if record_turn(episode, env, tokenizer, list(new_ids), list(logprobs), max_response_tokens,
                           encode_observation):
                return episode
    finally:
        _close(env, episode)


def _close(env: EnvEpisode, episode: TokenEpisode) -> None:
    failure = env.close()
    if failure is not None:
        episode.failures.append(failure.to_dict())
