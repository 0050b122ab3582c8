"""Training-inference mismatch correction (TIS / MIS): hand-computed weights, and a no-op for the transformers engine."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from rlvr_gym_agents.config import ConfigError, load_config
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout.flat import run_episodes
from rlvr_gym_agents.train import update_config
from rlvr_gym_agents.update.correction import rollout_correction
from rlvr_gym_agents.update.losses import LossConfig, policy_loss
from rlvr_gym_agents.update.ppo import ppo_update

from rlvr_gym.testing.toy import echo_tasks

# ratios pi_train / pi_rollout of row 0: 0.5, 1, 3 (and a masked position); row 1: 1.5, 0.25
RATIOS = torch.tensor([[0.5, 1.0, 3.0, 7.0], [1.5, 0.25, 1.0, 1.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
ROLLOUT = torch.full((2, 4), -1.0)
TRAIN = ROLLOUT + RATIOS.log()


def test_tis_truncates_the_ratio_at_the_cap() -> None:
    weights, metrics = rollout_correction(TRAIN, ROLLOUT, MASK, "tis", cap=2.0)
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.0, 2.0, 1.0], [1.5, 0.25, 1.0, 1.0]]))
    assert metrics["rollout_is_clipped_frac"] == pytest.approx(1 / 5)  # 3.0 of 5 valid tokens
    assert metrics["rollout_is_weight_mean"] == pytest.approx((0.5 + 1 + 2 + 1.5 + 0.25) / 5)
    k3 = [r - math.log(r) - 1 for r in (0.5, 1.0, 3.0, 1.5, 0.25)]
    assert metrics["mismatch_kl"] == pytest.approx(sum(k3) / 5, rel=1e-5)
    assert metrics["mismatch_k1"] == pytest.approx(-sum(math.log(r) for r in (0.5, 1.0, 3.0, 1.5, 0.25)) / 5)


def test_mis_drops_tokens_outside_the_band() -> None:
    weights, metrics = rollout_correction(TRAIN, ROLLOUT, MASK, "mis", cap=2.0)  # band [0.5, 2]
    torch.testing.assert_close(weights, torch.tensor([[0.5, 1.0, 0.0, 1.0], [1.5, 0.0, 1.0, 1.0]]))
    assert metrics["rollout_is_masked_frac"] == pytest.approx(2 / 5)
    weights, _ = rollout_correction(TRAIN, ROLLOUT, MASK, "mis", cap=2.0, lower=0.2)
    assert weights[1, 1] == pytest.approx(0.25)


def test_sequence_level_uses_the_product_of_the_ratios() -> None:
    # row 0: 0.5 * 1 * 3 = 1.5 (the masked 7.0 does not count); row 1: 1.5 * 0.25 = 0.375
    weights, _ = rollout_correction(TRAIN, ROLLOUT, MASK, "tis", cap=2.0, level="sequence")
    torch.testing.assert_close(weights, torch.tensor([[1.5, 1.5, 1.5, 1.0], [0.375, 0.375, 1.0, 1.0]]))
    weights, metrics = rollout_correction(TRAIN, ROLLOUT, MASK, "mis", cap=2.0, level="sequence")
    torch.testing.assert_close(weights, torch.tensor([[1.5, 1.5, 1.5, 1.0], [0.0, 0.0, 1.0, 1.0]]))
    assert metrics["rollout_is_masked_frac"] == pytest.approx(2 / 5)
    none, _ = rollout_correction(TRAIN, ROLLOUT, MASK, "none")
    assert torch.equal(none, torch.ones(2, 4))


def test_weights_scale_the_policy_gradient_loss_per_token() -> None:
    logp = torch.zeros(2, 4, requires_grad=True)
    adv = torch.ones(2, 4)
    weights = torch.tensor([[0.5, 1.0, 2.0, 1.0], [1.5, 0.0, 1.0, 1.0]])
    loss, _ = policy_loss(logp, torch.zeros(2, 4), adv, MASK, LossConfig(), rollout_weights=weights)
    loss.backward()
    # token_mean of -A * r with r = 1: d loss / d logp = -w / 5 on valid tokens
    assert logp.grad is not None
    torch.testing.assert_close(logp.grad, -weights * MASK / 5)


def test_recipe_options_are_validated() -> None:
    config = load_config(None, ["algorithm.loss.rollout_correction=mis", "algorithm.loss.rollout_correction_cap=3"])
    assert update_config(config).loss.rollout_correction == "mis"
    with pytest.raises(ConfigError, match="rollout_correction must be one of"):
        load_config(None, ["algorithm.loss.rollout_correction=is"])
    with pytest.raises(ConfigError, match="rollout_correction_cap > 1"):
        load_config(None, ["algorithm.loss.rollout_correction_cap=0.5"])


@pytest.mark.parametrize("mode", ["tis", "mis"])
def test_a_no_op_for_the_transformers_engine(tiny_policy: TransformersPolicy, mode: str) -> None:
    """Same weights, same engine: the recomputed log-probs equal the rollout's, every weight is 1, nothing is
    clipped or masked, and the update equals the uncorrected one."""
    chat = ChatFormat.for_policy(tiny_policy, None)
    tasks = [t for t in echo_tasks(3, "train") for _ in range(2)]
    trajectories = run_episodes(tiny_policy, chat, tasks, SamplingParams(1.0, 1.0, 4))
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5, 0.25, -0.25])
    results = []
    for correction in ("none", mode):
        config = update_config(load_config(None, ["algorithm.epochs=1", "algorithm.num_minibatches=1",
                                                  f"algorithm.loss.rollout_correction={correction}"]))
        model = copy.deepcopy(tiny_policy.model)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        results.append((ppo_update(model, optimizer, trajectories, advantages, config, None,
                                   tiny_policy.pad_token_id), model.state_dict()))
    (_, plain), (metrics, corrected) = results
    assert metrics["mismatch_kl"] < 1e-9 and abs(metrics["mismatch_k1"]) < 1e-5
    assert metrics["rollout_is_weight_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics.get("rollout_is_clipped_frac", 0.0) == 0.0 and metrics.get("rollout_is_masked_frac", 0.0) == 0.0
    for key, value in plain.items():
        torch.testing.assert_close(corrected[key], value, atol=1e-6, rtol=1e-5)
