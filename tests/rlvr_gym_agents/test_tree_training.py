"""Tree rollouts in the trainer: recipe keys, ``collect_rollouts`` for both samplers, per-token updates, and
(slow) ``rlvr-gym train`` on the text-world tree recipe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from agent_helpers import collect_rollouts
from rlvr_gym_agents.cli import train_main
from rlvr_gym_agents.config import ConfigError, load_config
from rlvr_gym_agents.credit.estimators import group_advantages, nonzero_variance_groups
from rlvr_gym_agents.policy import SamplingParams, TransformersPolicy
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout import run_episodes
from rlvr_gym_agents.rollout.tree_sampler import TreeSampler
from rlvr_gym_agents.train import train, update_config
from rlvr_gym_agents.update.ppo import ppo_update

from rlvr_gym.testing.toy import echo_tasks

RECIPE = Path(__file__).resolve().parents[2] / "agents" / "recipes" / "textworld-tree.yaml"
SAMPLING = SamplingParams(max_new_tokens=4)


def test_tree_recipe_selects_the_tree_sampler_and_derives_its_leaves() -> None:
    config = load_config(RECIPE, ["seed=3", "rollout.tree.branch.alpha=0.35", "train.group_size=6", "env.max_turns=5"])
    assert config.rollout.sampler == "tree" and config.algorithm.credit == "gigpo"
    assert config.output.dir.endswith("seed3")
    tree = config.rollout.tree
    assert tree.num_leaves == 6 and tree.max_turns == 5 and tree.reuse_kv_cache is True
    assert tree.branch.alpha == 0.35 and tree.global_samples == 1 and tree.fallback == "entropy"


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ("rollout.tree.bogus=1", "unknown config key 'rollout.tree.bogus'"),
        ("rollout.tree.branch.beta=1", "rollout.tree.branch.beta"),
        ("rollout.tree.num_leaves=3", "derived from train.group_size"),
        ("rollout.tree.global_samples=0", "global_samples"),
        ("rollout.tree.global_samples=9", r"global_samples must be in \[1, "),
        ("rollout.sampler=forest", "rollout.sampler must be flat or tree"),
        ("algorithm.credit=hard", "algorithm.credit must be one of"),
        ("env.num_workers=-1", "env.num_workers must be >= 0"),
        ("tree.seed=1", "now rollout.tree"),
    ],
)
def test_bad_tree_settings_raise(override: str, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_config(RECIPE, [override])


def test_per_token_credit_needs_the_tree_sampler() -> None:
    with pytest.raises(ConfigError, match="needs rollout.sampler=tree"):
        load_config(None, ["algorithm.credit=treerl"])
    assert load_config(None, ["rollout.sampler=tree", "algorithm.credit=treerl"]).algorithm.credit == "treerl"


def _echo_config(*overrides: str) -> Any:
    return load_config(None, ["env.env_id=testing/Echo-v0", "train.group_size=4", "rollout.max_new_tokens=4",
                              "algorithm.epochs=1", "algorithm.num_minibatches=1", *overrides])


def test_flat_collect_rollouts_gives_one_group_advantage_per_episode(tiny_policy: TransformersPolicy) -> None:
    config = _echo_config("algorithm.drop_zero_variance_groups=true")
    tasks = echo_tasks(3)
    rollouts = collect_rollouts(config, tiny_policy, ChatFormat(tiny_policy.tokenizer), tasks, SAMPLING, step=1)
    assert [t.task_id for t in rollouts.trajectories] == [t.id for t in tasks for _ in range(4)]
    groups = torch.arange(3).repeat_interleave(4)
    assert [t.group for t in rollouts.trajectories] == groups.tolist()
    rewards = torch.tensor([t.reward for t in rollouts.trajectories])
    per_episode = group_advantages(rewards, groups, "grpo")
    assert rollouts.advantages.shape == (12, max(len(t.token_ids) for t in rollouts.trajectories))
    for row, trajectory, value in zip(rollouts.advantages, rollouts.trajectories, per_episode, strict=True):
        # the episode's advantage on every id after the prompt, 0 on the prompt and the padding
        expected = [0.0] * trajectory.prompt_length + [float(value)] * (len(trajectory.token_ids) - trajectory.prompt_length)
        assert torch.allclose(row[: len(expected)], torch.tensor(expected)) and not row[len(expected):].any()
    assert torch.equal(rollouts.keep, nonzero_variance_groups(rewards, groups)) and rollouts.metrics == {}


def _tree_rollouts(policy: TransformersPolicy, credit: str, step: int = 1) -> Any:
    config = _echo_config("rollout.sampler=tree", f"algorithm.credit={credit}", "rollout.tree.global_samples=2",
                          "rollout.tree.branch.alpha=1.0", "algorithm.drop_zero_variance_groups=false")
    chat = ChatFormat(policy.tokenizer)
    sampler = TreeSampler(policy, chat, config.rollout.tree)
    return config, collect_rollouts(config, policy, chat, echo_tasks(2), SAMPLING, step, tree_sampler=sampler)


def test_tree_collect_rollouts_soft_credit_matches_the_leaves_group_advantage(tiny_policy: TransformersPolicy) -> None:
    _, rollouts = _tree_rollouts(tiny_policy, "soft")
    trajectories = rollouts.trajectories
    assert [t.group for t in trajectories] == [0] * 4 + [1] * 4
    assert rollouts.advantages.shape == (8, max(len(t.token_ids) for t in trajectories))
    rewards = torch.tensor([t.reward for t in trajectories])
    expected = group_advantages(rewards, torch.tensor([0] * 4 + [1] * 4), "grpo")
    for row, trajectory, value in zip(rollouts.advantages, trajectories, expected.tolist()):
        generated = torch.tensor(trajectory.loss_mask, dtype=torch.bool)
        assert torch.allclose(row[: len(generated)][generated], torch.full((int(generated.sum()),), value))
        assert not row[len(generated):].any()  # right padding carries no credit
    assert rollouts.keep.all()
    assert rollouts.metrics["tree/leaves_per_task"] == [4, 4]
    assert rollouts.metrics["tree/global_samples"] + rollouts.metrics["tree/branches"] == 8


def test_tree_rollouts_are_a_pure_function_of_the_step(tiny_model_dir: Path) -> None:
    first = _tree_rollouts(TransformersPolicy.from_pretrained(str(tiny_model_dir), seed=0), "treerl", step=5)[1]
    again = _tree_rollouts(TransformersPolicy.from_pretrained(str(tiny_model_dir), seed=0), "treerl", step=5)[1]
    assert [t.token_ids for t in first.trajectories] == [t.token_ids for t in again.trajectories]
    assert torch.equal(first.advantages, again.advantages)


def test_per_token_advantages_give_the_same_update_as_per_episode_ones(tiny_model_dir: Path) -> None:
    """A (B, T') advantage that repeats each episode's value (padded wider than the batch) is the (B,) case."""
    config = _echo_config("train.learning_rate=1e-2")
    weights = []
    for per_token in (False, True):
        policy = TransformersPolicy.from_pretrained(str(tiny_model_dir), seed=0)
        trajectories = run_episodes(policy, ChatFormat(policy.tokenizer), echo_tasks(4), SAMPLING)
        advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
        if per_token:
            advantages = advantages[:, None].expand(4, max(len(t.token_ids) for t in trajectories) + 3).clone()
        torch.manual_seed(0)  # the minibatch order
        optimizer = torch.optim.SGD(policy.model.parameters(), lr=1e-2)
        ppo_update(policy.model, optimizer, trajectories, advantages, update_config(config), None, policy.pad_token_id)
        weights.append({k: v.detach().clone() for k, v in policy.model.state_dict().items()})
    assert all(torch.allclose(weights[0][k], weights[1][k], atol=1e-6) for k in weights[0])


@pytest.mark.parametrize("credit", ["treerl", "arpo_hard", "treepo", "gigpo"])
def test_per_token_tree_credit_trains(tiny_policy: TransformersPolicy, credit: str) -> None:
    config, rollouts = _tree_rollouts(tiny_policy, credit)
    assert rollouts.advantages.shape[0] == 8 and torch.isfinite(rollouts.advantages).all()
    optimizer = torch.optim.AdamW(tiny_policy.model.parameters(), lr=1e-3)
    metrics = ppo_update(tiny_policy.model, optimizer, rollouts.trajectories, rollouts.advantages, update_config(config), None,
                         tiny_policy.pad_token_id)
    assert torch.isfinite(torch.tensor(metrics["loss"]))


def test_a_resumed_tree_run_ends_in_the_same_state_as_an_uninterrupted_one(
    tiny_model_dir: Path, tmp_path: Path, echo_tree_run: Any
) -> None:
    train(load_config(None, echo_tree_run(tiny_model_dir, tmp_path, "straight", 2)))
    train(load_config(None, echo_tree_run(tiny_model_dir, tmp_path, "split", 1)))
    train(load_config(None, echo_tree_run(tiny_model_dir, tmp_path, "split", 2)))
    a = TransformersPolicy.from_pretrained(str(tmp_path / "straight" / "checkpoint")).model.state_dict()
    b = TransformersPolicy.from_pretrained(str(tmp_path / "split" / "checkpoint")).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    runs = {run: [r for r in map(json.loads, (tmp_path / run / "metrics.jsonl").read_text().splitlines())
                  if r["phase"] == "rl"] for run in ("straight", "split")}
    assert [s["step"] for s in runs["split"]] == [1, 2] and all(s["tree/leaves_per_task"] == [4, 4] for s in runs["split"])
    sampled = [key for key in runs["straight"][1] if key.startswith("tree/") or key in ("reward_mean", "tokens_mean")]
    assert "tree/tokens_generated" in sampled  # the resumed step 2 grew the same trees as the uninterrupted one
    assert {k: runs["straight"][1][k] for k in sampled} == {k: runs["split"][1][k] for k in sampled}


@pytest.mark.slow  # tiny model build + short warm start + 2 tree steps + 2 evaluations: ~1-2 min on 2 cores
def test_rlvr_gym_train_runs_the_textworld_tree_recipe(tmp_path: Path) -> None:
    run = tmp_path / "run"
    status = train_main([
        str(RECIPE), f"output.dir={run}", "train.num_steps=2", "train.tasks_per_step=2", "train.group_size=4",
        "algorithm.credit=treerl", "sft.num_demos=40", "sft.max_time_s=20", "model.corpus_episodes=40",
        "eval.num_tasks=4", "eval.k=1", "eval.greedy=false", "train.max_time_s=120", "output.progress=false",
        "output.tensorboard=false",
    ])
    assert status == 0
    steps = [r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["phase"] == "rl"]
    assert [s["step"] for s in steps] == [1, 2]
    assert all(s["tree/leaves_per_task"] == [4, 4] for s in steps)
    assert all(0 < s["tree/prefix_sharing_ratio"] <= 1 for s in steps)
    assert json.loads((run / "summary.json").read_text())["after"]["num_tasks"] == 4
