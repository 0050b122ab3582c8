"""Recipes, overrides and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from rlvr_gym_agents.config import ConfigError, TrainConfig, load_config

RECIPES = Path(__file__).resolve().parents[2] / "agents" / "recipes"


def test_defaults_without_a_recipe() -> None:
    config = load_config(None)
    assert isinstance(config, TrainConfig) and config.seed == 0
    assert config.rollouts_per_step == config.train.tasks_per_step * config.train.group_size


def test_a_new_recipe_gets_byte_level_bpe_and_the_text_world_recipes_keep_words() -> None:
    assert (load_config(None).model.tokenizer, load_config(None).model.vocab_size) == ("bpe", 2048)
    kinds = {name: load_config(RECIPES / f"{name}.yaml").model.tokenizer
             for name in ("quickstart", "textworld-tree", "tools-tree", "rtl-tree", "web-tree")}
    assert kinds == {"quickstart": "word", "textworld-tree": "word", "tools-tree": "bpe", "rtl-tree": "bpe",
                     "web-tree": "bpe"}


def test_overrides_reach_nested_sections_with_yaml_types() -> None:
    config = load_config(RECIPES / "quickstart.yaml",
                         ["seed=2", "train.num_steps=3", "algorithm.loss.clip_high=0.3", "eval.greedy=false",
                          "env.max_turns=5", "model.path_or_id=null"])
    assert config.seed == 2 and config.train.num_steps == 3
    assert config.algorithm.loss.clip_high == pytest.approx(0.3)
    assert config.eval.greedy is False and config.env.max_turns == 5 and config.model.path_or_id is None
    assert config.output.dir == "runs/quickstart-seed2"  # derived from the seed


def test_ints_are_accepted_for_floats() -> None:
    assert load_config(None, ["train.learning_rate=1"]).train.learning_rate == 1.0


@pytest.mark.parametrize(("override", "message"), [
    ("train.num_stepz=3", "Did you mean train.num_steps"),
    ("trian.num_steps=3", "unknown config key 'trian'"),
    ("algorithm.loss.clip_hi=0.3", "algorithm.loss.clip_hi"),
    ("train.num_steps", "key=value"),
    ("train.num_steps=many", "train.num_steps must be int"),
    ("eval.greedy=3", "eval.greedy must be bool"),
    ("algorithm.estimator=ppo", "grpo, drgrpo or rloo"),
    ("algorithm.loss.name=nope", "Unknown loss"),
    ("train.group_size=1", "group_size"),
    ("eval.num_tasks=0", "eval.num_tasks and eval.k must be >= 1"),
    ("eval.k=0", "eval.num_tasks and eval.k must be >= 1"),
    ("seed.x=1", "seed must be int"),
    ("algorithm.micro_batch_tokens=0", "micro_batch_tokens must be >= 1"),
    ("algorithm.min_shared_tokens=0", "min_shared_tokens must be >= 1"),
    ("sft.ema_decay=1.5", "sft.ema_decay must be in"),
    ("sft.mistake_streak=1.5", "sft.mistake_streak must be in"),
    ("sft.mistake_streak=-0.1", "sft.mistake_streak must be in"),
    ("sft.context_loss_weight=-0.1", "sft.context_loss_weight must be finite and >= 0"),
    ("sft.context_loss_weight=.inf", "sft.context_loss_weight must be finite and >= 0"),
    ("model.tokenizer=char", "model.tokenizer must be bpe or word"),
    ("model.vocab_size=100", "model.vocab_size >= 262"),
    ("env.kwargs=3", "env.kwargs must be a mapping"),
    ("env.kwargs.max_turns=3", "without max_turns"),
])
def test_bad_overrides_name_the_problem(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_unknown_key_in_a_recipe_file(tmp_path: Path) -> None:
    recipe = tmp_path / "bad.yaml"
    recipe.write_text("train:\n  num_steps: 3\n  lr: 0.1\n")
    with pytest.raises(ConfigError, match="unknown config key 'train.lr'"):
        load_config(recipe)


def test_missing_recipe() -> None:
    with pytest.raises(FileNotFoundError, match="recipe"):
        load_config("no/such/recipe.yaml")


@pytest.mark.parametrize("name", ["quickstart.yaml", "qwen2.5-0.5b-textworld.yaml", "code-tiny.yaml", "rtl-tiny.yaml",
                                  "tools-tiny.yaml"])
def test_shipped_recipes_load(name: str) -> None:
    load_config(RECIPES / name)


def test_tuple_keys_take_yaml_lists_with_typed_items() -> None:
    config = load_config(None, ["env.remote=[textworld/*, tools/*]", "algorithm.loss.clip_cov_bounds=[1, 4.5]"])
    assert config.env.remote == ("textworld/*", "tools/*") and config.env.num_workers == 0
    assert config.algorithm.loss.clip_cov_bounds == (1.0, 4.5)
    assert load_config(None, ["env.remote=web/*"]).env.remote == ("web/*",)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("env.remote=[1]", r"env.remote\[0\] must be str"),
        ("algorithm.loss.clip_cov_bounds=[1]", "must be a list of 2 items"),
        ("env.remote={a: 1}", "env.remote must be a list"),
    ],
)
def test_bad_tuple_values_name_the_problem(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_cluster_section_reads_the_async_key_and_checks_its_values():
    config = load_config(None, ["cluster.rollout_workers=2", "cluster.learners=2", "cluster.async=true",
                                "cluster.max_staleness=2"])
    assert (config.cluster.rollout_workers, config.cluster.learners) == (2, 2)
    assert config.cluster.asynchronous and config.cluster.max_staleness == 2
    with pytest.raises(ConfigError, match="rollout_workers >= 1"):
        load_config(None, ["cluster.async=true"])
    with pytest.raises(ConfigError, match="learners >= 1"):
        load_config(None, ["cluster.learners=0"])
    with pytest.raises(ConfigError, match="Did you mean cluster.async"):
        load_config(None, ["cluster.asynch=true"])


def test_cluster_learner_strategy_defaults_to_ddp_and_fsdp2_needs_two_learners() -> None:
    assert load_config(None).cluster.learner_strategy == "ddp"
    config = load_config(None, ["cluster.learners=2", "cluster.learner_strategy=fsdp2"])
    assert config.cluster.learner_strategy == "fsdp2"
    with pytest.raises(ConfigError, match="learner_strategy must be ddp or fsdp2, got 'zero3'"):
        load_config(None, ["cluster.learners=2", "cluster.learner_strategy=zero3"])
    with pytest.raises(ConfigError, match="set cluster.learners >= 2"):
        load_config(None, ["cluster.learner_strategy=fsdp2"])


def test_cluster_rollout_timeout_is_checked() -> None:
    assert load_config(None).cluster.rollout_timeout_s == 600.0
    assert load_config(None, ["cluster.rollout_timeout_s=null"]).cluster.rollout_timeout_s is None
    assert load_config(None, ["cluster.rollout_timeout_s=2.5"]).cluster.rollout_timeout_s == 2.5
    for bad in ("0", "-1", ".nan"):
        with pytest.raises(ConfigError, match="rollout_timeout_s must be > 0 seconds"):
            load_config(None, [f"cluster.rollout_timeout_s={bad}"])


def test_cluster_worker_threads_is_checked() -> None:
    assert load_config(None).cluster.worker_threads is None
    assert load_config(None, ["cluster.worker_threads=1"]).cluster.worker_threads == 1
    for bad in ("0", "-2"):
        with pytest.raises(ConfigError, match="worker_threads must be >= 1"):
            load_config(None, [f"cluster.worker_threads={bad}"])


@pytest.mark.parametrize(("overrides", "threads"), [
    (["env.env_id=textworld/ALFWorld-Easy-v0"], 0),  # in-memory: the GIL leaves nothing to gain
    (["env.env_id=code/HumanEval-v0"], 4),  # steps wait on sandboxes
    (["env.env_id=rtl/VerilogEval-v0"], 4),
    (["env.env_id=code/HumanEval-v0", "env.num_workers=2"], 2),  # Ray workers: one thread each
    (["env.env_id=code/HumanEval-v0", "env.step_threads=0"], 0),  # asked for
])
def test_env_step_threads_default_to_concurrent_steps_for_sandboxed_envs(overrides: list[str], threads: int) -> None:
    from rlvr_gym_agents.train import step_executor_of

    with step_executor_of(load_config(None, overrides)) as executor:
        assert (0 if executor is None else executor._max_workers) == threads  # type: ignore[attr-defined]


def test_env_kwargs_reach_every_env_the_run_makes(tmp_path: Path) -> None:
    import rlvr_gym_tools  # noqa: F401  (registers the tools family)

    from rlvr_gym.registry import make
    recipe = tmp_path / "r.yaml"
    recipe.write_text("env:\n  env_id: tools/MultiHopQA-v0\n  kwargs:\n    describe_tools_in_prompt: false\n",
                      encoding="utf-8")
    config = load_config(recipe, ["env.kwargs.enable_python=false"])
    assert config.env.kwargs == {"describe_tools_in_prompt": False, "enable_python": False}
    env = config.env.factory(make)("tools/MultiHopQA-v0")
    observation, _ = env.reset(seed=0)
    assert "Question:" in observation and "Tools:" not in observation and "python" not in env.tools
    listed = config.env.factory(make)("tools/MultiHopQA-v0", describe_tools_in_prompt=True)  # a call's own wins
    assert "Tools:" in listed.reset(seed=0)[0]
    assert load_config(None).env.factory(make) is make  # no kwargs: make itself
    echo = config.env.factory(make)("testing/Echo-v0")  # another env id (a mixed suite): built without them
    assert echo.reset(seed=0)[0]
    recipe.write_text("env:\n  env_id: tools/MultiHopQA-v0\n  kwargs:\n    # none yet\n", encoding="utf-8")
    assert load_config(recipe).env.kwargs == {}  # an empty section


def test_the_training_run_builds_its_envs_with_env_kwargs() -> None:
    from rlvr_gym_agents.train import env_factory_of
    config = load_config(None, ["env.env_id=tools/MultiHopQA-v0", "env.kwargs.describe_tools_in_prompt=false"])
    with env_factory_of(config) as make:
        assert "Tools:" not in make("tools/MultiHopQA-v0").reset(seed=0)[0]
        assert "Tools:" in make("tools/MultiHopQA-v0", describe_tools_in_prompt=True).reset(seed=0)[0]
        make("testing/Echo-v0").reset(seed=0)  # other ids: without the kwargs (Echo takes none of them)


def test_env_kwargs_the_env_does_not_take_are_refused_before_any_work() -> None:
    from rlvr_gym_agents.train import check_recipe_inputs
    config = load_config(None, ["env.env_id=tools/MultiHopQA-v0", "env.test_suite=tools/multihop_easy_test",
                                "eval.num_tasks=2", "env.kwargs.describe_tool=false"])
    with pytest.raises(ConfigError, match="env.kwargs .*describe_tool.* do not fit tools/MultiHopQA-v0"):
        check_recipe_inputs(config)
    refused = load_config(None, ["env.env_id=tools/MultiHopQA-v0", "env.test_suite=tools/multihop_easy_test",
                                 "eval.num_tasks=2", "env.kwargs.hops=0"])
    with pytest.raises(ConfigError, match="env.kwargs .*hops.* do not fit tools/MultiHopQA-v0: need hops >= 1"):
        check_recipe_inputs(refused)  # a value the env's constructor refuses
