"""The policy update: micro-batches within a token budget give the same optimizer step as one padded pass."""

from __future__ import annotations

import copy

import pytest
import torch
from rlvr_gym_agents.batching import length_micro_batches, pad_left
from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.policy import TransformersPolicy
from rlvr_gym_agents.rollout import Trajectory
from rlvr_gym_agents.train import update_config
from rlvr_gym_agents.update.ppo import ppo_update


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_length_micro_batches_pack_sorted_rows_within_the_token_budget() -> None:
    lengths = [5, 3, 8, 2]
    # sorted by length: rows 3 (2), 1 (3), 0 (5), 2 (8); 2 x 3 = 6 <= 8, 3 x 5 = 15 > 8, 2 x 8 = 16 > 8
    batches = length_micro_batches(lengths, torch.tensor([0, 1, 2, 3]), 8)
    assert [b.tolist() for b in batches] == [[3, 1], [0], [2]]
    # a row longer than the budget is a micro-batch of its own; None keeps the mini-batch whole
    assert [b.tolist() for b in length_micro_batches(lengths, torch.tensor([2, 0]), 4)] == [[0], [2]]
    assert [b.tolist() for b in length_micro_batches(lengths, torch.tensor([2, 0]), None)] == [[2, 0]]
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        length_micro_batches(lengths, torch.tensor([0]), 0)


def test_pad_left_right_aligns_rows_and_masks_the_padding() -> None:
    ids, mask = pad_left([[5, 6], [], [7, 8, 9]], 0)
    assert ids.tolist() == [[0, 5, 6], [0, 0, 0], [7, 8, 9]]
    assert mask.tolist() == [[0, 1, 1], [0, 0, 0], [1, 1, 1]]


def _varied_trajectories(policy: TransformersPolicy) -> list[Trajectory]:
    """Six trajectories of 7-31 tokens: a prompt, then generated and observation ids in turn."""
    generator = torch.Generator().manual_seed(3)
    trajectories = []
    for length in (7, 31, 12, 19, 25, 9):
        ids = torch.randint(4, len(policy.tokenizer), (length,), generator=generator).tolist()
        mask = [0] * 3 + [1 if (i // 2) % 2 == 0 else 0 for i in range(length - 3)]
        logps = [-0.5 - 0.1 * (i % 3) if m else 0.0 for i, m in enumerate(mask)]
        trajectories.append(Trajectory("t", "testing/Echo-v0", token_ids=ids, loss_mask=mask, logps=logps))
    return trajectories


@pytest.mark.parametrize("overrides", [
    ["algorithm.loss.aggregation=token_mean"],
    ["algorithm.loss.aggregation=seq_mean_token_mean", "algorithm.loss.kl_coef=0.1"],
    ["algorithm.loss.aggregation=seq_mean_token_sum_norm"],
    ["algorithm.loss.name=aepo", "algorithm.loss.entropy_advantage_weight=0.2",
     "algorithm.loss.top_entropy_quantile=0.5", "algorithm.loss.entropy_coef=0.01"],
])
def test_micro_batches_give_the_same_update_as_one_padded_pass(tiny_policy: TransformersPolicy,
                                                               overrides: list[str]) -> None:
    trajectories = _varied_trajectories(tiny_policy)
    advantages = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.75, -0.5])
    results = []
    for budget in ("null", "40"):  # 40 tokens: micro-batches of 1-3 rows
        model = copy.deepcopy(tiny_policy.model)
        reference = copy.deepcopy(tiny_policy.model).eval()
        config = load_config(None, ["algorithm.epochs=1", "algorithm.num_minibatches=1",
                                    f"algorithm.micro_batch_tokens={budget}", *overrides])
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        metrics = ppo_update(model, optimizer, trajectories, advantages, update_config(config),
                             reference if config.algorithm.loss.kl_coef > 0 else None, tiny_policy.pad_token_id)
        results.append((_weights(model), metrics))
    (whole, whole_metrics), (split, split_metrics) = results
    assert any(not torch.equal(whole[k], v) for k, v in _weights(tiny_policy.model).items())
    for key, value in whole.items():
        torch.testing.assert_close(split[key], value, atol=1e-6, rtol=1e-5)
    for key in ("pg_loss", "loss", "clip_frac", "ratio_mean", "grad_norm"):
        assert split_metrics[key] == pytest.approx(whole_metrics[key], rel=1e-5, abs=1e-7)
