"""The worker extension the trainer's vLLM engine is built with (``LLM(worker_extension_cls=WORKER_EXTENSION)``).

vLLM mixes this class into each of its workers, so its methods run next to the model, in the worker's process, and
the trainer calls them by name: ``llm.collective_rpc("receive_weights", args=(specs,))``. Every argument is plain
data (str, int, float, lists): V1's RPC serialises with msgpack and rejects a Python closure. The methods use what a
vLLM worker has: ``self.device``, ``self.rank`` and ``self.model_runner.model`` (whose ``load_weights`` takes
Hugging Face names and stacks them into vLLM's fused layers). The fake engine (:mod:`.fake_vllm`) gives its worker
the same three attributes.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr_gym_agents.policy.weight_transfer import WeightGroup, open_weight_group

WORKER_EXTENSION = "rlvr_gym_agents.policy.vllm_worker.WeightSyncExtension"


class WeightSyncExtension:
    """Receives the trainer's weights: by broadcast over a weight group, or from a CUDA IPC buffer."""

    device: torch.device
    rank: int
    model_runner: Any
    _weight_group: WeightGroup | None = None

    def init_weight_group(self, host: str, port: int, rank_offset: int, world_size: int) -> bool:
        """Joins the trainer's weight group as rank ``self.rank + rank_offset`` (the trainer is rank 0)."""
        self._weight_group = open_weight_group(host, port, self.rank + rank_offset, world_size, self.device)
        return True

    def receive_weights(self, specs: list[list[Any]]) -> int:
        """Receives one broadcast per ``[name, dtype name, shape]`` of ``specs``, in order, and loads each tensor
        into the model; returns the number loaded.

        Raises:
            RuntimeError: before :meth:`init_weight_group`.
        """
        if self._weight_group is None:
            raise RuntimeError("receive_weights before init_weight_group: the trainer must open the weight group first")
        for name, dtype_name, shape in specs:
            tensor = torch.empty(list(shape), dtype=getattr(torch, dtype_name), device=self.device)
            self._weight_group.broadcast(tensor)
            self.model_runner.model.load_weights(weights=[(name, tensor)])
        return len(specs)

    def receive_weights_ipc(self, address: str) -> int:
        """Colocated sync (one GPU): reads a CUDA IPC handle of one flat uint8 buffer and its layout
        ``[[name, dtype name, shape, byte offset], ...]`` from the trainer's zmq socket at ``address`` (the handle
        holds a rebuild function, so it travels on this side channel, never through the msgpack RPC), loads the
        views, and replies when done. Untested here (no GPU, no vLLM, no zmq on the dev machine)."""
        import zmq
        from torch.multiprocessing.reductions import rebuild_cuda_tensor  # noqa: F401 (the handle names it)

        context = zmq.Context.instance()
        channel = context.socket(zmq.REP)
        channel.connect(address)
        try:
            rebuild, handle_args, layout = channel.recv_pyobj()
            handle_args = list(handle_args)
            handle_args[6] = self.device.index  # the device as this process numbers it
            buffer = rebuild(*handle_args)
            weights = []
            for name, dtype_name, shape, offset in layout:
                dtype = getattr(torch, dtype_name)
                size = dtype.itemsize * int(torch.Size(shape).numel())
                weights.append((name, buffer[offset:offset + size].view(dtype).view(shape)))
            self.model_runner.model.load_weights(weights=weights)
            torch.cuda.synchronize()
            channel.send_pyobj(len(weights))
        finally:
            channel.close()
        return len(layout)

    def weights_fingerprint(self) -> float:
        """The sum of every parameter, in float64 (tests compare it with the trainer's)."""
        with torch.no_grad():
            return float(sum(p.detach().double().sum() for p in self.model_runner.model.parameters()))
