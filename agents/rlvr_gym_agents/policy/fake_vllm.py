"""A CPU stand-in for the subset of vLLM's offline API that :class:`~rlvr_gym_agents.policy.vllm.VLLMPolicy` calls.

Faithful where our code could go wrong, and nowhere else:

- the engine runs in **another process** (vLLM V1's EngineCore does), so engine state is reachable only through RPC;
- every request and reply crosses the process boundary as **msgpack** bytes; an argument msgpack cannot carry (a
  Python function, a closure, an arbitrary object) raises the ``TypeError`` V1's encoder raises ("Object of type
  <class 'function'> is not serializable. Set VLLM_ALLOW_INSECURE_SERIALIZATION=1 ..."); tensors are allowed, as V1
  allows them; ``apply_model(func)`` goes through ``collective_rpc`` as in V1 and so fails the same way;
- the worker is built with ``worker_extension_cls`` mixed in, and ``collective_rpc(method_name, args=...)`` calls
  the worker's method by name: engine state changes only through the extension;
- ``generate`` takes prompts as token ids (``{"prompt_token_ids": [...]}``, vLLM's ``TokensPrompt``) and returns
  ``RequestOutput``-shaped results: per generated token a dict of the top ``logprobs`` ids (and the sampled one) to
  ``Logprob(logprob, rank)``; ``logprobs_mode="processed_logprobs"`` gives log-probs after temperature and top-p
  (renormalised over the nucleus, as vLLM does), ``raw_logprobs`` those of the model's logits;
- ``sleep(level)`` / ``wake_up(tags)``: generating, or calling the worker, while the needed part sleeps is an error.

Not modelled: batching and scheduling, paged attention, prefix caching (``reset_prefix_cache`` is accepted),
tensor parallelism (one worker), CUDA. The model is the transformers model of the same directory, in float32 unless
``dtype`` says otherwise.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import multiprocessing
import threading
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import msgpack
import torch
import torch.nn.functional as F

INSECURE_HINT = "Set VLLM_ALLOW_INSECURE_SERIALIZATION=1 to allow fallback to pickle-based serialization."


@dataclasses.dataclass
class SamplingParams:
    """The sampling fields we use of ``vllm.SamplingParams``."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 16
    stop_token_ids: list[int] | None = None
    logprobs: int | None = None
    detokenize: bool = True
    seed: int | None = None


@dataclasses.dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclasses.dataclass
class CompletionOutput:
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str
    text: str = ""


@dataclasses.dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]


class LLM:
    """``vllm.LLM`` over a transformers model in a separate engine process (see the module docstring).

    Args:
        model: a model directory (transformers format).
        worker_extension_cls: ``"package.module.Class"`` mixed into the worker, as vLLM does.
        seed: the engine's sampling seed.
        dtype: the engine's weight dtype (``auto`` = float32 here).
        logprobs_mode: ``raw_logprobs`` or ``processed_logprobs``.
        **ignored: other ``vllm.LLM`` arguments (``max_model_len``, ``gpu_memory_utilization``, ...).
    """

    def __init__(self, model: str, worker_extension_cls: str | None = None, seed: int = 0, dtype: str = "auto",
                 logprobs_mode: str = "raw_logprobs", **ignored: Any) -> None:
        if logprobs_mode not in ("raw_logprobs", "processed_logprobs"):
            raise ValueError(f"logprobs_mode must be raw_logprobs or processed_logprobs, got {logprobs_mode!r}")
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(target=_engine_main, daemon=True,
                                        args=(child, model, worker_extension_cls, seed, dtype, logprobs_mode))
        self._process.start()
        child.close()
        self._lock = threading.Lock()
        self._closed = False
        self._receive()  # the engine's "ready" (or its start-up error)

    def generate(self, prompts: Sequence[dict[str, Any]], sampling_params: SamplingParams | None = None,
                 use_tqdm: bool = True) -> list[RequestOutput]:
        """One ``RequestOutput`` per prompt (``{"prompt_token_ids": [...]}``), in order."""
        params = dataclasses.asdict(sampling_params or SamplingParams())
        replies = self._call("generate", [dict(p) for p in prompts], params)
        return [RequestOutput(str(i), list(p["prompt_token_ids"]), [_completion(r)])
                for i, (p, r) in enumerate(zip(prompts, replies))]

    def collective_rpc(self, method: Any, timeout: float | None = None, args: Sequence[Any] = (),
                       kwargs: dict[str, Any] | None = None) -> list[Any]:
        """Calls the worker's method ``method`` (a name) with ``args``/``kwargs``; one result per worker (one here).

        Raises:
            TypeError: an argument (or ``method`` itself, when it is a function) is not msgpack-serialisable.
        """
        return [self._call("collective_rpc", method, list(args), dict(kwargs or {}))]

    def apply_model(self, func: Any) -> list[Any]:
        """As in V1: sends ``func`` through ``collective_rpc``, so a function fails to serialise."""
        return self.collective_rpc(func)

    def reset_prefix_cache(self) -> bool:
        return bool(self._call("reset_prefix_cache"))

    def sleep(self, level: int = 1) -> None:
        """Level 1 offloads the weights and drops the KV cache; level 2 drops both."""
        self._call("sleep", level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Wakes ``tags`` (``weights``, ``kv_cache``) or everything."""
        self._call("wake_up", tags)

    def shutdown(self) -> None:
        """Stops the engine process."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call("shutdown")
        except (OSError, EOFError, RuntimeError):
            pass
        self._process.join(timeout=10)
        if self._process.is_alive():
            self._process.kill()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown the pipe may be gone
            self.shutdown()

    def _call(self, kind: str, *payload: Any) -> Any:
        message = encode([kind, list(payload)])  # raises TypeError before anything is sent, as V1 does
        with self._lock:
            if self._closed and kind != "shutdown":
                raise RuntimeError("the fake vLLM engine was shut down")
            self._conn.send_bytes(message)
            return self._receive()

    def _receive(self) -> Any:
        reply = decode(self._conn.recv_bytes())
        if "error" in reply:
            raise RuntimeError(f"fake vLLM engine: {reply['error']}")
        return reply.get("result")


# -- msgpack, as strict as V1's encoder ------------------------------------------------------------------------


def encode(obj: Any) -> bytes:
    """msgpack bytes of ``obj``; tensors become (dtype, shape, bytes).

    Raises:
        TypeError: ``Object of type <...> is not serializable. Set VLLM_ALLOW_INSECURE_SERIALIZATION=1 ...``
    """
    return msgpack.packb(obj, default=_encode_hook, use_bin_type=True, strict_types=False)


def decode(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, object_hook=_decode_hook, strict_map_key=False)


def _encode_hook(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        tensor = obj.detach().cpu().contiguous()
        dtype = str(tensor.dtype).removeprefix("torch.")
        return {"__tensor__": [dtype, list(tensor.shape), tensor.view(torch.uint8).numpy().tobytes()
                               if tensor.numel() else b""]}
    raise TypeError(f"Object of type {type(obj)} is not serializable. {INSECURE_HINT}")


def _decode_hook(obj: dict[Any, Any]) -> Any:
    if "__tensor__" in obj:
        dtype_name, shape, raw = obj["__tensor__"]
        dtype = getattr(torch, dtype_name)
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        return flat.view(dtype).reshape(shape)
    return obj


def _completion(reply: dict[str, Any]) -> CompletionOutput:
    logprobs = [{int(token): Logprob(lp, rank) for token, (lp, rank) in step.items()} for step in reply["logprobs"]]
    return CompletionOutput(0, list(reply["token_ids"]), logprobs, reply["finish_reason"])


# -- the engine process ----------------------------------------------------------------------------------------


class _ModelAdapter:
    """What a vLLM worker's ``model_runner.model`` offers the extension: ``load_weights`` by Hugging Face name."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.hf = model
        self._params = dict(model.named_parameters())

    def load_weights(self, weights: Sequence[tuple[str, torch.Tensor]]) -> set[str]:
        loaded = set()
        with torch.no_grad():
            for name, tensor in weights:
                if name not in self._params:
                    raise KeyError(f"no parameter {name!r} in the engine's model")
                self._params[name].copy_(tensor.to(self._params[name].dtype))
                loaded.add(name)
        return loaded

    def parameters(self) -> Any:
        return self.hf.parameters()

    def named_parameters(self) -> Any:
        return self.hf.named_parameters()


class _FakeWorker:
    """A vLLM worker's attributes the extension may use: ``device``, ``rank``, ``model_runner.model``."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.device = torch.device("cpu")
        self.rank = 0
        self.model_runner = SimpleNamespace(model=_ModelAdapter(model))


def _build_worker(model_path: str, extension: str | None, dtype: str) -> _FakeWorker:
    from transformers import AutoModelForCausalLM

    torch_dtype = torch.float32 if dtype in ("auto", "float32") else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch_dtype).eval()
    cls: type[_FakeWorker] = _FakeWorker
    if extension:
        module_name, _, class_name = extension.rpartition(".")
        cls = type("FakeWorkerWithExtension", (_FakeWorker, getattr(importlib.import_module(module_name), class_name)),
                   {})
    return cls(model)


class _Engine:
    def __init__(self, worker: _FakeWorker, seed: int, logprobs_mode: str) -> None:
        self.worker, self.logprobs_mode = worker, logprobs_mode
        self.generator = torch.Generator().manual_seed(seed)
        self.asleep: set[str] = set()

    def handle(self, kind: str, payload: list[Any]) -> Any:
        if kind == "generate":
            if self.asleep:
                raise RuntimeError(f"generate while the engine sleeps ({sorted(self.asleep)}); call wake_up() first")
            prompts, params = payload
            return [self._generate(list(p["prompt_token_ids"]), params) for p in prompts]
        if kind == "collective_rpc":
            method, args, kwargs = payload
            if "weights" in self.asleep:
                raise RuntimeError("collective_rpc while the weights sleep; call wake_up(tags=['weights']) first")
            if not isinstance(method, str) or method.startswith("_") or not callable(getattr(self.worker, method, None)):
                raise AttributeError(f"the worker has no method {method!r} (add it to the worker extension)")
            return getattr(self.worker, method)(*args, **kwargs)
        if kind == "sleep":
            self.asleep = {"weights", "kv_cache"}
            return None
        if kind == "wake_up":
            self.asleep -= set(payload[0] or ["weights", "kv_cache"])
            return None
        if kind in ("reset_prefix_cache", "shutdown"):
            return True
        raise ValueError(f"unknown request {kind!r}")

    @torch.no_grad()
    def _generate(self, prompt: list[int], params: dict[str, Any]) -> dict[str, Any]:
        model = self.worker.model_runner.model.hf
        stops = set(params["stop_token_ids"] or [])
        out = model(input_ids=torch.tensor([prompt]), use_cache=True)
        tokens: list[int] = []
        steps: list[dict[int, tuple[float, int]]] = []
        finish = "length"
        for _ in range(params["max_tokens"]):
            token, step = self._sample(out.logits[0, -1].float(), params)
            tokens.append(token)
            steps.append(step)
            if token in stops:
                finish = "stop"
                break
            out = model(input_ids=torch.tensor([[token]]), past_key_values=out.past_key_values, use_cache=True)
        return {"token_ids": tokens, "logprobs": steps, "finish_reason": finish}

    def _sample(self, logits: torch.Tensor, params: dict[str, Any]) -> tuple[int, dict[int, tuple[float, int]]]:
        raw = F.log_softmax(logits, dim=-1)
        temperature, top_p = params["temperature"], params["top_p"]
        if temperature == 0:
            processed = raw
            token = int(raw.argmax())
        else:
            processed = F.log_softmax(logits / temperature, dim=-1)
            if top_p < 1.0:
                processed = F.log_softmax(_nucleus_logits(processed, top_p), dim=-1)  # renormalised over the nucleus
            token = int(torch.multinomial(processed.exp(), 1, generator=self.generator))
        reported = processed if self.logprobs_mode == "processed_logprobs" else raw
        order = reported.argsort(descending=True)
        ranks = {int(t): r + 1 for r, t in enumerate(order[: max(int(params["logprobs"] or 0), 1)].tolist())}
        ranks.setdefault(token, int((reported > reported[token]).sum()) + 1)
        return token, {t: (float(reported[t]), rank) for t, rank in ranks.items()}


def _nucleus_logits(logprobs: torch.Tensor, top_p: float) -> torch.Tensor:
    """``logprobs`` with the ids outside the smallest set of mass >= top_p set to -inf."""
    sorted_lp, order = logprobs.sort(descending=True)
    before = sorted_lp.exp().cumsum(-1) - sorted_lp.exp()
    dropped = order[before >= top_p]
    return logprobs.index_fill(0, dropped, float("-inf"))


def _engine_main(conn: Any, model_path: str, extension: str | None, seed: int, dtype: str,
                 logprobs_mode: str) -> None:
    torch.set_num_threads(1)
    try:
        engine = _Engine(_build_worker(model_path, extension, dtype), seed, logprobs_mode)
    except Exception as error:  # noqa: BLE001 (reported to the caller)
        conn.send_bytes(encode({"error": f"engine start-up failed: {type(error).__name__}: {error}"}))
        return
    conn.send_bytes(encode({"result": "ready"}))
    while True:
        try:
            kind, payload = decode(conn.recv_bytes())
        except (EOFError, OSError):
            return
        try:
            reply = {"result": engine.handle(kind, payload)}
            data = encode(reply)
        except Exception as error:  # noqa: BLE001 (reported to the caller)
            data = encode({"error": f"{type(error).__name__}: {error}"})
        conn.send_bytes(data)
        if kind == "shutdown":
            return
