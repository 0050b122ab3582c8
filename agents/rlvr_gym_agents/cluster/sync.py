"""How the ranks of a learner group (:mod:`rlvr_gym_agents.cluster.learner`) combine their gradients: the
``cluster.learner_strategy`` (``ddp``: whole replicas, :class:`TorchDistributedSync`; ``fsdp2``: sharded,
:func:`shard_model` and :class:`FullyShardedSync`) and the torch.distributed backend.

Why not DDP's reducer: ``torch.nn.parallel.DistributedDataParallel`` all-reduces during each ``backward()``, but one
optimizer step of this update is several backward passes (the micro-batches, then the shared-prompt pass of
:class:`~rlvr_gym_agents.update.scoring.SharedPromptScorer`, which needs every micro-batch's gradient first). DDP's
answer to accumulation, ``no_sync()`` plus a last synced backward, has no last backward to sync here, so the ranks
sum their gradients with one ``torch.distributed.all_reduce`` of the flattened gradients per optimizer step
(:class:`TorchDistributedSync`) -- the same collective DDP issues, once instead of per bucket. Parameters start
equal because every rank loads the same state (DDP's initial broadcast).

FSDP2 (``cluster.learner_strategy=fsdp2``, :func:`shard_model`): each rank wraps its model with
``torch.distributed.fsdp.fully_shard`` (every module class the model lists in ``_no_split_modules``, its decoder
layers, then the whole model), so parameters, gradients and the optimizer's state are sharded over the ranks
between optimizer steps; the optimizer is built over the sharded parameters. For a model whose weights plus AdamW
state (and gradients) do not fit one device but whose weights do: what it saves is the optimizer state, the gradients
and the parameters at rest (each rank holds 1/M of them), not memory during the step. FSDP2 all-gathers a module's
parameters in each forward, a collective every rank must join, but the ranks run different numbers of forward passes
(their rows, micro-batches and shared-prefix passes differ). So :class:`FullyShardedSync` all-gathers every module
once per optimizer step (``unshard()``, before the mini-batch) and turns FSDP's gradient sync off for the rank's
backward passes (``set_requires_gradient_sync(False)``: gradients accumulate unsharded, no collective); then every
rank runs one synced forward and backward of a one-token input times zero, which makes FSDP reduce-scatter the
accumulated gradients (summed: divide factor 1, ``set_force_sum_reduction_for_comms`` because gloo has no PREMUL_SUM)
and reshard: FSDP's own reduce-scatter instead of our all_reduce, the same sum. Between the all-gather and the
reduce-scatter a rank holds the whole parameters and gradients. Weights leave the ranks
(:class:`~rlvr_gym_agents.cluster.learner.LearnerRank`) as a full state dict
gathered on rank 0 (``torch.distributed.checkpoint.state_dict.get_model_state_dict``, ``full_state_dict=True,
cpu_offload=True``; every rank joins), the optimizer state the same way (``get_optimizer_state_dict``), converted to
the trainer's layout, so the trainer's checkpoint is the one-process format; a resumed run hands it whole to every
rank, which keeps its shard (``set_model_state_dict``, ``set_optimizer_state_dict``). An optimizer state with
nothing stepped yet is loaded with ``Optimizer.load_state_dict`` instead: ``set_optimizer_state_dict`` first makes a
state with a zero-gradient step (lr 0), which leaves AdamW at step 1 with zero moments, so the first real step would
be Adam's second, 0.74 x as long. The KL reference model is a whole replica on each rank (not sharded).
"""

from __future__ import annotations

import torch

STRATEGIES = ("ddp", "fsdp2")
"""How the ranks hold the model (``cluster.learner_strategy``): whole replicas, or FSDP2 shards."""


def resolve_backend(backend: str, device: str) -> str:
    """``gloo`` or ``nccl``: ``backend`` itself, or for ``auto`` nccl on a CUDA ``device`` and gloo otherwise.

    Raises:
        ValueError: ``backend`` is not auto, gloo or nccl, or nccl was asked for a CPU device.
    """
    if backend not in ("auto", "gloo", "nccl"):
        raise ValueError(f"cluster.backend must be auto, gloo or nccl, got {backend!r}")
    on_cuda = torch.device(device).type == "cuda"
    if backend == "nccl" and not on_cuda:
        raise ValueError(f"cluster.backend=nccl needs model.device=cuda, got {device!r}; use gloo (or auto) on CPU")
    return ("nccl" if on_cuda else "gloo") if backend == "auto" else backend


class TorchDistributedSync:
    """:class:`~rlvr_gym_agents.update.ppo.GradientSync` over the default torch.distributed process group.

    Args:
        device: where the collectives' tensors live (CPU for gloo; the rank's CUDA device for nccl).
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """``values`` summed over ranks (``all_reduce``), on the CPU."""
        import torch.distributed as dist

        total = values.to(self.device).clone()
        dist.all_reduce(total)
        return total.cpu()

    def concat(self, values: torch.Tensor) -> torch.Tensor:
        """Every rank's 1-D ``values`` in rank order (``all_gather`` of the lengths, then of the padded values)."""
        import torch.distributed as dist

        world = dist.get_world_size()
        length = torch.tensor([values.numel()], device=self.device)
        lengths = [torch.zeros_like(length) for _ in range(world)]
        dist.all_gather(lengths, length)
        longest = int(max(int(n) for n in lengths))
        padded = torch.zeros(longest, dtype=values.dtype, device=self.device)
        padded[: values.numel()] = values.to(self.device)
        gathered = [torch.zeros_like(padded) for _ in range(world)]
        dist.all_gather(gathered, padded)
        return torch.cat([g[: int(n)] for g, n in zip(gathered, lengths)]).cpu()

    def gather_parameters(self) -> None:
        """Nothing to gather: each rank holds a whole replica."""

    def sum_gradients(self, parameters: list[torch.nn.Parameter]) -> None:
        """Sums the trainable parameters' gradients over ranks with one ``all_reduce`` of them flattened (a rank
        that had no rows in the mini-batch contributes zeros)."""
        import torch.distributed as dist

        trainable = [p for p in parameters if p.requires_grad]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in trainable]
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for parameter in trainable:
            size = parameter.numel()
            parameter.grad = flat[offset: offset + size].view_as(parameter).clone()
            offset += size


class FullyShardedSync(TorchDistributedSync):
    """:class:`~rlvr_gym_agents.update.ppo.GradientSync` of FSDP2 ranks (:func:`shard_model`); see the module
    docstring for why it gathers once per optimizer step and how the gradients are reduce-scattered.

    Args:
        device: where the statistics' collectives run (CPU for gloo).
        model: this rank's model after :func:`shard_model` (a Hugging Face causal LM: called with ``input_ids``,
            returns ``.logits``).
    """

    def __init__(self, device: torch.device, model: torch.nn.Module) -> None:
        from torch.distributed.fsdp import FSDPModule

        super().__init__(device)
        self.model = model
        self.modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
        if not self.modules:
            raise ValueError("FullyShardedSync needs a model wrapped by shard_model() (no FSDP module found)")

    def gather_parameters(self) -> None:
        """All-gathers every FSDP module's parameters (a no-op for those already gathered) and keeps them gathered,
        with gradients accumulated unsharded and not synced, until :meth:`sum_gradients`."""
        for module in self.modules:
            module.unshard()
            module.set_requires_gradient_sync(False)
            module.set_reshard_after_backward(False)

    def sum_gradients(self, parameters: list[torch.nn.Parameter]) -> None:
        """Reduce-scatters the accumulated gradients (summed over ranks; each rank keeps its shard) and reshards the
        parameters, by one synced forward and backward of a one-token input whose loss is multiplied by zero (it adds
        zeros; every rank runs exactly one, so FSDP's collectives match). ``parameters`` is not read: FSDP knows them."""
        for module in self.modules:
            module.set_requires_gradient_sync(True)
            module.set_reshard_after_backward(True)
        device = next(iter(self.model.parameters())).device
        logits = self.model(input_ids=torch.zeros((1, 1), dtype=torch.long, device=device)).logits
        (logits.float().sum() * 0.0).backward()


def shard_model(model: torch.nn.Module, device: str) -> torch.nn.Module:
    """Wraps ``model`` in place with FSDP2 over the default process group (``init_process_group`` first): each module
    whose class is in ``model._no_split_modules`` (a Hugging Face model's decoder layers), then the model; gradients are
    summed over ranks, not averaged (the losses are summands of the global loss: :func:`~rlvr_gym_agents.update.ppo.update_shard`). Returns it.

    Raises:
        ValueError: the model does not say which modules hold its layers (no ``_no_split_modules``).
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    layer_classes = set(getattr(model, "_no_split_modules", None) or ())
    if not layer_classes:
        raise ValueError(f"cluster.learner_strategy=fsdp2 shards the modules a model lists in _no_split_modules; "
                         f"{type(model).__name__} lists none (use cluster.learner_strategy=ddp)")
    mesh = init_device_mesh(torch.device(device).type, (dist.get_world_size(),))
    for module in list(model.modules()):
        if type(module).__name__ in layer_classes:
            fully_shard(module, mesh=mesh, reshard_after_forward=False)
    fully_shard(model, mesh=mesh, reshard_after_forward=False)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM
            module.set_reduce_scatter_unused_params(True)  # a parameter no row used still joins the collective
    return model
