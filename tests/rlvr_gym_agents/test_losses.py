"""Policy losses: hand-computed values, gradients, masking and micro-batch invariance (algorithms.md §9)."""

from __future__ import annotations

import math

import pytest
import torch
from rlvr_gym_agents.experimental import entropy_band_penalty
from rlvr_gym_agents.update.losses import (
    LOSSES,
    LossConfig,
    aggregate_loss,
    batch_stats,
    entropy_aware_advantages,
    high_entropy_mask,
    kl_penalty,
    masked_mean,
    policy_loss,
)


def _one_token(ratio: float, adv: float, name: str = "ppo_clip", **kw: float) -> tuple[float, float]:
    """Loss and d loss / d logp for a single token with the given ratio and advantage."""
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, _ = policy_loss(logp, torch.zeros(1, 1), torch.tensor([[adv]]), torch.ones(1, 1), LossConfig(name, **kw))
    loss.backward()
    assert logp.grad is not None
    return float(loss.detach()), float(logp.grad)


@pytest.mark.parametrize(
    ("ratio", "adv", "loss", "grad"),
    [
        (1.1, 1.0, -1.1, -1.1),  # inside the trust region: -A r, gradient -A r
        (1.3, 1.0, -1.2, 0.0),  # A > 0 above 1 + eps_high: clipped, no gradient
        (0.7, 1.0, -0.7, -0.7),  # A > 0 below 1 - eps_low: the min keeps the unclipped term
        (0.7, -1.0, 0.8, 0.0),  # A < 0 below 1 - eps_low: clipped, no gradient
        (1.5, -1.0, 1.5, 1.5),  # A < 0 above: unclipped (pessimistic) term, gradient -A r
    ],
)
def test_ppo_clip_regions(ratio: float, adv: float, loss: float, grad: float) -> None:
    got_loss, got_grad = _one_token(ratio, adv)
    assert got_loss == pytest.approx(loss, abs=1e-6)
    assert got_grad == pytest.approx(grad, abs=1e-6)


def test_clip_higher_uses_asymmetric_bounds() -> None:
    assert _one_token(1.25, 1.0, clip_high=0.28) == pytest.approx((-1.25, -1.25))
    assert _one_token(1.3, 1.0, clip_high=0.28)[0] == pytest.approx(-1.28)
    assert _one_token(0.75, -1.0, clip_low=0.2, clip_high=0.28) == pytest.approx((0.8, 0.0))


def test_dual_clip_bounds_negative_advantage_loss() -> None:
    assert _one_token(5.0, -1.0) == pytest.approx((5.0, 5.0))
    assert _one_token(5.0, -1.0, dual_clip=3.0) == pytest.approx((3.0, 0.0))
    assert _one_token(2.0, -1.0, dual_clip=3.0) == pytest.approx((2.0, 2.0))
    assert _one_token(5.0, 1.0, dual_clip=3.0) == pytest.approx((-1.2, 0.0))  # A > 0 untouched


def test_aepo_forward_equals_ppo_and_keeps_upper_gradient() -> None:
    # algorithms.md §9.10: same value; for A > 0, r > 1 + eps_high the gradient is -A (1 + eps_high)
    assert _one_token(1.3, 2.0, "aepo")[0] == pytest.approx(_one_token(1.3, 2.0)[0])
    assert _one_token(1.3, 2.0, "aepo")[1] == pytest.approx(-2.0 * 1.2)
    for ratio, adv in [(1.1, 1.0), (0.7, -1.0), (0.7, 1.0), (1.5, -1.0)]:
        assert _one_token(ratio, adv, "aepo") == pytest.approx(_one_token(ratio, adv))


@pytest.mark.parametrize("name", ["ppo_clip", "aepo", "gspo"])
def test_on_policy_gradient_is_minus_advantage(name: str) -> None:
    # §9.9: with r = 1 the per-token gradient is -A grad log pi; token_mean divides by the 5 valid tokens
    logp = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.7, -9.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, LossConfig(name))
    loss.backward()
    expected = -adv * mask / 5.0
    torch.testing.assert_close(logp.grad, expected)


def _random_batch(seed: int = 0, batch: int = 6, length: int = 5) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    mask = (torch.rand(batch, length, generator=gen) > 0.3).long()
    mask[:, 0] = 1
    return {
        "logp": -torch.rand(batch, length, generator=gen) * 2,
        "old_logp": -torch.rand(batch, length, generator=gen) * 2,
        "advantages": torch.randn(batch, length, generator=gen),
        "mask": mask,
        "ref_logp": -torch.rand(batch, length, generator=gen) * 2,
        "entropy": torch.rand(batch, length, generator=gen) * 3,
    }


CONFIGS = [
    LossConfig(),
    LossConfig("aepo", entropy_advantage_weight=0.2, dual_clip=3.0),
    LossConfig("gspo", aggregation="seq_mean_token_mean"),
    LossConfig(aggregation="seq_mean_token_sum", kl_coef=0.1, kl_estimator="k3", entropy_coef=0.01),
    LossConfig(aggregation="seq_mean_token_sum_norm", loss_scale_factor=8.0, top_entropy_quantile=0.3),
]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.name}-{c.aggregation}")
def test_micro_batch_split_does_not_change_loss_or_gradient(config: LossConfig) -> None:
    data = _random_batch()
    stats = batch_stats(data["mask"], data["entropy"], config.top_entropy_quantile)

    def run(rows: slice) -> tuple[torch.Tensor, torch.Tensor]:
        logp = data["logp"][rows].clone().requires_grad_(True)
        kw = {k: v[rows] for k, v in data.items() if k != "logp"}
        loss, _ = policy_loss(logp, config=config, stats=stats, **kw)
        loss.backward()
        return loss.detach(), logp.grad

    full_loss, full_grad = run(slice(0, 6))
    parts = [run(slice(0, 1)), run(slice(1, 4)), run(slice(4, 6))]
    torch.testing.assert_close(sum(p[0] for p in parts), full_loss)
    torch.testing.assert_close(torch.cat([p[1] for p in parts]), full_grad)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: f"{c.name}-{c.aggregation}")
def test_masked_tokens_get_zero_loss_and_gradient(config: LossConfig) -> None:
    data = _random_batch(seed=1)
    logp = data.pop("logp").clone().requires_grad_(True)
    loss, _ = policy_loss(logp, config=config, **data)
    loss.backward()
    masked = ~data["mask"].bool()
    assert torch.all(logp.grad[masked] == 0)
    # perturb everything at masked positions (including -inf log-probs): the loss is unchanged
    noisy = {k: v.clone() for k, v in data.items()}
    for key in ("old_logp", "ref_logp", "entropy", "advantages"):
        noisy[key][masked] = 1e6
    logp2 = logp.detach().clone()
    logp2[masked] = -math.inf
    loss2, _ = policy_loss(logp2, config=config, **noisy)
    torch.testing.assert_close(loss2, loss.detach())


def test_aggregation_modes_hand_computed() -> None:
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 7.0, 7.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert float(aggregate_loss(loss, mask, "token_mean")) == pytest.approx(10 / 4)
    assert float(aggregate_loss(loss, mask, "seq_mean_token_sum")) == pytest.approx((6 + 4) / 2)
    assert float(aggregate_loss(loss, mask, "seq_mean_token_mean")) == pytest.approx((2 + 4) / 2)
    assert float(aggregate_loss(loss, mask, "seq_mean_token_sum_norm")) == pytest.approx(10 / 3)
    assert float(aggregate_loss(loss, mask, "seq_mean_token_sum_norm", loss_scale_factor=100)) == pytest.approx(0.1)
    assert float(aggregate_loss(loss, mask, "token_mean", global_token_count=20)) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="token_mean"):
        aggregate_loss(loss, mask, "mean")


def test_kl_estimators_hand_computed() -> None:
    logp = torch.tensor([math.log(0.5)], requires_grad=True)
    ref = torch.tensor([math.log(0.25)])
    log2 = math.log(2)
    with torch.no_grad():
        assert float(kl_penalty(logp, ref, "k1")) == pytest.approx(log2)
        assert float(kl_penalty(logp, ref, "abs")) == pytest.approx(log2)
        assert float(kl_penalty(logp, ref, "k2")) == pytest.approx(0.5 * log2**2)
        assert float(kl_penalty(logp, ref, "k3")) == pytest.approx(0.5 + log2 - 1)  # exp(-log2) + log2 - 1
    for est in ("k1", "abs", "k2", "k3", "k1+", "k3+"):
        assert float(kl_penalty(ref, ref, est)) == 0.0
    plus = kl_penalty(logp, ref, "k3+")
    assert float(plus.detach()) == pytest.approx(0.5 + log2 - 1)
    plus.backward()
    assert float(logp.grad) == pytest.approx(log2)  # gradient of k2 = (log pi - log pi_ref)
    diffs = torch.linspace(-5, 5, 41)
    assert torch.all(kl_penalty(diffs, torch.zeros(41), "k3") >= 0)
    with pytest.raises(ValueError):
        kl_penalty(logp, ref, "k9")


def test_kl_term_adds_to_loss() -> None:
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    cfg = LossConfig(kl_coef=0.5, kl_estimator="k1")
    loss, metrics = policy_loss(logp, logp, torch.zeros(1, 1), torch.ones(1, 1), cfg, ref_logp=ref)
    assert float(loss) == pytest.approx(0.5 * math.log(2))
    assert metrics["kl"] == pytest.approx(math.log(2))
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(logp, logp, torch.zeros(1, 1), torch.ones(1, 1), cfg)


def test_entropy_bonus_lowers_loss() -> None:
    logp = torch.zeros(1, 2)
    ent = torch.tensor([[1.0, 3.0]])
    loss, metrics = policy_loss(
        logp, logp, torch.zeros(1, 2), torch.ones(1, 2), LossConfig(entropy_coef=0.1), entropy=ent
    )
    assert float(loss) == pytest.approx(-0.2)
    assert metrics["entropy"] == pytest.approx(2.0)
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(logp, logp, torch.zeros(1, 2), torch.ones(1, 2), LossConfig(entropy_coef=0.1))


def test_gspo_sequence_ratio_and_padding_invariance() -> None:
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, -0.5, -0.5]])
    old = torch.tensor([[-1.2, -1.9, 5.0], [-0.5, -0.8, -0.2]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.ones(2, 3)
    _, parts = LOSSES["gspo"](logp, old, adv, mask, LossConfig("gspo"))
    s0 = math.exp((0.2 - 0.1) / 2)
    s1 = math.exp((0.0 + 0.3 - 0.3) / 3)
    torch.testing.assert_close(parts["ratio"][0, :2], torch.tensor([s0, s0]))
    torch.testing.assert_close(parts["ratio"][1], torch.tensor([s1, s1, s1]))
    cfg = LossConfig("gspo", aggregation="seq_mean_token_mean")
    base, _ = policy_loss(logp, old, adv, mask, cfg)
    pad = torch.zeros(2, 4)
    padded, _ = policy_loss(
        torch.cat([logp, pad - 3], 1),
        torch.cat([old, pad + 7], 1),
        torch.cat([adv, pad + 1], 1),
        torch.cat([mask, pad], 1),
        cfg,
    )
    torch.testing.assert_close(padded, base)


def test_entropy_aware_advantage_hand_computed() -> None:
    ent = torch.tensor([[1.0, 2.0, 3.0, 50.0]])  # the masked 50.0 must not enter the statistics
    mask = torch.tensor([[1, 1, 1, 0]])
    adv = torch.tensor([[1.0, 1.0, -1.0, 0.0]])
    out = entropy_aware_advantages(adv, ent, mask, weight=0.2)  # z = [-1, 0, 1]
    torch.testing.assert_close(out, torch.tensor([[0.8, 1.0, -1.2, 0.0]]))
    same = entropy_aware_advantages(adv, torch.full((1, 4), 0.7), mask)
    torch.testing.assert_close(same, adv)


def test_high_entropy_mask_keeps_top_fraction() -> None:
    ent = torch.tensor([[0.1, 0.5, 0.9, 0.3, 0.7, 99.0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    keep = high_entropy_mask(ent, mask, 0.4)  # ceil(0.4 * 5) = 2 tokens: 0.9 and 0.7; padding never kept
    assert keep.tolist() == [[False, False, True, False, True, False]]
    assert not high_entropy_mask(ent, torch.zeros_like(mask), 0.2).any()


def test_top_entropy_quantile_masks_policy_gradient() -> None:
    logp = torch.zeros(1, 4, requires_grad=True)
    ent = torch.tensor([[0.1, 2.0, 0.2, 3.0]])
    cfg = LossConfig(top_entropy_quantile=0.5)
    loss, _ = policy_loss(logp, logp.detach(), torch.ones(1, 4), torch.ones(1, 4), cfg, entropy=ent)
    loss.backward()
    # only the two high-entropy tokens get gradient; the denominator stays 4 tokens
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, -0.25, 0.0, -0.25]]))


def test_clip_cov_detaches_at_most_k_candidates() -> None:
    torch.manual_seed(0)
    # covariance (A - mean A)(logp - mean logp): tokens 0 and 1 lie in (1, 5), the others outside
    logp = torch.tensor([[2.0, 2.0, -2.0, -2.0, 0.0, 0.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0, -2.0, -2.0]])
    mask = torch.ones(1, 6)
    cfg = LossConfig("clip_cov", clip_cov_ratio=0.2)  # k = max(1, floor(0.2 * 6)) = 1
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, cfg)
    loss.backward()
    zeroed = (logp.grad == 0).squeeze(0).tolist()
    assert sum(zeroed) == 1 and (zeroed[0] or zeroed[1])


def test_kl_cov_penalises_exactly_top_k() -> None:
    logp = torch.tensor([[2.0, 1.0, -2.0, -1.0, 0.0]])
    old = logp - 0.1
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, 0.0]])
    cfg = LossConfig("kl_cov", kl_cov_ratio=0.4, kl_cov_coef=2.0)  # k = floor(0.4 * 5) = 2: tokens 0 and 2
    loss, parts = LOSSES["kl_cov"](logp, old, adv, torch.ones(1, 5), cfg)
    assert parts["kl_cov_penalised"].tolist() == [[True, False, True, False, False]]
    r = math.exp(0.1)
    expected = [-r + 0.2, -r, r + 0.2, r, 0.0]
    torch.testing.assert_close(loss, torch.tensor([expected]))


def test_masked_mean_and_config_validation() -> None:
    assert float(masked_mean(torch.tensor([1.0, 3.0, 100.0]), torch.tensor([1, 1, 0]))) == 2.0
    with pytest.raises(ValueError, match="ppo_clip"):
        LossConfig("ppo")
    with pytest.raises(ValueError, match="dual_clip"):
        LossConfig(dual_clip=0.5)
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        policy_loss(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3), LossConfig())


def test_entropy_aware_advantage_keeps_sign_for_moderate_z() -> None:
    gen = torch.Generator().manual_seed(5)
    ent = torch.rand(4, 6, generator=gen) * 2
    adv = torch.randn(4, 6, generator=gen)
    mask = torch.ones(4, 6)
    out = entropy_aware_advantages(adv, ent, mask, weight=0.2)  # |z| < 5 for 24 tokens -> factor > 0
    assert torch.all(torch.sign(out) == torch.sign(adv))


def test_entropy_band_penalty_zero_inside_and_pushes_toward_band() -> None:
    ent = torch.tensor([[0.5, 0.9, 1.1, 1.5, 7.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 1, 1, 0]])
    penalty = entropy_band_penalty(ent, mask, torch.tensor([1.0]), band=(0.8, 1.2))
    # below: (0.5 - 0.8)^2 = 0.09; inside: 0; above: (1.5 - 1.2)^2 = 0.09; masked: 0
    torch.testing.assert_close(penalty.detach(), torch.tensor([[0.09, 0.0, 0.0, 0.09, 0.0]]))
    penalty.sum().backward()
    assert ent.grad is not None
    assert ent.grad[0, 0] < 0 and ent.grad[0, 3] > 0  # descent raises low entropy and lowers high entropy
    assert ent.grad[0, 1] == 0 and ent.grad[0, 2] == 0 and ent.grad[0, 4] == 0
    with pytest.raises(ValueError, match="band"):
        entropy_band_penalty(ent, mask, torch.tensor([1.0]), band=(1.2, 0.8))
