"""The vLLM engine's calls, checked against the CPU fake (its engine in another process, msgpack-only RPC)."""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from rlvr_gym_agents import train as train_module
from rlvr_gym_agents.config import ConfigError, load_config
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy, fake_vllm
from rlvr_gym_agents.policy.vllm import VLLMPolicy

PROMPT = [[5, 6, 7, 8]]


@pytest.fixture(scope="module")
def engine(tiny_model_dir: Path) -> Iterator[VLLMPolicy]:
    """One fake engine over the tiny model for the module (starting one takes seconds); tests leave its weights as
    they found them."""
    stops = TransformersPolicy.from_pretrained(str(tiny_model_dir)).stop_token_ids
    policy = VLLMPolicy(str(tiny_model_dir), stops, max_context_tokens=256, dtype="float32", trainer_device="cpu",
                        seed=3, engine=fake_vllm)
    yield policy
    policy.close()


def _param_sum(model: torch.nn.Module) -> float:
    return float(sum(p.detach().double().sum() for p in model.parameters()))


def test_a_closure_fails_against_the_fake_as_against_vllm_v1(engine: VLLMPolicy,
                                                            tiny_policy: TransformersPolicy) -> None:
    weights = [(n, p.detach()) for n, p in tiny_policy.model.named_parameters()]
    with pytest.raises(TypeError, match="is not serializable. Set VLLM_ALLOW_INSECURE_SERIALIZATION=1"):
        engine.llm.apply_model(lambda model: model.load_weights(weights))  # the old sync_weights
    with pytest.raises(TypeError, match="not serializable"):
        engine.llm.collective_rpc("receive_weights", args=(lambda: None,))
    with pytest.raises(RuntimeError, match="no method"):
        engine.llm.collective_rpc("model_runner")  # engine state only through the extension's methods
    assert engine.weights_fingerprint() == pytest.approx(_param_sum(tiny_policy.model), rel=1e-9)


def test_sync_reaches_the_engine_and_changes_its_samples(engine: VLLMPolicy, tiny_policy: TransformersPolicy) -> None:
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    before, _ = engine.generate(PROMPT, greedy)
    ours, _ = tiny_policy.generate(PROMPT, greedy)
    assert before[0].token_ids == ours[0].token_ids
    trained = copy.deepcopy(tiny_policy.model)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    syncs = engine.num_syncs
    engine.sync_weights(trained.named_parameters())
    try:
        assert engine.num_syncs == syncs + 1
        assert engine.weights_fingerprint() == pytest.approx(_param_sum(trained), rel=1e-9)
        after, _ = engine.generate(PROMPT, greedy)
        expected, _ = TransformersPolicy(trained, tiny_policy.tokenizer).generate(PROMPT, greedy)
        assert after[0].token_ids == expected[0].token_ids != before[0].token_ids
        for a, b in zip(after[0].logps, expected[0].logps):
            assert a == pytest.approx(b, abs=1e-4)
    finally:
        engine.sync_weights(tiny_policy.model.named_parameters())


def test_processed_logprobs_are_renormalised_over_the_nucleus(engine: VLLMPolicy,
                                                              tiny_policy: TransformersPolicy) -> None:
    nucleus = SamplingParams(temperature=1.0, top_p=0.3, max_new_tokens=5)
    generations, state = engine.generate(PROMPT, nucleus)
    tokens = generations[0].token_ids
    with torch.no_grad():
        logits = tiny_policy.model(input_ids=torch.tensor([PROMPT[0] + tokens])).logits[0].float()
    trainer_logp = torch.log_softmax(logits, -1)[len(PROMPT[0]) - 1:-1].gather(1, torch.tensor(tokens)[:, None])
    for engine_lp, train_lp in zip(generations[0].logps, trainer_logp.squeeze(1).tolist()):
        assert engine_lp >= train_lp - 1e-5  # renormalised over the nucleus: never below the full-vocab one
        assert math.isfinite(engine_lp)
    assert state.contexts[0] == PROMPT[0] + tokens


def test_a_sleeping_engine_refuses_work_until_woken(engine: VLLMPolicy, tiny_policy: TransformersPolicy) -> None:
    llm = engine.llm
    llm.sleep(level=1)
    with pytest.raises(RuntimeError, match="sleeps"):
        llm.generate([{"prompt_token_ids": PROMPT[0]}], fake_vllm.SamplingParams(max_tokens=2))
    with pytest.raises(RuntimeError, match="weights sleep"):
        llm.collective_rpc("weights_fingerprint")
    llm.wake_up(tags=["weights"])
    assert llm.collective_rpc("weights_fingerprint")[0] == pytest.approx(_param_sum(tiny_policy.model))
    llm.wake_up(tags=["kv_cache"])
    assert len(llm.generate([{"prompt_token_ids": PROMPT[0]}], fake_vllm.SamplingParams(max_tokens=2))) == 1


def test_three_training_steps_sync_the_fake_engine_each_step(tiny_model_dir: Path, tmp_path: Path,
                                                             echo_tree_run: Any,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    overrides = [o for o in echo_tree_run(tiny_model_dir, tmp_path, "fake", 3)
                 if not o.startswith(("rollout.sampler", "algorithm.credit", "rollout.tree"))]
    config = load_config(None, [*overrides, "rollout.engine=fake_vllm", "algorithm.epochs=1",
                                "algorithm.num_minibatches=1",
                                "algorithm.loss.entropy_coef=0.01"])  # a gradient even when every reward is equal
    syncs: list[tuple[float, float]] = []
    original = VLLMPolicy.sync_weights

    def recording_sync(self: VLLMPolicy, named_parameters: Any) -> None:
        params = list(named_parameters)
        original(self, params)
        syncs.append((self.weights_fingerprint(), float(sum(p.detach().double().sum() for _, p in params))))

    monkeypatch.setattr(VLLMPolicy, "sync_weights", recording_sync)
    summary = train_module.train(config)
    assert summary["after"]["num_tasks"] == 4
    assert len(syncs) == 2 + 3  # before the first evaluation, before RL, then after each of the 3 updates
    for engine_sum, trainer_sum in syncs:
        assert engine_sum == pytest.approx(trainer_sum, rel=1e-9)
    assert len({round(e, 6) for e, _ in syncs[1:]}) == 4  # each update changed the weights the engine samples with
    with pytest.raises(ConfigError, match="ipc needs CUDA"):
        load_config(None, ["rollout.engine=fake_vllm", "rollout.weight_sync=ipc"])
