"""The transformers engine: batched token-in/token-out generation with log-probs, entropies and a reusable KV cache.

A policy maps a batch of token-id contexts to generated token ids. It never sees text: chat formatting and
tokenisation live in :mod:`rlvr_gym_agents.policy.chat`, so the ids trained on are exactly the ids generated.

Multi-turn rollouts append an observation after every turn. :class:`TransformersPolicy` keeps the key/value
cache of each row between calls (:class:`KVState`), so each turn only runs the model over the new tokens
(faster rollouts, identical trajectories). The cache appends in place
(:class:`~rlvr_gym_agents.policy.kv.GrowableCache`), and rows that start from identical ids (a GRPO group's
prompt) are prefilled once (less work, the same ids; measurements: docs/results.md), as is a long run of leading
ids that fresh rows share (a rollout tree's fallback branches restarting on one path). Rows of one batch have
different lengths; new tokens are left-padded and the padding stays in the cache as masked "holes", with
explicit position ids so each row sees the positions it would see alone.

Branching (tree rollouts): ``state.select([0, 0, 1])`` returns a new state whose rows are copies of rows
0, 0 and 1, so children extend a shared prefix without recomputing it; a fork inside a generate call (its ``fork``
hook) appends the children's rows to the state in place (``KVState.append_rows``: into spare rows when it has them).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from rlvr_gym_agents.batching import pad_left
from rlvr_gym_agents.policy.base import Generation, SamplingParams
from rlvr_gym_agents.policy.kv import KVState, cache_kwarg, returned_cache


class TransformersPolicy:
    """A causal LM from transformers, generating in batches with a reusable KV cache.

    Args:
        model: a causal LM (``AutoModelForCausalLM``); its weights are shared with the trainer.
        tokenizer: its tokenizer (used for the pad and stop ids only).
        stop_token_ids: ids that end a turn (end-of-turn, EOS); default: the tokenizer's EOS id.
        max_context_tokens: the longest context the rollout may build (default: the model's
            ``max_position_embeddings``).
        seed: seeds the sampling generator.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase,
                 stop_token_ids: Sequence[int] | None = None, max_context_tokens: int | None = None,
                 seed: int = 0) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.device = next(model.parameters()).device
        stops = list(stop_token_ids) if stop_token_ids is not None else [tokenizer.eos_token_id]
        if any(s is None for s in stops):
            raise ValueError("no stop token: the tokenizer has no eos_token and no stop_token_ids were given")
        self.stop_token_ids = frozenset(int(s) for s in stops)
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.pad_token_id = int(pad)
        self.max_context_tokens = int(max_context_tokens or model.config.max_position_embeddings)
        self.generator = torch.Generator(device="cpu").manual_seed(seed)
        self._cache_kwarg = cache_kwarg(model)

    @classmethod
    def from_pretrained(cls, path_or_id: str, device: str = "cpu", dtype: str = "float32",
                        **kwargs: Any) -> TransformersPolicy:
        """Loads a model and tokenizer by hub id or local directory (the same code path for both).

        Raises:
            FileNotFoundError: when a local-looking path does not exist or lacks a model or tokenizer.
        """
        model, tokenizer = load_model_and_tokenizer(path_or_id, device=device, dtype=dtype)
        return cls(model, tokenizer, **kwargs)

    def generate(self, token_ids: Sequence[Sequence[int]], sampling: SamplingParams,
                 state: KVState | None = None,
                 fork: Callable[[list[float]], list[int]] | None = None) -> tuple[list[Generation], KVState]:
        """Generates one turn for every row.

        Args:
            token_ids: B rows; full contexts when ``state`` is None, else the ids to append to each row.
            sampling: temperature, top-p and ``max_new_tokens``.
            state: the state returned by the previous call on these rows, or None.
            fork: branching at the turn's start (tree rollouts): called once, after the rows' ids are fed, with the
                entropy (nats) of each row's first-token distribution; returns the rows to copy, one new row per
                entry (repeats allowed). A copy shares its row's context and cache and samples its own turn.

        Returns:
            B generations, then one per copy (in ``fork``'s order), and the new state with as many rows (the last
            generated id of each row is pending in it).

        Raises:
            ValueError: when a row has nothing to run on, or ``state`` has a different number of rows.
        """
        if state is None:
            state = KVState.empty(len(token_ids), self.device)
        if len(state) != len(token_ids):
            raise ValueError(f"state has {len(state)} rows but {len(token_ids)} rows of token ids were given")
        feeds = [p + [int(t) for t in row] for p, row in zip(state.pending, token_ids)]
        if any(not f for f in feeds):
            raise ValueError("every row needs at least one token id to run on (an empty context was given)")
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                return self._generate(feeds, sampling, state, fork)
        finally:
            self.model.train(was_training)

    def _generate(self, feeds: list[list[int]], sampling: SamplingParams, state: KVState,
                  fork: Callable[[list[float]], list[int]] | None = None) -> tuple[list[Generation], KVState]:
        logits, state = self._first_feed(feeds, state)
        first = sample_tokens(logits, sampling.temperature, sampling.top_p, self.generator)
        if fork is not None and (copies := fork(first[2])):
            state = state.append_rows(copies)  # in place, into spare rows when the state has them
            more = sample_tokens(logits[copies], sampling.temperature, sampling.top_p, self.generator)
            first = (first[0] + more[0], first[1] + more[1], first[2] + more[2])
        batch = len(first[0])
        outs = [Generation([], [], [], "length") for _ in range(batch)]
        active = [True] * batch
        for step in range(sampling.max_new_tokens):
            if step == 0:
                tokens, logps, entropies = first
            else:
                tokens, logps, entropies = sample_tokens(logits, sampling.temperature, sampling.top_p, self.generator)
            for row in range(batch):
                if active[row]:
                    out = outs[row]
                    out.token_ids.append(tokens[row])
                    out.logps.append(logps[row])
                    out.entropies.append(entropies[row])
                    if tokens[row] in self.stop_token_ids:
                        active[row], out.finish_reason = False, "stop"
            if not any(active) or step == sampling.max_new_tokens - 1:
                break
            # Finished rows get a pad id that becomes a hole in the cache.
            next_feed = [[tokens[r]] if active[r] else [] for r in range(batch)]
            logits = self._feed(next_feed, state)
        # The last sampled id of every row has not been run through the model yet.
        state.pending = [[o.token_ids[-1]] for o in outs]
        return outs, state

    def _first_feed(self, feeds: list[list[int]], state: KVState) -> tuple[torch.Tensor, KVState]:
        """Feeds a turn's first ids. Rows of an empty state with identical ids (a group's shared prompt) are run
        once and their cache rows copied: a group of 8 episodes prefills its prompt once instead of 8 times. Rows
        that share at least :data:`MIN_SHARED_PREFILL` leading ids (a tree's fallback branches restarting from
        boundaries of one path) prefill them once too, then each row its own rest."""
        if state.attention_mask.shape[1] > 0:
            return self._feed(feeds, state), state
        distinct: dict[tuple[int, ...], int] = {}
        inverse = [distinct.setdefault(tuple(feed), len(distinct)) for feed in feeds]
        rows = [list(feed) for feed in distinct]
        group_of, prefixes = shared_prefixes(rows, MIN_SHARED_PREFILL)
        if len(prefixes) == len(rows):  # nothing shared beyond identical rows: one pass
            if len(rows) == len(feeds):
                return self._feed(feeds, state), state
            unique = KVState.empty(len(rows), self.device)
            return self._feed(rows, unique)[inverse], unique.select(inverse)
        shared = KVState.empty(len(prefixes), self.device)
        self._feed(prefixes, shared)
        unique = shared.select(group_of)
        logits = self._feed([row[len(prefixes[g]):] for row, g in zip(rows, group_of)], unique)
        return logits[inverse], unique.select(inverse)

    def _feed(self, feeds: list[list[int]], state: KVState) -> torch.Tensor:
        """Runs the model over left-padded ``feeds`` (rows may be empty: all holes); returns (B, V) logits
        of each row's last real position. Updates ``state`` in place (cache, mask, positions, pending)."""
        ids, new_mask = pad_left(feeds, self.pad_token_id)
        ids, new_mask = ids.to(self.device), new_mask.to(self.device)
        positions = state.next_position[:, None] + (new_mask.cumsum(dim=1) - 1).clamp(min=0)
        mask = torch.cat([state.attention_mask, new_mask], dim=1)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **{self._cache_kwarg: state.cache})
        state.cache = returned_cache(out, state.cache)
        state.attention_mask = mask
        state.next_position = state.next_position + new_mask.sum(dim=1)
        state.pending = [[] for _ in feeds]
        return out.logits[:, -1, :].float()


MIN_SHARED_PREFILL = 32
"""Fresh rows that share at least this many leading ids (and are not identical) prefill them in one pass of their
own: one more model call, so a short shared run is not worth it."""


def shared_prefixes(rows: Sequence[Sequence[int]], min_length: int) -> tuple[list[int], list[list[int]]]:
    """Groups rows by a shared leading run of at least ``min_length`` ids.

    Rows are sorted; consecutive rows join a group while the group's common prefix stays >= ``min_length``. A
    group's prefix leaves every member at least its last id (the pass after it must score each row's next id).

    Returns:
        ``(group_of, prefixes)``: each row's group index and each group's prefix (empty for a row alone); as many
        groups as rows when nothing is shared.
    """
    order = sorted((r for r in range(len(rows)) if len(rows[r]) > min_length), key=lambda r: list(rows[r]))
    group_of = [0] * len(rows)
    prefixes: list[list[int]] = []
    members: list[int] = []
    length = 0

    def close() -> None:
        keep = min([length] + [len(rows[m]) - 1 for m in members])
        shared = len(members) > 1 and keep >= min_length
        for m in members:
            if m == members[0] or not shared:
                prefixes.append(list(rows[m][:keep]) if shared else [])
            group_of[m] = len(prefixes) - 1

    for row in order:
        if members:
            first = rows[members[0]]
            common = next((i for i, (a, b) in enumerate(zip(first, rows[row])) if a != b),
                          min(len(first), len(rows[row])))
            if min(length, common) >= min_length:
                members.append(row)
                length = min(length, common)
                continue
            close()
        members, length = [row], len(rows[row])
    if members:
        close()
    for row in range(len(rows)):
        if len(rows[row]) <= min_length:  # too short to share min_length ids and keep one: alone
            prefixes.append([])
            group_of[row] = len(prefixes) - 1
    return group_of, prefixes


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float,
                  generator: torch.Generator) -> tuple[list[int], list[float], list[float]]:
    """Samples one id per row.

    Args:
        logits: (B, V) next-token logits.
        temperature: 0 for greedy; otherwise logits are divided by it.
        top_p: nucleus mass; ids outside the smallest set with mass >= top_p are never sampled.
        generator: the CPU random generator.

    Returns:
        (ids, logps, entropies), each a list of B; logp and entropy (nats) are of the full temperature-scaled
        distribution (for greedy, of the unscaled one).
    """
    scaled = logits / temperature if temperature > 0 else logits
    logprobs = F.log_softmax(scaled, dim=-1)
    entropy = -(logprobs.exp() * logprobs).sum(dim=-1)
    if temperature == 0:
        ids = logprobs.argmax(dim=-1)
    else:
        probs = logprobs.exp()
        if top_p < 1.0:
            probs = _nucleus(probs, top_p)
        ids = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(logits.device)
    chosen = logprobs.gather(1, ids[:, None]).squeeze(1)
    return ids.tolist(), chosen.tolist(), entropy.tolist()


def _nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zeroes the ids outside the top-p nucleus (Holtzman et al., 2020) of each row of (B, V) ``probs``."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    return torch.zeros_like(probs).scatter(1, order, sorted_probs)


class UnknownModelError(OSError):
    """``model.path_or_id`` names no loadable model: not a local directory, not in the local Hugging Face cache, and
    the hub cannot provide it. The message names the closest cached models and how to fix it."""


def _is_local(path_or_id: str) -> bool:
    return path_or_id.startswith((".", "/", "~")) or Path(path_or_id).exists() or path_or_id.count("/") > 1


def check_model_source(path_or_id: str) -> None:
    """Fails fast, before a download or any training, when ``path_or_id`` names no model that can be loaded.

    A local-looking path must be a model directory. A hub id must be in the local Hugging Face cache, or else the
    hub must answer for it (one metadata request; with ``HF_HUB_OFFLINE=1`` none is made): then
    ``from_pretrained`` downloads it as before.

    Raises:
        FileNotFoundError: a local-looking path that does not exist or has no ``config.json``.
        UnknownModelError: a hub id that is neither cached nor on a reachable hub, naming the closest cached models.
    """
    if _is_local(path_or_id):
        folder = Path(path_or_id).expanduser()
        if not folder.is_dir():
            raise FileNotFoundError(f"model path {folder} does not exist (expected a model directory)")
        if not (folder / "config.json").is_file():
            raise FileNotFoundError(f"model path {folder} has no config.json (is it a model directory?)")
        return
    from huggingface_hub import constants, model_info, try_to_load_from_cache
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, HFValidationError, RepositoryNotFoundError

    try:
        if isinstance(try_to_load_from_cache(path_or_id, "config.json", cache_dir=constants.HF_HUB_CACHE), str):
            return
    except HFValidationError as error:
        raise UnknownModelError(_unknown_model_message(path_or_id, f"it is not a valid hub id ({error})")) from None
    if constants.HF_HUB_OFFLINE:
        raise UnknownModelError(_unknown_model_message(path_or_id, "HF_HUB_OFFLINE is set, so the hub is not asked"))
    try:
        model_info(path_or_id, timeout=10)
    except GatedRepoError:
        return  # gated: from_pretrained says whether this login has access
    except RepositoryNotFoundError:
        raise UnknownModelError(_unknown_model_message(
            path_or_id, "the hub has no such model (or it is private: log in with `hf auth login`)")) from None
    except HfHubHTTPError:
        return  # the hub answered with another error: leave the verdict to from_pretrained
    except Exception as error:  # noqa: BLE001  # no answer (DNS, connection, timeout: the http client's own
        # exception types): nothing can be downloaded
        raise UnknownModelError(_unknown_model_message(
            path_or_id, f"the hub could not be reached ({error.__class__.__name__})")) from None


def cached_models() -> list[str]:
    """Ids of the models in the local Hugging Face cache (its ``models--org--name`` folders)."""
    from huggingface_hub import constants

    cache = Path(constants.HF_HUB_CACHE)
    if not cache.is_dir():
        return []
    return sorted(p.name.removeprefix("models--").replace("--", "/") for p in cache.glob("models--*") if p.is_dir())


def _unknown_model_message(path_or_id: str, reason: str) -> str:
    from huggingface_hub import constants

    cached = cached_models()
    close = difflib.get_close_matches(path_or_id, cached, n=3, cutoff=0.6)
    close += [c for c in cached if c.lower() == path_or_id.lower() and c not in close]
    known = (f"Did you mean {' or '.join(close)} (cached)?" if close else
             f"Cached models: {', '.join(cached[:10]) or 'none'}{' ...' if len(cached) > 10 else ''}.")
    return (f"could not load hub model {path_or_id!r}: it is not a local model directory, not in the Hugging Face "
            f"cache ({constants.HF_HUB_CACHE}), and {reason}. {known} Fix model.path_or_id, or download it where "
            f"there is network (`hf download {path_or_id}`) and point HF_HOME at that cache, or pass a model directory.")


def load_tokenizer(path_or_id: str) -> PreTrainedTokenizerBase:
    """Loads a tokenizer robustly.

    transformers 5 can hand back the model family's own tokenizer class instead of the one saved in a local
    folder (see the pitfalls file). A folder whose ``tokenizer_config.json`` names
    ``PreTrainedTokenizerFast`` is therefore loaded with that class explicitly.

    Raises:
        FileNotFoundError: when a local path does not exist or has no tokenizer files.
        UnknownModelError: a hub id that is neither cached nor downloadable (:func:`check_model_source`).
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    if _is_local(path_or_id):
        folder = Path(path_or_id).expanduser()
        if not folder.is_dir():
            raise FileNotFoundError(f"tokenizer path {folder} does not exist (expected a model directory)")
        config_file = folder / "tokenizer_config.json"
        if not (folder / "tokenizer.json").is_file() and not config_file.is_file():
            raise FileNotFoundError(f"no tokenizer in {folder}: expected tokenizer.json or tokenizer_config.json")
        if config_file.is_file() and '"PreTrainedTokenizerFast"' in config_file.read_text(encoding="utf-8"):
            return PreTrainedTokenizerFast.from_pretrained(str(folder))
        return AutoTokenizer.from_pretrained(str(folder))
    check_model_source(path_or_id)
    return AutoTokenizer.from_pretrained(path_or_id)


def load_model_and_tokenizer(path_or_id: str, device: str = "cpu",
                             dtype: str = "float32") -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Loads ``AutoModelForCausalLM`` and its tokenizer by hub id or local directory.

    Args:
        path_or_id: a hub id (``Qwen/Qwen2.5-0.5B-Instruct``) or a model directory.
        device: ``cpu`` or ``cuda[:N]``.
        dtype: ``float32`` (best on CPU), ``bfloat16`` or ``float16``.

    Raises:
        FileNotFoundError: naming the path when a local model directory or its weights are missing.
        UnknownModelError: a hub id that is neither cached nor downloadable (:func:`check_model_source`).
    """
    check_model_source(path_or_id)
    if _is_local(path_or_id):
        AutoConfig.from_pretrained(str(Path(path_or_id).expanduser()))
    try:
        tokenizer = load_tokenizer(path_or_id)
        model = AutoModelForCausalLM.from_pretrained(path_or_id, dtype=getattr(torch, dtype))
    except OSError as error:
        if _is_local(path_or_id) or isinstance(error, UnknownModelError):
            raise
        raise UnknownModelError(_unknown_model_message(
            path_or_id, f"loading it from the hub failed ({error.__class__.__name__}: {error})")) from error
    return model.to(device), tokenizer  # type: ignore[arg-type]
