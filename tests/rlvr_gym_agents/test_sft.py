"""SFT warm start: demonstrations with injected mistakes, masks, behaviour cloning."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
import torch
from rlvr_gym_agents.policy import load_model_and_tokenizer
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.warmstart.demonstrations import (
    ACTION,
    CONTEXT,
    UNTRAINED_ACTION,
    Demonstration,
    demonstrate,
    demonstration_ids,
    gold_expert,
    load_expert,
    oracle_expert,
)
from rlvr_gym_agents.warmstart.demonstrations import (
    _demonstrated_action as sft_action,
)
from rlvr_gym_agents.warmstart.sft import (
    _batches,
    _cross_entropy,
    _optimizer_step,
    behaviour_cloning,
    warmup_cosine,
)

import rlvr_gym
from rlvr_gym import load_suite
from rlvr_gym.testing.toy import echo_tasks


def test_demonstration_ids_train_only_on_expert_actions(tiny_model_dir: Path) -> None:
    _, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    chat = ChatFormat(tokenizer)
    demo = Demonstration(["Say the word: apple", "Wrong.", "Correct."], ["say bread", "say apple"], [False, True], True)
    ids, roles = demonstration_ids(demo, chat)
    prompt, observation = chat.prompt_ids("Say the word: apple"), chat.observation_ids("Wrong.")
    mistake = chat.encode("say bread") + [chat.end_of_turn_id]
    expert = chat.encode("say apple") + [chat.end_of_turn_id]
    assert ids == prompt + mistake + observation + expert
    assert [i for i, r in zip(ids, roles) if r == ACTION] == expert  # the mistake stays in context, out of the loss
    assert [i for i, r in zip(ids, roles) if r == UNTRAINED_ACTION] == mistake
    assert [i for i, r in zip(ids, roles) if r == CONTEXT] == prompt + observation


def test_textworld_oracle_demonstrations_recover_from_mistakes() -> None:
    tasks = list(load_suite("textworld/easy-train"))[:20]
    rng = random.Random(0)
    clean = [demonstrate(task, oracle_expert, 0.0, rng) for task in tasks]
    assert all(d.success and d.actions == task.gold for d, task in zip(clean, tasks))
    demos = [demonstrate(task, oracle_expert, 0.25, rng) for task in tasks]
    # mistakes cost turns, so a few episodes hit the 12-turn limit; most still end in success
    assert sum(d.success for d in demos) >= 15
    assert 0.1 < sum(not t for d in demos for t in d.trained) / sum(len(d.trained) for d in demos) < 0.4
    assert all(len(d.observations) == len(d.actions) + 1 for d in demos)


def test_train_on_mistakes_imitates_the_same_episodes() -> None:
    tasks = list(load_suite("textworld/easy-train"))[:10]
    kept = [demonstrate(task, oracle_expert, 0.25, random.Random(1)) for task in tasks]
    imitated = [demonstrate(task, oracle_expert, 0.25, random.Random(1), train_on_mistakes=True) for task in tasks]
    assert [d.actions for d in kept] == [d.actions for d in imitated]  # same draws, same episodes
    assert not all(t for d in kept for t in d.trained) and all(t for d in imitated for t in d.trained)


def test_gold_expert_replays_gold_and_names_missing_actions() -> None:
    env = rlvr_gym.make("testing/Echo-v0")
    task = echo_tasks(1)[0]
    env.reset(options={"task": task})
    assert gold_expert(env) == "say apple"
    env.step("nonsense")
    with pytest.raises(ValueError, match="no gold action for turn 2"):
        gold_expert(env)
    with pytest.raises(TypeError, match="oracle_action"):
        oracle_expert(env)


def test_load_expert_names() -> None:
    assert load_expert("gold") is gold_expert and load_expert("oracle") is oracle_expert
    assert load_expert("rlvr_gym_agents.warmstart.demonstrations:gold_expert") is gold_expert
    with pytest.raises(ValueError, match="module:function"):
        load_expert("planner")


def test_warmup_cosine_hand_computed() -> None:
    assert warmup_cosine(0, 10, 110) == pytest.approx(0.1)
    assert warmup_cosine(9, 10, 110) == pytest.approx(1.0)
    assert warmup_cosine(10, 10, 110) == pytest.approx(1.0)
    assert warmup_cosine(60, 10, 110) == pytest.approx(0.55)  # half-way: 0.1 + 0.9 * 0.5
    assert warmup_cosine(110, 10, 110) == pytest.approx(0.1)


def test_warmup_cosine_follows_the_budget_further_along() -> None:
    # Time half spent at step 10 of 110: the decay is half-way although the step horizon has barely begun.
    assert warmup_cosine(10, 10, 110, time_fraction=0.5) == pytest.approx(0.55)
    assert warmup_cosine(10, 10, 110, time_fraction=1.0) == pytest.approx(0.1)
    # Steps further along than time: the step progress (0.5) wins over 0.2.
    assert warmup_cosine(60, 10, 110, time_fraction=0.2) == pytest.approx(0.55)
    # Warm-up ignores time.
    assert warmup_cosine(4, 10, 110, time_fraction=0.9) == pytest.approx(0.5)


def test_batches_group_by_length_and_cover_each_example_once_per_pass() -> None:
    lengths = [9, 3, 14, 1, 16, 6, 11, 4, 13, 2, 8, 15, 5, 12, 7, 10]
    examples = [([5] * n, [1] * n) for n in lengths]
    batches = _batches(examples, size=4, seed=0, bucket_batches=4)
    first_pass = [next(batches) for _ in range(4)]
    # one pool of 16 sorted by length, cut into 4 batches of neighbours (order of batches shuffled)
    got = sorted(sorted(int((row >= 0).sum()) for row in ids) for ids, _ in first_pass)
    assert got == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16]]
    ids, mask = first_pass[0]
    assert ids.shape[0] == 4 and ids.shape[1] == int((ids >= 0).sum(dim=1).max())  # padded to the longest only
    assert int(mask.sum()) == int((ids >= 0).sum())


def test_behaviour_cloning_learns_the_echo_task(tiny_model_dir: Path) -> None:
    torch.manual_seed(0)
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    chat = ChatFormat(tokenizer)
    demos = [demonstrate(t, gold_expert, 0.0, random.Random(0)) for t in echo_tasks(16)]
    examples = [demonstration_ids(d, chat) for d in demos]
    result = behaviour_cloning(model, examples, episodes_per_batch=8, learning_rate=3e-3, warmup_steps=5,
                               max_steps=150, loss_threshold=0.05, max_time_s=120, seed=0)
    assert result["stopped_by"] == "loss_threshold" and result["loss"] < 0.05
    # greedy decoding now says the shown word
    ids = torch.tensor([chat.prompt_ids("Say the word: candle")])
    model.eval()
    for _ in range(3):
        next_id = model(input_ids=ids).logits[0, -1].argmax()
        ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
    assert chat.decode_action(ids[0, -3:].tolist()) == "say candle"


def test_behaviour_cloning_records_the_loss_curve(tiny_model_dir: Path) -> None:
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    chat = ChatFormat(tokenizer)
    examples = [demonstration_ids(demonstrate(t, gold_expert, 0.0, random.Random(0)), chat) for t in echo_tasks(8)]
    seen: list[float] = []
    result = behaviour_cloning(model, examples, episodes_per_batch=4, learning_rate=3e-3, warmup_steps=1,
                               max_steps=7, loss_threshold=0.0, max_time_s=120, seed=0,
                               on_step=lambda step, loss: seen.append(loss), curve_every=3)
    # the moving average after steps 3 and 6 (not 7: the curve samples every third step)
    assert result["steps"] == 7 and result["loss_curve"] == [round(seen[2], 4), round(seen[5], 4)]


def test_behaviour_cloning_ends_with_the_moving_average_of_its_weights(tiny_model_dir: Path) -> None:
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    chat = ChatFormat(tokenizer)
    examples = [demonstration_ids(demonstrate(t, gold_expert, 0.0, random.Random(0)), chat) for t in echo_tasks(8)]
    after: list[list[torch.Tensor]] = []
    behaviour_cloning(model, examples, episodes_per_batch=4, learning_rate=3e-3, warmup_steps=1, max_steps=3,
                      loss_threshold=0.0, max_time_s=120, seed=0, ema_decay=0.5,
                      on_step=lambda step, loss: after.append([p.detach().clone() for p in model.parameters()]))
    w1, w2, w3 = after
    # avg = w1, then 0.5 * w1 + 0.5 * w2, then 0.5 * (0.5 * w1 + 0.5 * w2) + 0.5 * w3
    for final, a, b, c in zip(model.parameters(), w1, w2, w3, strict=True):
        assert torch.allclose(final, 0.25 * a + 0.25 * b + 0.5 * c, atol=1e-6)
    assert not all(torch.equal(final, c) for final, c in zip(model.parameters(), w3))  # not the last step's


def test_behaviour_cloning_rejects_an_ema_decay_outside_0_1(tiny_model_dir: Path) -> None:
    model, _ = load_model_and_tokenizer(str(tiny_model_dir))
    with pytest.raises(ValueError, match="sft.ema_decay must be in"):
        behaviour_cloning(model, [([1, 2], [0, 1])], episodes_per_batch=1, learning_rate=1e-3, warmup_steps=1,
                          max_steps=1, loss_threshold=0.0, max_time_s=1, ema_decay=1.0)


def test_demonstration_tasks_from_a_generator_are_fresh_training_worlds() -> None:
    from rlvr_gym_agents.config import load_config
    from rlvr_gym_agents.warmstart.demonstrations import demonstration_tasks

    train = list(load_suite("textworld/starter-train"))[:50]
    config = load_config(None, ["env.env_id=textworld/ALFWorld-Starter-v0", "sft.num_demos=30",
                                "sft.demo_tasks=rlvr_gym_textworld:generate_tasks"])
    tasks = demonstration_tasks(config.sft, config.env, train)
    assert tasks is not None and len(tasks) == 30
    assert all(t.split == "train" and t.gold for t in tasks)
    # seeds continue after the train suite's, so no demonstrated world repeats one of its tasks
    assert min(t.options["seed"] for t in tasks) == 50 and not {t.id for t in tasks} & {t.id for t in train}
    test_ids = {t.id for t in load_suite("textworld/starter-test")}
    assert not {t.id for t in tasks} & test_ids
    plain = load_config(None, ["sft.num_demos=30"])
    assert demonstration_tasks(plain.sft, plain.env, train) is train
    bad = load_config(None, ["sft.demo_tasks=generate_tasks"])
    with pytest.raises(ValueError, match="package.module:function"):
        demonstration_tasks(bad.sft, bad.env, train)


def test_invalid_mistakes_are_rejected_never_imitated_and_followed_by_recovery() -> None:
    from rlvr_gym_textworld import impossible_actions

    tasks = list(load_suite("textworld/easy-train"))[:20]
    demos = [demonstrate(task, oracle_expert, 0.0, random.Random(i), invalid_rate=0.3,
                         invalid_actions=impossible_actions) for i, task in enumerate(tasks)]
    replayed, rejected = 0, 0
    for task, demo in zip(tasks, demos):
        env = rlvr_gym.make(task.env_id)
        env.reset(options={"task": task})
        for action, trained, seen in zip(demo.actions, demo.trained, demo.observations[1:]):
            observation, *_, info = env.step(action)
            assert observation == seen  # the env's feedback is what the demonstration holds
            failure = info.get("failure")
            kinds = set() if failure is None else {failure.kind.value, failure.details.get("step_failure", {}).get("kind")}
            assert ("invalid_action" in kinds) == (not trained)  # exactly the injected actions are rejected
            rejected += not trained
            replayed += 1
        env.close()
    assert 0.15 < rejected / replayed < 0.45
    assert sum(d.success for d in demos) >= 12  # the expert recovers after each rejected action


def test_mistakes_come_from_the_mistake_actions_hook() -> None:
    env = rlvr_gym.make("testing/Echo-v0")
    env.reset(seed=0)
    info = {"admissible_actions": ["say info"]}
    actions = {sft_action(env, info, lambda _: "say apple", random.Random(seed), 0.5, 0.0, None, True,
                          lambda _: ["say hook", "say apple"]) for seed in range(40)}
    assert actions == {("say hook", True, True), ("say apple", True, False)}  # the hook's list, never the expert's own action
    without = {sft_action(env, info, lambda _: "say apple", random.Random(seed), 0.5, 0.0, None, False)[0]
               for seed in range(40)}
    assert without == {"say info", "say apple"}  # no hook: info["admissible_actions"]
    env.close()


def test_tool_demonstrations_with_plausible_mistakes_and_env_kwargs() -> None:
    from rlvr_gym_agents.config import EnvConfig, SFTConfig
    from rlvr_gym_agents.warmstart.demonstrations import collect_demonstrations
    from rlvr_gym_tools.suites import generate_easy_tasks

    sft = SFTConfig(expert="oracle", mistake_rate=0.3, train_on_mistakes=True,
                    mistake_actions="rlvr_gym_tools.multihop:plausible_mistakes")
    env = EnvConfig(env_id="tools/MultiHopQA-v0", kwargs={"describe_tools_in_prompt": False})
    tasks = generate_easy_tasks(env.env_id, "train", 40, 500)
    demos = collect_demonstrations(sft, env, tasks, 40, seed=0)
    assert all("Tools:" not in d.observations[0] for d in demos)  # env.kwargs reached the demonstrations' envs
    clean = collect_demonstrations(SFTConfig(expert="oracle", mistake_rate=0.0), env, tasks, 40, seed=0)
    assert all(d.success for d in clean)
    noisy = [d for d, c in zip(demos, clean) if d.actions != c.actions]
    assert len(noisy) >= 10  # mistakes were injected, and imitated (train_on_mistakes)
    assert all(all(d.trained) for d in demos)
    recovered = [d for d, c in zip(demos, clean) if d.success and len(d.actions) > len(c.actions)]
    assert recovered  # a wrong lookup followed by the oracle's recovery still solves the task
    assert 0.3 < sum(d.success for d in demos) / len(demos) < 0.95  # wrong answers end some episodes unsolved


def test_invalid_mistakes_slip_on_the_experts_verb() -> None:
    env = rlvr_gym.make("testing/Echo-v0")
    env.reset(seed=0)
    rejected = ["say x", "shout y", "say z"]
    actions = {
        sft_action(env, {"admissible_actions": []}, lambda _: "say apple", random.Random(seed), 0.0, 1.0,
                   lambda _: rejected, False)
        for seed in range(40)
    }
    assert actions == {("say x", False, False), ("say z", False, False)}  # the expert's verb, never imitated
    other = sft_action(env, {}, lambda _: "whisper apple", random.Random(0), 0.0, 1.0, lambda _: rejected, False)
    assert other[0] in rejected and not other[1]  # no rejected action on that verb: any rejected one
    expert = sft_action(env, {}, lambda _: "say apple", random.Random(0), 0.0, 1.0, lambda _: [], False)
    assert expert == ("say apple", True, False)  # nothing to reject: the expert's action
    env.close()


def test_sft_rates_are_checked() -> None:
    from rlvr_gym_agents.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="sft.invalid_actions"):
        load_config(None, ["sft.invalid_rate=0.1"])
    with pytest.raises(ConfigError, match="sum below 1"):
        load_config(None, ["sft.invalid_rate=0.6", "sft.mistake_rate=0.5",
                           "sft.invalid_actions=rlvr_gym_textworld:impossible_actions"])


def test_model_corpus_adds_the_failure_messages_demonstrations_never_show() -> None:
    from rlvr_gym_agents.config import load_config
    from rlvr_gym_agents.warmstart.demonstrations import collect_demonstrations
    from rlvr_gym_agents.warmstart.tiny import extra_corpus

    config = load_config(None, ["env.env_id=textworld/ALFWorld-Starter-v0", "model.corpus_episodes=20",
                                "sft.expert=oracle", "sft.mistake_rate=0.25"])
    demos = [text for d in collect_demonstrations(config.sft, config.env, None, 20, 0) for text in d.observations]
    assert extra_corpus(config.model, config.env.env_id, 0) == []
    assert not any(text.startswith("There is no ") for text in demos)  # admissible mistakes never fail
    with_corpus = load_config(None, ["env.env_id=textworld/ALFWorld-Starter-v0", "model.corpus_episodes=20",
                                     "model.corpus=rlvr_gym_textworld:corpus_texts"])
    extra = extra_corpus(with_corpus.model, with_corpus.env.env_id, 0)
    assert any(text.startswith("There is no ") for text in extra)
    with pytest.raises(ValueError, match="model.corpus"):
        extra_corpus(load_config(None, ["model.corpus=corpus_texts"]).model, "x", 0)


def test_time_fraction_only_when_the_time_cap_will_bind() -> None:
    from rlvr_gym_agents.warmstart.sft import time_fraction

    assert time_fraction(10.0, 0, 2000, 420.0) == 0.0  # no step yet: nothing to project
    # a slow start (0.5 s/step -> 1,000 s projected) inside the first tenth of the steps is not projected
    assert time_fraction(25.0, 50, 2000, 420.0) == 0.0
    assert time_fraction(50.0, 199, 2000, 420.0) == 0.0
    assert time_fraction(50.0, 200, 2000, 420.0) == pytest.approx(50.0 / 420.0)  # from 200 steps it counts
    assert time_fraction(16.0, 100, 2000, 420.0) == 0.0  # 0.16 s/step -> 320 s projected, under the cap
    assert time_fraction(250.0, 1000, 2000, 420.0) == pytest.approx(250.0 / 420.0)  # 500 s projected: time counts
    assert time_fraction(500.0, 1000, 2000, 420.0) == 1.0  # past the cap: clipped


def test_sandboxed_demonstrations_run_on_threads_and_do_not_depend_on_the_thread_count() -> None:
    """code/Synth-v0 declares concurrent steps: its demonstrations are judged on step threads, each with its own
    mistake generator, so 0 (one after another), 1 and 4 threads give the same episodes in task order (mistakes and slips included)."""
    from rlvr_gym_agents.config import load_config
    from rlvr_gym_agents.warmstart.demonstrations import collect_demonstrations

    overrides = ["env.env_id=code/Synth-v0", "sft.expert=oracle", "sft.mistake_rate=0.4", "sft.invalid_rate=0.2",
                 "sft.invalid_actions=rlvr_gym_code:malformed_programs"]
    runs = {}
    for threads in (0, 1, 4):
        config = load_config(None, [*overrides, f"env.step_threads={threads}"])
        assert config.env.step_thread_count() == threads
        demos = collect_demonstrations(config.sft, config.env, None, 12, 5)
        runs[threads] = [(d.observations, d.actions, d.trained, d.success) for d in demos]
    assert runs[0] == runs[1] == runs[4]
    assert len({obs[0] for obs, *_ in runs[1]}) == 12  # 12 different tasks, in task order on both
    assert any(not all(trained) for _, _, trained, _ in runs[1])  # some mistakes were injected
    assert any(len(actions) > 1 for _, actions, _, _ in runs[1])  # and judged: feedback, then the recovery


def test_in_memory_envs_keep_one_mistake_generator_in_order() -> None:
    """The text world does not step on threads: its demonstrations come from one generator seeded by the seed, as
    before threading existed (the quickstart's warm start is unchanged)."""
    import random

    from rlvr_gym_agents.config import load_config
    from rlvr_gym_agents.warmstart.demonstrations import collect_demonstrations, demonstrate, load_expert

    from rlvr_gym import Task

    config = load_config(None, ["env.env_id=textworld/ALFWorld-Starter-v0", "sft.expert=oracle",
                                "sft.mistake_rate=0.3"])
    assert config.env.step_thread_count() == 0
    demos = collect_demonstrations(config.sft, config.env, None, 4, 3)
    rng = random.Random(3)
    expected = [demonstrate(Task(id=f"demo-{i}", env_id=config.env.env_id, options={"seed": 3_000_000 + i}),
                            load_expert("oracle"), 0.3, rng) for i in range(4)]
    assert [d.actions for d in demos] == [d.actions for d in expected]


def test_cross_entropy_moves_the_cpu_batch_to_the_models_device() -> None:
    """The batches are built on the CPU; a model on another device (here ``meta``, which refuses CPU inputs as CUDA
    does: the first device check failed so on an H200) gets them on its own device."""

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4, device="meta")
            self.head = torch.nn.Linear(4, 10, device="meta")

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, use_cache: bool) -> object:
            assert attention_mask.device == input_ids.device
            return type("Out", (), {"logits": self.head(self.embed(input_ids))})()

    ids, roles = torch.tensor([[1, 2, 3, -1]]), torch.tensor([[0, 1, 1, 0]])
    loss, _ = _cross_entropy(Tiny(), ids, roles)
    assert loss.device.type == "meta" and loss.shape == ()


class _PositionLogits(torch.nn.Module):
    """Logits ``[0, ln(t + 1)]`` at position ``t`` over a 2-token vocabulary: p(id 1) = (t + 1) / (t + 2)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(()))

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, use_cache: bool) -> object:
        t = torch.arange(input_ids.shape[1], dtype=torch.float32)
        logits = torch.stack([torch.zeros_like(t), self.scale * torch.log(t + 1)], dim=-1)
        return type("Out", (), {"logits": logits.expand(input_ids.shape[0], -1, -1)})()


def test_cross_entropy_splits_action_and_context_targets_by_role() -> None:
    # targets at positions 1..5: 0 (context), 1 (action), 1 (mistake: neither), 1 (context), padding (neither);
    # predicted from positions 0..4 with p(1) = 1/2, 2/3, 3/4, 4/5
    ids = torch.tensor([[1, 0, 1, 1, 1, -1]])
    roles = torch.tensor([[CONTEXT, CONTEXT, ACTION, UNTRAINED_ACTION, CONTEXT, CONTEXT]])
    action, context = _cross_entropy(_PositionLogits(), ids, roles, with_context=True)
    assert action.item() == pytest.approx(-math.log(2 / 3), abs=1e-6)
    assert context.item() == pytest.approx((-math.log(1 / 2) - math.log(4 / 5)) / 2, abs=1e-6)
    action_only, zero = _cross_entropy(_PositionLogits(), ids, roles)
    assert action_only.item() == pytest.approx(action.item()) and zero.item() == 0.0


def test_context_loss_weight_trains_the_context_and_reports_the_action_loss(tiny_model_dir: Path) -> None:
    _, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    chat = ChatFormat(tokenizer)
    examples = [demonstration_ids(demonstrate(t, gold_expert, 0.0, random.Random(0)), chat) for t in echo_tasks(8)]
    batch = next(_batches(examples, 8, 0))
    before, after = {}, {}
    for weight in (0.0, 1.0):
        torch.manual_seed(0)
        model, _ = load_model_and_tokenizer(str(tiny_model_dir))
        with torch.no_grad():
            before[weight] = [x.item() for x in _cross_entropy(model, *batch, with_context=True)]
        behaviour_cloning(model, examples, episodes_per_batch=8, learning_rate=3e-3, warmup_steps=1, max_steps=30,
                          loss_threshold=0.0, max_time_s=120, seed=0, context_loss_weight=weight)
        with torch.no_grad():
            after[weight] = [x.item() for x in _cross_entropy(model, *batch, with_context=True)]
    assert before[0.0] == before[1.0]  # the same initial model
    assert after[0.0][0] < 0.5 * before[0.0][0] and after[1.0][0] < 0.5 * before[1.0][0]  # actions learnt either way
    assert after[1.0][1] < 0.5 * after[0.0][1]  # only the weighted run models the prompts and observations
    # a step reports the actions' loss (what the threshold and the curve read), not the weighted sum it minimises
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with torch.no_grad():
        action, _ = _cross_entropy(model, *batch, with_context=True)
    assert _optimizer_step(model, optimizer, *batch, None, 1.0) == pytest.approx(action.item(), rel=1e-5)
    for bad in (-0.5, math.inf):
        with pytest.raises(ValueError, match="context_loss_weight must be finite and >= 0"):
            behaviour_cloning(model, examples, episodes_per_batch=1, learning_rate=1e-3, warmup_steps=1, max_steps=1,
                              loss_threshold=0.0, max_time_s=1, context_loss_weight=bad)


def test_a_batch_without_imitated_actions_leaves_the_weights_finite(tiny_model_dir: Path) -> None:
    """An episode of injected mistakes only has no action target: its loss is NaN, but the step must not write NaN
    into the weights, with or without the context loss."""
    _, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    chat = ChatFormat(tokenizer)
    ids, roles = demonstration_ids(Demonstration(["Say the word: apple", "Wrong."], ["say bread"], [False], False), chat)
    for weight in (0.0, 1.0):
        model, _ = load_model_and_tokenizer(str(tiny_model_dir))
        value = _optimizer_step(model, torch.optim.AdamW(model.parameters(), lr=1e-3), torch.tensor([ids]),
                                torch.tensor([roles]), None, weight)
        assert math.isnan(value) and all(torch.isfinite(p).all() for p in model.parameters())


def test_behaviour_cloning_in_float16_steps_through_a_loss_scaler(tiny_model_dir: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Under float16 autocast each step's loss is scaled (the scaler's growth tracker counts 5 clean steps) and
    the weights still learn; bf16 gets no scaler."""
    import rlvr_gym_agents.warmstart.sft as sft_module

    made: list[torch.amp.GradScaler | None] = []
    original = sft_module.grad_scaler

    def spy(device: torch.device | str, dtype: str | None) -> torch.amp.GradScaler | None:
        made.append(original(device, dtype))
        return made[-1]

    monkeypatch.setattr(sft_module, "grad_scaler", spy)
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    chat = ChatFormat(tokenizer)
    examples = [demonstration_ids(demonstrate(t, gold_expert, 0.0, random.Random(0)), chat) for t in echo_tasks(8)]
    seen: list[float] = []
    result = behaviour_cloning(model, examples, episodes_per_batch=4, learning_rate=3e-3, warmup_steps=1, max_steps=5,
                               loss_threshold=0.0, max_time_s=120, seed=0, autocast_dtype="float16",
                               on_step=lambda step, loss: seen.append(loss))
    assert result["loss_scale"] == 2.0**16 and result["skipped_steps"] == 0
    scaler = made[-1]
    assert scaler is not None and scaler.state_dict()["_growth_tracker"] == 5 and scaler.get_scale() == 2.0**16
    assert seen[-1] < seen[0]
    behaviour_cloning(model, examples, episodes_per_batch=4, learning_rate=3e-3, warmup_steps=1, max_steps=1,
                      loss_threshold=0.0, max_time_s=120, seed=0, autocast_dtype="bfloat16")
    assert made[-1] is None


def test_an_sft_step_in_float16_unscales_before_clipping(tiny_model_dir: Path) -> None:
    """One clipped SGD step of the warm start in float16 with the loss scaler moves the weights as in float32 (if the
    gradients were clipped while still scaled by 2^16 the step would be ~1e-5 of it)."""
    from rlvr_gym_agents.update.precision import grad_scaler
    from rlvr_gym_agents.warmstart.sft import _optimizer_step

    _model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir))
    chat = ChatFormat(tokenizer)
    examples = [demonstration_ids(demonstrate(t, gold_expert, 0.0, random.Random(0)), chat) for t in echo_tasks(4)]
    ids = torch.nn.utils.rnn.pad_sequence([torch.tensor(i) for i, _ in examples], batch_first=True, padding_value=-1)
    roles = torch.nn.utils.rnn.pad_sequence([torch.tensor(r) for _, r in examples], batch_first=True)
    moves = []
    for dtype in (None, "float16"):
        copy = load_model_and_tokenizer(str(tiny_model_dir))[0]
        before = [p.detach().clone() for p in copy.parameters()]
        _optimizer_step(copy, torch.optim.SGD(copy.parameters(), lr=1e-2), ids, roles, dtype, 0.0,
                        grad_scaler("cpu", dtype))
        moves.append(torch.cat([(p.detach() - b).reshape(-1) for p, b in zip(copy.parameters(), before)]))
    assert float(moves[0].norm()) > 1e-4
    assert float((moves[1] - moves[0]).norm() / moves[0].norm()) < 0.05


def test_corpus_from_demos_collects_the_demonstrations_once_and_trains_the_tokenizer_on_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``model.corpus_from_demos``: one collection of ``sft.num_demos`` episodes serves the tokenizer and the warm
    start (no separate corpus or held-out episodes); every demonstrated text encodes as the tokenizer learnt it."""
    import rlvr_gym_agents.warmstart.demonstrations as demonstrations_module
    import rlvr_gym_agents.warmstart.sft as sft_module
    import rlvr_gym_agents.warmstart.tiny as tiny_module
    from rlvr_gym_agents.config import ConfigError, load_config
    from rlvr_gym_agents.train import train

    calls: list[int] = []
    collected: list[Demonstration] = []

    def counted(sft, env, tasks, num_episodes, seed):  # type: ignore[no-untyped-def]
        calls.append(num_episodes)
        demos = demonstrations_module.collect_demonstrations(sft, env, tasks, num_episodes, seed)
        collected.extend(demos)
        return demos

    monkeypatch.setattr(sft_module, "collect_demonstrations", counted)
    monkeypatch.setattr(tiny_module, "collect_demonstrations", counted)
    recipe = Path(__file__).resolve().parents[2] / "agents" / "recipes" / "quickstart.yaml"
    overrides = [f"output.dir={tmp_path / 'run'}", "output.progress=false", "model.tokenizer=bpe",
                 "model.vocab_size=400", "model.corpus_from_demos=true", "sft.num_demos=12", "sft.max_steps=2",
                 "train.num_steps=1", "train.tasks_per_step=1", "train.group_size=2", "eval.num_tasks=2", "eval.k=1",
                 "eval.greedy=false"]
    train(load_config(recipe, overrides))
    assert calls == [12]  # the warm start's demonstrations only: no corpus_episodes, no held-out episodes
    tokenizer = load_model_and_tokenizer(str(tmp_path / "run" / "tiny_init"))[1]
    merged = [text for demo in collected for text in demo.observations + demo.actions]
    assert all(tokenizer.decode(tokenizer(t, add_special_tokens=False)["input_ids"]) == t for t in merged)
    assert len(tokenizer) > 262 + 6  # merges were learnt from the demonstrations' text
    with pytest.raises(ConfigError, match="corpus_from_demos"):
        load_config(recipe, ["model.corpus_from_demos=true"])  # the quickstart's word tokenizer
    with pytest.raises(ConfigError, match="corpus_from_demos"):
        load_config(recipe, ["model.corpus_from_demos=true", "model.tokenizer=bpe", "sft.enabled=false"])


def test_demonstration_variants_rewrite_each_demo_and_keep_its_flags() -> None:
    from rlvr_gym_agents.config import ConfigError, load_config
    from rlvr_gym_agents.warmstart.demonstrations import demonstration_variants

    demo = Demonstration(observations=["page [12]", "page [34]"], actions=['click("12")', 'click("34")'],
                         trained=[False, True], success=True)
    config = load_config(None, ["sft.demo_variants=tests.rlvr_gym_agents.test_sft:_shout", "sft.variants_per_demo=2"])
    variants = demonstration_variants(config.sft, [demo, demo], seed=0)
    assert len(variants) == 4 and all(v.trained == [False, True] and v.success for v in variants)
    assert variants[0].observations == ["PAGE [12]", "PAGE [34]"] and variants[0].actions == ['CLICK("12")', 'CLICK("34")']
    assert demonstration_variants(load_config(None, []).sft, [demo], seed=0) == []
    broken = load_config(None, ["sft.demo_variants=tests.rlvr_gym_agents.test_sft:_drop_last", "sft.variants_per_demo=1"])
    with pytest.raises(ValueError, match="changed an episode's length"):
        demonstration_variants(broken.sft, [demo], seed=0)
    for bad in (["sft.variants_per_demo=2"], ["sft.demo_variants=a.b:c"], ["sft.demo_variants=a.b:c", "sft.variants_per_demo=-1"]):
        with pytest.raises(ConfigError, match="variants_per_demo"):
            load_config(None, bad)


def _shout(observations: list[str], actions: list[str], rng: random.Random) -> tuple[list[str], list[str]]:
    return [o.upper() for o in observations], [a.upper() for a in actions]


def _drop_last(observations: list[str], actions: list[str], rng: random.Random) -> tuple[list[str], list[str]]:
    return observations[:-1], actions
