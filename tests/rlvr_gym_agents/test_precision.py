"""Mixed precision: fp32 master weights move at lr 1e-6 where bf16 parameters do not, and the update's loss curve in
CPU bf16 autocast follows the fp32 one."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from rlvr_gym_agents.config import ConfigError, load_config
from rlvr_gym_agents.policy import TransformersPolicy
from rlvr_gym_agents.rollout import Trajectory
from rlvr_gym_agents.train import update_config
from rlvr_gym_agents.update.ppo import PPOUpdater, ppo_update
from rlvr_gym_agents.update.precision import autocast, autocast_dtype, grad_scaler, parameter_dtype

RECIPES = Path(__file__).resolve().parents[2] / "agents" / "recipes"


def _fraction_changed_after_adamw(weight_dtype: torch.dtype, autocast_to: str | None, steps: int = 10) -> float:
    """Fraction of a 256x256 matrix's entries that 10 AdamW steps at lr 1e-6 change."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(256, 256, bias=False).to(weight_dtype)
    before = layer.weight.detach().clone()
    optimizer = torch.optim.AdamW(layer.parameters(), lr=1e-6, weight_decay=0.0)
    inputs = torch.randn(32, 256)
    for _ in range(steps):
        optimizer.zero_grad()
        with autocast("cpu", autocast_to):
            out = layer(inputs.to(weight_dtype) if autocast_to is None else inputs)
        (out.float() ** 2).mean().backward()
        optimizer.step()
    return float((layer.weight.detach() != before).float().mean())


def test_fp32_master_weights_move_at_lr_1e_6_where_bf16_parameters_round_away() -> None:
    bf16_params = _fraction_changed_after_adamw(torch.bfloat16, None)
    mixed = _fraction_changed_after_adamw(torch.float32, "bfloat16")  # the trainer's `precision: mixed`
    fp32 = _fraction_changed_after_adamw(torch.float32, None)
    assert bf16_params < 0.05  # measured: ~0.01 (pitfalls.md: 0.7%)
    assert mixed > 0.99 and fp32 > 0.99


def test_precision_options_pick_parameter_and_autocast_dtypes() -> None:
    assert (parameter_dtype("mixed", "bfloat16"), autocast_dtype("mixed", "bfloat16")) == ("float32", "bfloat16")
    assert (parameter_dtype("pure", "bfloat16"), autocast_dtype("pure", "bfloat16")) == ("bfloat16", None)
    assert autocast_dtype("mixed", "float32") is None
    config = load_config(None, ["model.dtype=bfloat16"])
    assert config.train.precision == "mixed" and update_config(config).autocast_dtype == "bfloat16"
    with pytest.raises(ConfigError, match="without loss scaling"):
        load_config(None, ["train.precision=pure", "model.dtype=float16"])
    with pytest.raises(ConfigError, match="train.precision must be mixed"):
        load_config(None, ["train.precision=half"])
    with pytest.raises(ConfigError, match="model.dtype must be one of"):
        load_config(None, ["model.dtype=fp8"])


def _trajectories(policy: TransformersPolicy) -> list[Trajectory]:
    generator = torch.Generator().manual_seed(5)
    trajectories = []
    for length in (9, 21, 14, 17):
        ids = torch.randint(4, len(policy.tokenizer), (length,), generator=generator).tolist()
        mask = [0] * 3 + [1] * (length - 3)
        trajectories.append(Trajectory("t", "testing/Echo-v0", token_ids=ids, loss_mask=mask,
                                       logps=[-2.0 if m else 0.0 for m in mask]))
    return trajectories


def test_bf16_autocast_loss_curve_matches_fp32(tiny_policy: TransformersPolicy) -> None:
    """Six single-step updates (AdamW 1e-3): the losses in CPU bf16 autocast stay within 1% (relative) of fp32's (measured: 3e-4)."""
    trajectories = _trajectories(tiny_policy)
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    curves = []
    for dtype in ("float32", "bfloat16"):
        config = update_config(load_config(None, ["algorithm.epochs=1", "algorithm.num_minibatches=1",
                                                  f"model.dtype={dtype}"]))
        model = copy.deepcopy(tiny_policy.model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        torch.manual_seed(0)
        curves.append([ppo_update(model, optimizer, trajectories, advantages, config, None,
                                  tiny_policy.pad_token_id)["loss"] for _ in range(6)])
        assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay fp32
    fp32, bf16 = curves
    assert fp32[-1] < fp32[0]  # it learns
    for a, b in zip(fp32, bf16):
        assert b == pytest.approx(a, rel=0.01, abs=1e-3)


def test_only_float16_gets_a_loss_scaler() -> None:
    assert grad_scaler("cpu", None) is None and grad_scaler("cpu", "bfloat16") is None
    scaler = grad_scaler("cpu", "float16")
    assert isinstance(scaler, torch.amp.GradScaler) and scaler.is_enabled() and scaler.get_scale() == 2.0**16


def _float16_update(policy: TransformersPolicy, advantage: float, scaler: torch.amp.GradScaler | None,
                    ) -> tuple[float, dict[str, float]]:
    """One float16-autocast update of a copy of ``policy`` with every advantage ``+-advantage``; returns the largest
    change of a weight matrix and the metrics."""
    config = update_config(load_config(None, ["algorithm.epochs=1", "algorithm.num_minibatches=1",
                                              "model.dtype=float16"]))
    model = copy.deepcopy(policy.model)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    torch.manual_seed(0)
    metrics = ppo_update(model, optimizer, _trajectories(policy), torch.tensor([1.0, -1.0, 0.5, -0.5]) * advantage,
                         config, None, policy.pad_token_id, scaler)
    moved = max(float((p.detach() - before[name]).abs().max()) for name, p in model.named_parameters())
    return moved, metrics


def test_float16_update_scales_the_loss_so_small_gradients_do_not_underflow(tiny_policy: TransformersPolicy) -> None:
    """Advantages of 1e-6: in float16 the loss's gradients (~1e-8 per logit) are below its smallest subnormal (6e-8),
    so without a scaler the backward pass gives exact zeros and AdamW moves nothing; scaled by 2^16 they survive and
    AdamW (which normalises the gradient) moves weights by about the learning rate."""
    unscaled, _ = _float16_update(tiny_policy, 1e-6, torch.amp.GradScaler("cpu", enabled=False))
    scaled, metrics = _float16_update(tiny_policy, 1e-6, grad_scaler("cpu", "float16"))
    fresh, fresh_metrics = _float16_update(tiny_policy, 1e-6, None)  # ppo_update builds one for the call
    assert fresh == scaled and fresh_metrics["loss_scale"] == 2.0**16
    assert unscaled == 0.0
    assert scaled > 5e-4
    assert metrics["loss_scale"] == 2.0**16 and metrics["skipped_steps"] == 0.0


def test_float16_gradients_are_unscaled_before_clipping_and_the_norm(tiny_policy: TransformersPolicy) -> None:
    """The scaled float16 update reports float32's gradient norm (not 2^16 times it) and, with plain SGD (blind to
    nothing, unlike AdamW), moves the weights as float32 does."""
    moves, norms = [], []
    for dtype, scaler in (("float32", None), ("float16", grad_scaler("cpu", "float16"))):
        config = update_config(load_config(None, ["algorithm.epochs=1", "algorithm.num_minibatches=1",
                                                  f"model.dtype={dtype}"]))
        model = copy.deepcopy(tiny_policy.model)
        before = [p.detach().clone() for p in model.parameters()]
        torch.manual_seed(0)
        metrics = ppo_update(model, torch.optim.SGD(model.parameters(), lr=1e-2), _trajectories(tiny_policy),
                             torch.tensor([1.0, -1.0, 0.5, -0.5]), config, None, tiny_policy.pad_token_id, scaler)
        moves.append(torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(model.parameters(), before)]))
        norms.append(metrics["grad_norm"])
    assert norms[1] == pytest.approx(norms[0], rel=0.02)
    assert float((moves[1] - moves[0]).norm() / moves[0].norm()) < 0.05


def test_float16_update_skips_a_step_whose_gradients_overflow(tiny_policy: TransformersPolicy) -> None:
    """A scale of 2^60 overflows float16 (max 65504) in the backward pass: the step is skipped (no weight moves),
    counted, and the scale halves."""
    scaler = grad_scaler("cpu", "float16")
    assert scaler is not None
    scaler.load_state_dict({**scaler.state_dict(), "scale": 2.0**60})
    moved, metrics = _float16_update(tiny_policy, 1.0, scaler)
    assert moved == 0.0
    assert metrics["skipped_steps"] == 1.0 and metrics["loss_scale"] == 2.0**59


def test_updater_keeps_its_loss_scale_for_the_checkpoint(tiny_policy: TransformersPolicy) -> None:
    config = update_config(load_config(None, ["model.dtype=float16"]))
    model = copy.deepcopy(tiny_policy.model)
    updater = PPOUpdater(model, torch.optim.AdamW(model.parameters()), config, None, tiny_policy.pad_token_id)
    state = updater.loss_scaler_state()
    assert state is not None and state["scale"] == 2.0**16
    resumed = PPOUpdater(model, torch.optim.AdamW(model.parameters()), config, None, tiny_policy.pad_token_id)
    resumed.load_loss_scaler_state({**state, "scale": 1024.0, "_growth_tracker": 7})
    assert resumed.scaler is not None and resumed.scaler.get_scale() == 1024.0
    assert resumed.loss_scaler_state() == {**state, "scale": 1024.0, "_growth_tracker": 7}
    bf16 = PPOUpdater(model, torch.optim.AdamW(model.parameters()), update_config(load_config(None, [])), None,
                      tiny_policy.pad_token_id)
    assert bf16.scaler is None and bf16.loss_scaler_state() is None


@pytest.mark.parametrize("recipe", sorted(p.name for p in RECIPES.glob("qwen2.5-0.5b-*.yaml")))
def test_gpu_recipes_load_with_fp32_master_weights(recipe: str) -> None:
    config = load_config(RECIPES / recipe)
    assert config.model.dtype == "bfloat16" and config.train.precision == "mixed"
    assert update_config(config).autocast_dtype == "bfloat16"
    assert config.rollout.engine != "vllm" or config.algorithm.loss.rollout_correction in ("tis", "mis")
