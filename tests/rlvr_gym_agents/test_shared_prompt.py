"""SharedPromptScorer: scoring continuations against each distinct prompt's keys/values, run once, gives the
log-probs, entropies and gradients of scoring every row whole."""

from __future__ import annotations

import pytest
import torch
from rlvr_gym_agents.batching import pad_right, token_logprobs
from rlvr_gym_agents.policy import TransformersPolicy
from rlvr_gym_agents.update.scoring import SharedPromptScorer


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


def _scored_positions(lengths: list[int], prompt_lengths: list[int], width: int) -> torch.Tensor:
    t = torch.arange(width)[None]
    starts = torch.tensor([max(p, 1) for p in prompt_lengths])[:, None]
    return (t >= starts) & (t < torch.tensor(lengths)[:, None])


@pytest.mark.parametrize("max_tokens", [None, 16])
def test_logprobs_entropies_and_gradients_match_scoring_whole_rows(tiny_policy: TransformersPolicy,
                                                                   max_tokens: int | None) -> None:
    model = tiny_policy.model.train()
    rows, prompt_lengths = _rows(len(tiny_policy.tokenizer))
    lengths = [len(r) for r in rows]
    ids = pad_right(rows, tiny_policy.pad_token_id, torch.long)
    attention = pad_right([[1] * n for n in lengths], 0, torch.long)
    scored = _scored_positions(lengths, prompt_lengths, ids.shape[1])
    weights = torch.linspace(-1.0, 1.0, ids.numel()).reshape(ids.shape) * scored

    model.zero_grad()
    whole_logp, whole_entropy = token_logprobs(model, ids, attention, temperature=0.7, with_entropy=True)
    assert whole_entropy is not None
    ((whole_logp * weights).sum() + (whole_entropy * weights).sum()).backward()
    whole_grads = [p.grad.clone() for p in model.parameters()]

    model.zero_grad()
    everything = torch.arange(len(rows))
    scorer = SharedPromptScorer(model, ids, lengths, prompt_lengths, everything, 0.7, tiny_policy.pad_token_id)
    assert scorer.prompt_mask.shape[0] == 5  # 3 shared prompts + 2 rows scored from their first id
    logp = torch.zeros_like(whole_logp)
    entropy = torch.zeros_like(whole_logp)
    micros = scorer.micro_batches(everything, max_tokens)
    assert (len(micros) > 1) == (max_tokens is not None)
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
        torch.testing.assert_close(param.grad, want, atol=1e-5, rtol=1e-4)


def test_without_autograd_nothing_is_kept_for_a_backward_pass(tiny_policy: TransformersPolicy) -> None:
    rows, prompt_lengths = _rows(len(tiny_policy.tokenizer))
    ids = pad_right(rows, tiny_policy.pad_token_id, torch.long)
    with torch.no_grad():
        scorer = SharedPromptScorer(tiny_policy.model, ids, [len(r) for r in rows], prompt_lengths,
                                    torch.tensor([0, 1, 2]), 1.0, tiny_policy.pad_token_id)
        logp, entropy = scorer.logprobs(tiny_policy.model, torch.tensor([2, 0]))
    assert entropy is None and not logp.requires_grad
    assert scorer.prompt_mask.shape[0] == 1  # rows 0-2 share one prompt
    assert logp.shape == (2, max(len(rows[2]), len(rows[0])))
    scorer.backward()  # no gradients reached the prompt: nothing to do
