"""A vLLM rollout policy implementing :class:`rlvr_gym_agents.policy.Policy`, with weight sync the supported way.

UNTESTED ON A GPU: the development machine has none and no vLLM. Every call this module makes on the engine is
exercised on the CPU against :mod:`rlvr_gym_agents.policy.fake_vllm`, which runs its engine in another process and
enforces V1's rule that RPC arguments be msgpack-serialisable (``tests/rlvr_gym_agents/test_vllm_policy.py``).

How it talks to vLLM (re-derived from vLLM's ``examples/offline_inference/rlhf.py``, ``rlhf_colocate.py`` and
``rlhf_utils.py``):

- the engine is built with ``worker_extension_cls`` = :data:`~rlvr_gym_agents.policy.vllm_worker.WORKER_EXTENSION`;
  the trainer calls its methods by name, ``llm.collective_rpc("receive_weights", args=(specs,))``, with plain
  arguments. (A closure through ``LLM.apply_model`` fails V1's msgpack RPC with a ``TypeError``.)
- ``weight_sync="broadcast"``: at start the trainer (rank 0) and the engine's workers join a weight group
  (:mod:`.weight_transfer`: vLLM's ``StatelessProcessGroup`` + NCCL on GPUs); each sync sends the names, dtypes and
  shapes through the RPC while the trainer broadcasts the tensors. Needs the trainer and the engine on different
  GPUs (NCCL cannot put two ranks on one device).
- ``weight_sync="ipc"`` (one GPU, trainer and engine colocated): the weights are packed into one flat CUDA buffer
  whose IPC handle (and layout) go to the workers over a zmq side channel; the RPC carries only its address.
  The engine sleeps during the update (:meth:`VLLMPolicy.sleep`: KV cache freed, weights offloaded) and wakes for
  the sync (``enable_sleep_mode``).
- prompts are token ids (``{"prompt_token_ids": ids}``); ``logprobs_mode="processed_logprobs"`` returns log-probs
  after temperature and top-p, the distribution the tokens were drawn from. With ``top_p < 1`` they are
  renormalised over the nucleus, while the trainer's recomputed ones are over the whole vocabulary: use
  ``algorithm.loss.rollout_correction`` (:mod:`rlvr_gym_agents.update.correction`) on this engine.
- KV reuse across turns comes from vLLM's automatic prefix caching, so the state is each row's ids
  (:class:`TokenState`); the prefix cache is reset after every sync.
- vLLM returns the top ``num_logprobs`` log-probs per token, not the full distribution: ``entropies`` are those of
  the renormalised top-k distribution, a lower-resolution estimate of the true entropy.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Any

import torch

from rlvr_gym_agents.policy.base import Generation, SamplingParams
from rlvr_gym_agents.policy.vllm_worker import WORKER_EXTENSION
from rlvr_gym_agents.policy.weight_transfer import WeightGroup, free_port, open_weight_group

WEIGHT_SYNCS = ("broadcast", "ipc")


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
    """Generates with a vLLM engine; the trainer keeps its own copy and pushes weights with :meth:`sync_weights`.

    Args:
        model_id: hub id or model directory (the one the trainer loaded).
        stop_token_ids: ids that end a turn.
        max_context_tokens: the engine's ``max_model_len``.
        dtype: the engine's weight dtype; synced tensors are cast to it.
        weight_sync: ``broadcast`` (trainer and engine on different devices) or ``ipc`` (colocated on one GPU).
        trainer_device: the device of the trainer's weights (the broadcast source).
        gpu_memory_utilization: fraction of GPU memory vLLM may take (leave room for the trainer).
        num_logprobs: top-k log-probs returned per token (for the entropy estimate).
        seed: the engine's sampling seed.
        engine: the module providing ``LLM`` and ``SamplingParams``: ``vllm`` (default) or
            :mod:`rlvr_gym_agents.policy.fake_vllm` (CPU tests).
        **engine_kwargs: passed to ``LLM``.
    """

    def __init__(self, model_id: str, stop_token_ids: Iterable[int], max_context_tokens: int = 4096,
                 dtype: str = "bfloat16", weight_sync: str = "broadcast", trainer_device: str = "cuda",
                 gpu_memory_utilization: float = 0.4, num_logprobs: int = 20, seed: int = 0,
                 engine: ModuleType | None = None, **engine_kwargs: Any) -> None:
        if weight_sync not in WEIGHT_SYNCS:
            raise ValueError(f"weight_sync must be one of {WEIGHT_SYNCS}, got {weight_sync!r}")
        if engine is None:
            import vllm  # lazily: vLLM is an optional GPU dependency (pip install rlvr-gym-agents[gpu])

            engine = vllm
        self._engine = engine
        self.stop_token_ids = frozenset(int(i) for i in stop_token_ids)
        self.max_context_tokens = int(max_context_tokens)
        self.num_logprobs = int(num_logprobs)
        self.dtype, self.weight_sync = dtype, weight_sync
        self.trainer_device = torch.device(trainer_device)
        self.num_syncs = 0
        self._num_workers = int(engine_kwargs.get("tensor_parallel_size", 1))  # one weight-group rank per worker
        self._asleep = False
        self.llm = engine.LLM(model=model_id, worker_extension_cls=WORKER_EXTENSION, max_model_len=max_context_tokens,
                              seed=seed, dtype=dtype, enable_prefix_caching=True, logprobs_mode="processed_logprobs",
                              gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=weight_sync == "ipc",
                              **engine_kwargs)
        self._group: WeightGroup | None = None
        if weight_sync == "broadcast":
            self._group = self._open_weight_group()

    def generate(self, token_ids: Sequence[Sequence[int]], sampling: SamplingParams,
                 state: TokenState | None = None) -> tuple[list[Generation], TokenState]:
        """See :class:`rlvr_gym_agents.policy.Policy`."""
        if state is None:
            state = TokenState([[] for _ in token_ids])
        if len(state) != len(token_ids):
            raise ValueError(f"state has {len(state)} rows but {len(token_ids)} rows of token ids were given")
        contexts = [list(c) + [int(t) for t in row] for c, row in zip(state.contexts, token_ids)]
        params = self._engine.SamplingParams(
            temperature=sampling.temperature, top_p=sampling.top_p, max_tokens=sampling.max_new_tokens,
            stop_token_ids=sorted(self.stop_token_ids), logprobs=self.num_logprobs, detokenize=False,
        )
        if self._asleep:  # slept through an update without a sync (nothing was kept): same weights, wake up
            self.llm.wake_up()
            self._asleep = False
        prompts = [{"prompt_token_ids": c} for c in contexts]  # vLLM's TokensPrompt
        outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        generations = [_generation(out.outputs[0], self.stop_token_ids) for out in outputs]
        return generations, TokenState([c + g.token_ids for c, g in zip(contexts, generations)])

    def sync_weights(self, named_parameters: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Loads the trainer's weights (Hugging Face names) into the engine; call after each update."""
        dtype = getattr(torch, self.dtype)
        weights = [(name, tensor.detach().to(dtype).contiguous()) for name, tensor in named_parameters]
        if self.weight_sync == "ipc":
            self.llm.wake_up(tags=["weights"])
            self._sync_ipc(weights)
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False
        else:
            self._sync_broadcast(weights)
        self.llm.reset_prefix_cache()  # cached keys/values were computed with the old weights
        self.num_syncs += 1

    def sleep(self) -> None:
        """Frees the engine's GPU memory for the update (colocated ``ipc`` sync only; :meth:`sync_weights` wakes
        it); a no-op otherwise."""
        if self.weight_sync == "ipc" and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def weights_fingerprint(self) -> float:
        """The sum of the engine's parameters (float64), read through the worker extension."""
        return float(self.llm.collective_rpc("weights_fingerprint")[0])

    def close(self) -> None:
        """Shuts the engine down when it supports it."""
        shutdown = getattr(self.llm, "shutdown", None)
        if shutdown is not None:
            shutdown()

    def _open_weight_group(self) -> WeightGroup:
        """The trainer joins the weight group as rank 0 while the workers join in a background RPC."""
        host, port = "127.0.0.1", free_port()
        num_workers = self._num_workers
        with ThreadPoolExecutor(1) as pool:
            joined = pool.submit(self.llm.collective_rpc, "init_weight_group", args=(host, port, 1, 1 + num_workers))
            group = open_weight_group(host, port, 0, 1 + num_workers, self.trainer_device)
            joined.result()
        return group

    def _sync_broadcast(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        assert self._group is not None  # opened in __init__ for broadcast sync
        specs = [[name, str(t.dtype).removeprefix("torch."), list(t.shape)] for name, t in weights]
        with ThreadPoolExecutor(1) as pool:
            received = pool.submit(self.llm.collective_rpc, "receive_weights", args=(specs,))
            for _, tensor in weights:
                self._group.broadcast(tensor.to(self.trainer_device))
            received.result()

    def _sync_ipc(self, weights: list[tuple[str, torch.Tensor]]) -> None:
        """One flat CUDA buffer; its IPC handle and layout travel over a zmq side channel (untested here)."""
        import zmq
        from torch.multiprocessing.reductions import reduce_tensor

        layout, offset = [], 0
        for name, tensor in weights:
            layout.append([name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape), offset])
            offset += tensor.numel() * tensor.element_size()
        buffer = torch.cat([t.to(self.trainer_device).view(-1).view(torch.uint8) for _, t in weights])
        rebuild, handle_args = reduce_tensor(buffer)
        address = f"ipc:///tmp/rlvr-gym-weights-{uuid.uuid4().hex}.sock"
        channel = zmq.Context.instance().socket(zmq.REQ)
        channel.bind(address)
        try:
            with ThreadPoolExecutor(1) as pool:
                received = pool.submit(self.llm.collective_rpc, "receive_weights_ipc", args=(address,))
                channel.send_pyobj((rebuild, handle_args, layout))
                channel.recv_pyobj()
                received.result()
        finally:
            channel.close()
        del buffer


def _generation(completion: Any, stop_token_ids: frozenset[int]) -> Generation:
    ids = [int(i) for i in completion.token_ids]
    logps, entropies = [], []
    for token, top in zip(ids, completion.logprobs or []):
        logps.append(float(top[token].logprob))
        entropies.append(_topk_entropy([float(lp.logprob) for lp in top.values()]))
    finish = "stop" if ids and ids[-1] in stop_token_ids else "length"
    return Generation(ids, logps, entropies, finish)


def _topk_entropy(logprobs: list[float]) -> float:
    """Entropy (nats) of the top-k distribution renormalised to sum to one (ids at -inf count as 0)."""
    finite = [lp for lp in logprobs if math.isfinite(lp)]
    if not finite:
        return 0.0
    top = max(finite)
    weights = [math.exp(lp - top) for lp in finite]
    total = sum(weights)
    return -sum(w / total * math.log(w / total) for w in weights if w > 0)
