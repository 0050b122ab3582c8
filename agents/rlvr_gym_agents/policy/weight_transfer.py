"""The data plane of weight sync: a two-sided broadcast group between the trainer (rank 0) and the engine's workers.

vLLM's V1 engine runs its workers in other processes and its RPC carries msgpack-serialisable arguments only, so the
weights do not travel through the RPC: the trainer and every worker join a process group of their own, outside
``torch.distributed``'s default group, and the trainer broadcasts each tensor while the workers receive it (the
control message, the list of names, dtypes and shapes, goes through ``collective_rpc``). On CUDA the group is vLLM's
``StatelessProcessGroup`` with its ``PyNcclCommunicator`` (as vLLM's ``examples/offline_inference/rlhf*.py`` set it
up); on the CPU (the fake engine of the tests, :mod:`.fake_vllm`) a gloo group over a ``TCPStore``.

NCCL cannot join two ranks on one GPU: a trainer colocated with vLLM on the same device syncs through CUDA IPC
handles instead (``rollout.weight_sync: ipc``, :meth:`rlvr_gym_agents.policy.vllm.VLLMPolicy.sync_weights`).
"""

from __future__ import annotations

import datetime
import socket
from typing import Any, Protocol

import torch


class WeightGroup(Protocol):
    """A process group whose rank 0 (the trainer) broadcasts tensors to the other ranks."""

    def broadcast(self, tensor: torch.Tensor) -> None:
        """Sends ``tensor`` (rank 0) or fills it in place (other ranks)."""
        ...


def open_weight_group(host: str, port: int, rank: int, world_size: int, device: torch.device,
                      timeout_s: float = 600.0) -> WeightGroup:
    """Joins the weight group at ``host:port`` as ``rank`` of ``world_size``; every rank must call it at once
    (rank 0 serves the store). NCCL on CUDA devices (needs vLLM), gloo on the CPU."""
    if device.type == "cuda":
        return _NcclGroup(host, port, rank, world_size, device)
    return _GlooGroup(host, port, rank, world_size, timeout_s)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on now (for the group's store)."""
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


class _GlooGroup:
    def __init__(self, host: str, port: int, rank: int, world_size: int, timeout_s: float) -> None:
        import torch.distributed as dist

        timeout = datetime.timedelta(seconds=timeout_s)
        store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout)
        self._group: Any = dist.ProcessGroupGloo(dist.PrefixStore("rlvr_gym_weights", store), rank, world_size, timeout)
        self._store = store  # the group needs its store alive
        self._options = dist.BroadcastOptions()
        self._options.rootRank = 0

    def broadcast(self, tensor: torch.Tensor) -> None:
        self._group.broadcast([tensor], self._options).wait()


class _NcclGroup:
    """vLLM's stateless group and NCCL communicator (untested here: no GPU and no vLLM on the dev machine)."""

    def __init__(self, host: str, port: int, rank: int, world_size: int, device: torch.device) -> None:
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        group = StatelessProcessGroup.create(host=host, port=port, rank=rank, world_size=world_size)
        self._comm: Any = PyNcclCommunicator(group, device=device)

    def broadcast(self, tensor: torch.Tensor) -> None:
        self._comm.broadcast(tensor, src=0, stream=torch.cuda.current_stream())
