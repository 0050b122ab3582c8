"""PrefixTreeScorer: scoring each shared prefix (a distinct prompt; with ``share_turns`` also the turns rows share)
once and every row's continuation against its keys/values gives the log-probs, entropies and gradients of scoring
every row whole; the update takes the same step with and without tree prefix sharing."""

from __future__ import annotations

import copy

import pytest
import torch
from rlvr_gym_agents.batching import pad_right, token_logprobs
from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.policy import TransformersPolicy
from rlvr_gym_agents.rollout import Trajectory
from rlvr_gym_agents.train import update_config
from rlvr_gym_agents.update.ppo import ppo_update
from rlvr_gym_agents.update.scoring import PrefixNode, PrefixTreeScorer, prefix_tree


def _rows(vocab: int) -> tuple[list[list[int]], list[int]]:
    """Ten rows: three prompts shared by 3 / 2 / 1 rows, a row without a prompt length (0: its first id is its
    prompt), a prompt-only row, a row with a one-id continuation and a one-id row."""
    generator = torch.Generator().manual_seed(5)

    def ids(n: int) -> list[int]:
        return torch.randint(4, vocab, (n,), generator=generator).tolist()

    prompts = [ids(6), ids(9), ids(4)]
    rows, prompt_lengths = [], []
    for prompt, continuations in zip(prompts, [(7, 15, 3), (11, 2), (8,)]):
        for n in continuations:
            rows.append(prompt + ids(n))
            prompt_lengths.append(len(prompt))
    rows += [ids(13), prompts[0], prompts[1] + ids(1), ids(1)]
    prompt_lengths += [0, len(prompts[0]), len(prompts[1]), 0]
    return rows, prompt_lengths


def _tree_rows(vocab: int) -> tuple[list[list[int]], list[int], list[list[int]]]:
    """Seven leaves of a 3-level tree over a 5-id prompt P (segments A-H of 2-9 ids, observations inside):
    P A B E, P A B F, P A C, P A C G (C ends a leaf and is shared), P D, P D H, and Q (another prompt) A B;
    returns the rows, their prompt lengths and loss masks (1 on a segment's first half: the turn; its second half
    is the observation)."""
    generator = torch.Generator().manual_seed(11)

    def ids(n: int) -> list[int]:
        return torch.randint(4, vocab, (n,), generator=generator).tolist()

    p, q = ids(5), ids(3)
    a, b, c, d, e, f, g, h = (ids(n) for n in (6, 4, 9, 5, 3, 7, 2, 8))
    segments = [[p, a, b, e], [p, a, b, f], [p, a, c], [p, a, c, g], [p, d], [p, d, h], [q, a, b]]
    rows = [[i for segment in s for i in segment] for s in segments]
    masks = [[0] * len(s[0]) + [int(j < (len(x) + 1) // 2) for x in s[1:] for j in range(len(x))]
             for s in segments]
    return rows, [len(s[0]) for s in segments], masks


def test_prefix_tree_of_a_hand_built_batch() -> None:
    # rows share the prompt [1, 2]; 0, 1, 2, 3 share [3]; 0, 1, 3 share [4]; 0 and 3 share [5, 6]; row 3 goes on
    sequences = {0: [1, 2, 3, 4, 5, 6], 1: [1, 2, 3, 4, 7, 8], 2: [1, 2, 3, 9], 3: [1, 2, 3, 4, 5, 6, 10],
                 4: [1, 2], 5: [8, 2, 3]}
    prompts = dict.fromkeys(sequences, 2)
    nodes, paths = prefix_tree(sequences, prompts, 1)
    assert nodes == [PrefixNode(0, 0, 2, -1, 0), PrefixNode(5, 0, 2, -1, 0), PrefixNode(0, 2, 3, 0, 1),
                     PrefixNode(0, 3, 4, 2, 2), PrefixNode(0, 4, 6, 3, 3)]
    assert paths == {0: [0, 2, 3, 4], 1: [0, 2, 3], 2: [0, 2], 3: [0, 2, 3, 4], 4: [0], 5: [1]}
    # runs shorter than 3 ids are left to the rows: [3] and [3, 4] are too short, [3, 4, 5, 6] is a node
    nodes, paths = prefix_tree(sequences, prompts, 3)
    assert nodes[2:] == [PrefixNode(0, 2, 6, 0, 1)]
    assert paths == {0: [0, 2], 1: [0], 2: [0], 3: [0, 2], 4: [0], 5: [1]}
    assert prefix_tree(sequences, prompts, None)[0] == nodes[:2]  # prompts only
    with pytest.raises(ValueError, match="min_shared_tokens must be >= 1"):
        prefix_tree(sequences, prompts, 0)


def _scored_positions(lengths: list[int], prompt_lengths: list[int], width: int) -> torch.Tensor:
    t = torch.arange(width)[None]
    starts = torch.tensor([max(p, 1) for p in prompt_lengths])[:, None]
    return (t >= starts) & (t < torch.tensor(lengths)[:, None])


def _compare_with_whole_rows(policy: TransformersPolicy, rows: list[list[int]], prompt_lengths: list[int],
                             weights: torch.Tensor, max_tokens: int | None,
                             **scorer_args: object) -> tuple[PrefixTreeScorer, int]:
    """Scores ``rows`` whole and with the scorer (micro-batches of ``max_tokens``), backpropagates sum(weights *
    (logp + entropy)) in both, checks log-probs, entropies and every parameter's gradient; returns the scorer and
    its number of micro-batches."""
    model = policy.model.train()
    lengths = [len(r) for r in rows]
    ids = pad_right(rows, policy.pad_token_id, torch.long)
    attention = pad_right([[1] * n for n in lengths], 0, torch.long)
    scored = _scored_positions(lengths, prompt_lengths, ids.shape[1])
    weights = weights * scored

    model.zero_grad()
    whole_logp, whole_entropy = token_logprobs(model, ids, attention, temperature=0.7, with_entropy=True)
    assert whole_entropy is not None
    ((whole_logp * weights).sum() + (whole_entropy * weights).sum()).backward()
    whole_grads = [p.grad.clone() for p in model.parameters()]

    model.zero_grad()
    everything = torch.arange(len(rows))
    scorer = PrefixTreeScorer(model, ids, lengths, prompt_lengths, everything, 0.7, policy.pad_token_id,
                              max_tokens=max_tokens, with_entropy=True, **scorer_args)  # type: ignore[arg-type]
    logp = torch.zeros_like(whole_logp)
    entropy = torch.zeros_like(whole_logp)
    micros = scorer.micro_batches(everything, max_tokens)
    for micro in micros:
        micro_logp, micro_entropy = scorer.logprobs(model, micro, with_entropy=True)
        assert micro_entropy is not None
        width = micro_logp.shape[1]
        assert width == max(lengths[r] for r in micro.tolist())
        ((micro_logp * weights[micro, :width]).sum() + (micro_entropy * weights[micro, :width]).sum()).backward()
        logp[micro, :width], entropy[micro, :width] = micro_logp.detach(), micro_entropy.detach()
    scorer.backward()

    torch.testing.assert_close(logp, whole_logp.detach() * scored, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, whole_entropy.detach() * scored, atol=1e-5, rtol=1e-5)
    for param, want in zip(model.parameters(), whole_grads):
        assert param.grad is not None
        assert float((param.grad - want).norm() / want.norm().clamp(min=1e-12)) <= 1e-5
    return scorer, len(micros)


@pytest.mark.parametrize("max_tokens", [None, 16])
@pytest.mark.parametrize("share_turns", [False, True])
def test_prompt_sharing_matches_scoring_whole_rows(tiny_policy: TransformersPolicy, max_tokens: int | None,
                                                   share_turns: bool) -> None:
    rows, prompt_lengths = _rows(len(tiny_policy.tokenizer))
    weights = torch.linspace(-1.0, 1.0, len(rows) * max(len(r) for r in rows)).reshape(len(rows), -1)
    scorer, micros = _compare_with_whole_rows(tiny_policy, rows, prompt_lengths, weights, max_tokens,
                                              share_turns=share_turns)
    assert sum(node.depth == 0 for node in scorer.nodes) == 5  # 3 shared prompts + 2 rows scored from their first id
    assert (micros > 1) == (max_tokens is not None)


@pytest.mark.parametrize("max_tokens", [None, 12])
def test_tree_prefixes_match_scoring_whole_rows_under_the_loss_mask(tiny_policy: TransformersPolicy,
                                                                    max_tokens: int | None) -> None:
    rows, prompt_lengths, masks = _tree_rows(len(tiny_policy.tokenizer))
    weights = pad_right(masks, 0, torch.float32) * torch.linspace(-1.0, 2.0, len(rows))[:, None]
    scorer, _ = _compare_with_whole_rows(tiny_policy, rows, prompt_lengths, weights, max_tokens, share_turns=True)
    # roots P (5 ids) and Q (3); under P: A (6, four leaves) and D (5, two leaves: P D ends there); under A: B (4)
    # and C (9); E, F, G, H and Q's A B are single leaves' continuations
    shape = sorted((n.depth, n.end - n.begin) for n in scorer.nodes)
    assert shape == [(0, 3), (0, 5), (1, 5), (1, 6), (2, 4), (2, 9)]
    assert [len(scorer.paths[r]) for r in range(len(rows))] == [3, 3, 3, 3, 2, 2, 1]
    assert scorer.suffix_lengths == [3, 7, 0, 2, 0, 8, 10]


def test_entropies_need_a_scorer_built_for_them(tiny_policy: TransformersPolicy) -> None:
    rows, prompt_lengths, _ = _tree_rows(len(tiny_policy.tokenizer))
    ids = pad_right(rows, tiny_policy.pad_token_id, torch.long)
    with torch.no_grad():
        scorer = PrefixTreeScorer(tiny_policy.model, ids, [len(r) for r in rows], prompt_lengths,
                                  torch.tensor([0, 1]), 1.0, tiny_policy.pad_token_id, share_turns=True)
        with pytest.raises(ValueError, match="with_entropy=True"):
            scorer.logprobs(tiny_policy.model, torch.tensor([0]), with_entropy=True)


def test_without_autograd_nothing_is_kept_for_a_backward_pass(tiny_policy: TransformersPolicy) -> None:
    rows, prompt_lengths = _rows(len(tiny_policy.tokenizer))
    ids = pad_right(rows, tiny_policy.pad_token_id, torch.long)
    with torch.no_grad():
        scorer = PrefixTreeScorer(tiny_policy.model, ids, [len(r) for r in rows], prompt_lengths,
                                  torch.tensor([0, 1, 2]), 1.0, tiny_policy.pad_token_id, share_turns=True)
        logp, entropy = scorer.logprobs(tiny_policy.model, torch.tensor([2, 0]))
    assert entropy is None and not logp.requires_grad
    assert len(scorer.nodes) == 1  # rows 0-2 share one prompt, and their continuations differ from the first id
    assert logp.shape == (2, max(len(rows[2]), len(rows[0])))
    scorer.backward()  # no gradients reached the prompt: nothing to do


@pytest.mark.parametrize("overrides", [
    ["algorithm.loss.aggregation=seq_mean_token_mean", "algorithm.loss.kl_coef=0.1"],
    ["algorithm.loss.name=aepo", "algorithm.loss.entropy_advantage_weight=0.2",
     "algorithm.loss.top_entropy_quantile=0.5", "algorithm.loss.entropy_coef=0.01"],
])
def test_the_update_with_tree_prefixes_shared_equals_the_per_leaf_one(tiny_policy: TransformersPolicy,
                                                                      overrides: list[str]) -> None:
    rows, prompt_lengths, masks = _tree_rows(len(tiny_policy.tokenizer))
    trajectories = [Trajectory("t", "testing/Echo-v0", token_ids=r, loss_mask=m, prompt_length=p,
                               logps=[-0.4 - 0.05 * (i % 5) if x else 0.0 for i, x in enumerate(m)])
                    for r, p, m in zip(rows, prompt_lengths, masks)]
    advantages = torch.tensor([1.0, -0.5, 0.25, -1.0, 0.75, -0.5, 0.3])
    results = []
    for share, budget in (("false", "null"), ("true", "null"), ("true", "30")):
        model = copy.deepcopy(tiny_policy.model)
        reference = copy.deepcopy(tiny_policy.model).eval()
        config = load_config(None, ["algorithm.epochs=1", "algorithm.num_minibatches=1",
                                    f"algorithm.micro_batch_tokens={budget}",
                                    f"algorithm.share_tree_prefixes={share}", "algorithm.min_shared_tokens=1",
                                    *overrides])
        assert update_config(config).share_tree_prefixes == (share == "true")
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        metrics = ppo_update(model, optimizer, trajectories, advantages, update_config(config),
                             reference if config.algorithm.loss.kl_coef > 0 else None, tiny_policy.pad_token_id)
        results.append(({k: v.detach().clone() for k, v in model.state_dict().items()}, metrics))
    (per_leaf, per_leaf_metrics) = results[0]
    assert any(not torch.equal(per_leaf[k], v) for k, v in tiny_policy.model.state_dict().items())
    for shared, shared_metrics in results[1:]:
        for key, value in per_leaf.items():
            torch.testing.assert_close(shared[key], value, atol=1e-6, rtol=1e-5)
        for key in ("pg_loss", "loss", "clip_frac", "ratio_mean", "grad_norm"):
            assert shared_metrics[key] == pytest.approx(per_leaf_metrics[key], rel=1e-5, abs=1e-7)
