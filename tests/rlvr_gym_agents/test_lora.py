"""LoRA (PEFT): only the adapters train, and a rollout engine is synced with the merged weights."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from rlvr_gym_agents import train as train_module
from rlvr_gym_agents.config import ConfigError, load_config
from rlvr_gym_agents.evaluate import load_agent
from rlvr_gym_agents.policy import TransformersPolicy
from rlvr_gym_agents.policy.lora import LoRAConfig, apply_lora, merged_named_parameters
from rlvr_gym_agents.policy.vllm import VLLMPolicy

pytest.importorskip("peft")


def test_merged_weights_give_the_adapted_model_s_outputs(tiny_policy: TransformersPolicy) -> None:
    plain = copy.deepcopy(tiny_policy.model)
    model = apply_lora(tiny_policy.model, LoRAConfig(rank=4, alpha=8))
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {
        n for n, _ in model.named_parameters() if "lora_" in n}
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.1)  # B starts at 0: make the update non-zero
    merged = dict(merged_named_parameters(model))
    assert set(merged) == {n for n, _ in plain.named_parameters()}
    plain.load_state_dict(merged, strict=False)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    with torch.no_grad():
        torch.testing.assert_close(plain(input_ids=ids).logits, model(input_ids=ids).logits, atol=1e-5, rtol=1e-5)
    with pytest.raises(ConfigError, match="model.lora needs rank >= 0"):
        load_config(None, ["model.lora.rank=-1"])


def test_a_lora_training_step_trains_the_adapters_and_syncs_merged_weights(
        tiny_model_dir: Path, tmp_path: Path, echo_tree_run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    overrides = [o for o in echo_tree_run(tiny_model_dir, tmp_path, "lora", 1)
                 if not o.startswith(("rollout.sampler", "algorithm.credit", "rollout.tree"))]
    config = load_config(None, [*overrides, "rollout.engine=fake_vllm", "model.lora.rank=4", "algorithm.epochs=1",
                                "algorithm.num_minibatches=1", "algorithm.loss.entropy_coef=0.01",
                                "train.learning_rate=0.01"])
    seen: dict[str, Any] = {"syncs": []}
    build = train_module.build_rollout_policy

    def spy_build(config: Any, policy: TransformersPolicy, model_path: str) -> Any:
        seen["policy"], seen["initial"] = policy, {n: p.detach().clone() for n, p in policy.model.named_parameters()}
        return build(config, policy, model_path)

    original = VLLMPolicy.sync_weights

    def recording_sync(self: VLLMPolicy, named_parameters: Any) -> None:
        params = list(named_parameters)
        original(self, params)
        seen["syncs"].append((self.weights_fingerprint(), float(sum(p.double().sum() for _, p in params))))

    monkeypatch.setattr(train_module, "build_rollout_policy", spy_build)
    monkeypatch.setattr(VLLMPolicy, "sync_weights", recording_sync)
    train_module.train(config)
    model = seen["policy"].model
    changed = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), seen["initial"][n])}
    assert changed and all("lora_" in n for n in changed)  # the base weights are frozen
    assert len(seen["syncs"]) == 3  # before evaluation, before RL, after the step
    for engine_sum, merged_sum in seen["syncs"]:
        assert engine_sum == pytest.approx(merged_sum, rel=1e-9)
    assert seen["syncs"][-1][0] != pytest.approx(seen["syncs"][0][0], rel=1e-12)  # the merged update reached it
    agent = load_agent(str(tmp_path / "lora" / "checkpoint"), device="cpu")  # rlvr-gym eval merges the adapters
    loaded = agent.policy.model  # type: ignore[attr-defined]
    assert not any("lora_" in n for n, _ in loaded.named_parameters())
    assert float(sum(p.detach().double().sum() for p in loaded.parameters())) == pytest.approx(
        seen["syncs"][-1][1], rel=1e-6)
