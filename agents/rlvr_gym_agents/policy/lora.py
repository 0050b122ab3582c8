"""LoRA adapters on the trained policy (PEFT), and the merged weights a rollout engine is synced with.

LoRA (Hu et al. 2021) trains a low-rank update W + (alpha / r) B A of each target linear layer and freezes W. The
adapters are injected into the transformers model in place (``peft.inject_adapter_in_model``), so the policy, the
update and the checkpoints keep handling a plain causal LM whose only trainable parameters are the ``lora_A`` /
``lora_B`` matrices. A rollout engine (vLLM) loads full weights: :func:`merged_named_parameters` yields every weight
under its Hugging Face name with the adapters merged in, W + (alpha / r) B A, without changing the model.

A LoRA run's checkpoint and ``sft_model`` directories hold the adapter-injected parameter names
(``q_proj.base_layer.weight``, ``q_proj.lora_A.default.weight``): resuming loads them as they are, and
``rlvr-gym eval`` merges them into a plain model with :func:`merge_lora_state_dict` (alpha from the run's config).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch

ADAPTER = "default"


@dataclasses.dataclass
class LoRAConfig:
    """LoRA adapters (``model.lora``); ``rank: 0`` trains every weight instead."""

    rank: int = 0
    """r, the rank of each update; 0 = no LoRA (full fine-tuning)."""
    alpha: int = 16
    """The update is scaled by alpha / r."""
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    """Names of the linear layers that get adapters (Qwen2's attention and MLP projections)."""
    dropout: float = 0.0
    """Dropout on the adapters' input."""


def apply_lora(model: torch.nn.Module, config: LoRAConfig) -> torch.nn.Module:
    """Injects LoRA adapters into ``model`` in place and freezes every other parameter; returns ``model``.

    Raises:
        ValueError: ``config.rank < 1``, or no module of ``model`` matches ``target_modules``.
    """
    from peft import LoraConfig, inject_adapter_in_model

    if config.rank < 1:
        raise ValueError(f"LoRA needs rank >= 1, got {config.rank}")
    peft_config = LoraConfig(r=config.rank, lora_alpha=config.alpha, target_modules=list(config.target_modules),
                             lora_dropout=config.dropout, bias="none")
    model = inject_adapter_in_model(peft_config, model, adapter_name=ADAPTER)
    for name, param in model.named_parameters():
        param.requires_grad_("lora_" in name)
    if not any("lora_" in name for name, _ in model.named_parameters()):
        raise ValueError(f"no module of the model matches model.lora.target_modules={list(config.target_modules)}")
    return model


def has_lora(model: torch.nn.Module) -> bool:
    """Whether ``model`` carries LoRA adapters."""
    return any("lora_" in name for name, _ in model.named_parameters())


def merged_named_parameters(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """Every weight under its plain Hugging Face name, LoRA updates merged in (detached); the model is unchanged.
    For a model without adapters, its ``named_parameters()`` detached."""
    from peft.tuners.lora import LoraLayer

    deltas: dict[str, tuple[str, torch.Tensor]] = {}
    for name, module in model.named_modules():
        if isinstance(module, LoraLayer) and ADAPTER in getattr(module, "lora_A", {}):
            with torch.no_grad():
                deltas[f"{name}.base_layer.weight"] = (f"{name}.weight", module.get_delta_weight(ADAPTER))  # type: ignore[attr-defined]
    for name, param in model.named_parameters():
        if "lora_" in name:
            continue
        if name in deltas:
            plain, delta = deltas[name]
            yield plain, (param.detach() + delta.to(param.dtype))
        else:
            yield name.replace(".base_layer.", "."), param.detach()


def merge_lora_state_dict(state: dict[str, torch.Tensor], alpha: float) -> dict[str, torch.Tensor]:
    """A saved adapter-injected state dict as a plain one: ``X.base_layer.weight`` + (alpha / r) ``X.lora_B`` @
    ``X.lora_A`` becomes ``X.weight`` (r = the rank of ``lora_A``), other ``base_layer`` names lose that part, adapter
    tensors are dropped. A state dict without adapters comes back unchanged."""
    merged: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        if "lora_" in name:
            continue
        if name.endswith(".base_layer.weight"):
            prefix = name.removesuffix(".base_layer.weight")
            lora_a = state.get(f"{prefix}.lora_A.{ADAPTER}.weight")
            lora_b = state.get(f"{prefix}.lora_B.{ADAPTER}.weight")
            if lora_a is not None and lora_b is not None:
                delta = (lora_b.double() @ lora_a.double()) * (alpha / lora_a.shape[0])
                tensor = (tensor.double() + delta).to(tensor.dtype)
        merged[name.replace(".base_layer.", ".")] = tensor
    return merged
