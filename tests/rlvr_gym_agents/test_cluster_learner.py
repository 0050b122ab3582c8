"""The learner group (issue 27): 2 torch.distributed ranks (Ray actors, gloo on loopback) compute the update of 1,
holding whole replicas (``ddp``) or FSDP2 shards (``fsdp2``; its checkpoint loads in one process).

One Ray session for the module (starting Ray costs seconds); one learner group per strategy for the equality tests,
reset to the same weights before each case.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from agent_helpers import collect_rollouts
from rlvr_gym_agents.cli import train_main
from rlvr_gym_agents.cluster import LearnerGroup, shard_rows
from rlvr_gym_agents.cluster.faults import fault_summary
from rlvr_gym_agents.cluster.sync import resolve_backend
from rlvr_gym_agents.config import TrainConfig
from rlvr_gym_agents.policy import SamplingParams
from rlvr_gym_agents.policy.chat import ChatFormat
from rlvr_gym_agents.rollout.types import Trajectory
from rlvr_gym_agents.train import (
    _reference_model,
    build_optimizer,
    build_updater,
    load_policy,
    trainable_model,
    update_config,
)
from rlvr_gym_agents.update.ppo import PPOUpdater, ppo_update
from rlvr_gym_agents.update.precision import grad_scaler

from rlvr_gym import TaskSuite
from rlvr_gym.testing.toy import echo_tasks

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module")
def ray_session() -> Iterator[None]:
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    if started:
        ray.shutdown()


def _config(tiny_model_dir: Path, **loss: Any) -> TrainConfig:
    config = TrainConfig()
    config.model.path_or_id = str(tiny_model_dir)
    config.env.env_id = "testing/Echo-v0"
    config.train.group_size, config.train.learning_rate = 4, 3e-4  # the quickstart's RL rate
    config.rollout.max_new_tokens = 4
    config.algorithm.loss = dataclasses.replace(config.algorithm.loss, **loss)
    return config


@pytest.fixture(scope="module")
def batch(tiny_model_dir: Path) -> tuple[list[Trajectory], torch.Tensor]:
    """12 Echo episodes of the tiny model (3 tasks x 4) and fixed advantages in [-1, 1]."""
    config = _config(tiny_model_dir)
    policy = load_policy(config, str(tiny_model_dir))
    chat = ChatFormat.for_policy(policy, None)
    rollouts = collect_rollouts(config, policy, chat, echo_tasks(3, "train"), SamplingParams(1.0, 1.0, 4), 1)
    return rollouts.trajectories, torch.linspace(-1.0, 1.0, len(rollouts.trajectories))


def _group(tiny_model_dir: Path, strategy: str) -> LearnerGroup:
    config = _config(tiny_model_dir, kl_coef=0.1)
    return LearnerGroup(2, functools.partial(trainable_model, config, str(tiny_model_dir)),
                        functools.partial(build_optimizer, config), update_config(config), 0,
                        reference_factory=functools.partial(_reference_model, sft_dir=tiny_model_dir),
                        strategy=strategy, start_timeout_s=600)  # a shared, loaded 2-core machine starts actors slowly


@pytest.fixture(scope="module")
def group(ray_session: None, tiny_model_dir: Path) -> Iterator[LearnerGroup]:
    with _group(tiny_model_dir, "ddp") as learners:
        yield learners


@pytest.fixture(scope="module")
def fsdp_group(ray_session: None, tiny_model_dir: Path) -> Iterator[LearnerGroup]:
    with _group(tiny_model_dir, "fsdp2") as learners:
        yield learners


def _relative_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """||a - b|| / ||a|| over all parameters as one vector.

    Not per tensor: AdamW's first steps are about lr * sign(g) per entry, so an entry whose true gradient is zero (a
    key bias: softmax ignores a shift shared by all keys) moves by its float rounding noise; such a tensor differs by
    ~1e-4 relative between 1 rank and 2, and as much between 1 rank with two micro-batch splits (docs/results.md).
    """
    flat_a = torch.cat([t.double().reshape(-1) for t in a.values()])
    flat_b = torch.cat([b[k].double().reshape(-1) for k in a])
    return float((flat_a - flat_b).norm() / flat_a.norm())


CASES = {
    "token_mean, one micro-batch": {"algorithm.micro_batch_tokens": 4096},
    "token_mean, micro-batches of 16 tokens": {"algorithm.micro_batch_tokens": 16},
    "aepo, entropy statistics gathered over ranks": {"loss.name": "aepo", "loss.entropy_advantage_weight": 0.2,
                                                     "loss.top_entropy_quantile": 0.5,
                                                     "algorithm.micro_batch_tokens": 16},
    "seq_mean_token_mean, TIS correction": {"loss.aggregation": "seq_mean_token_mean",
                                            "loss.rollout_correction": "tis"},
    "Dr. GRPO constant, KL to a reference": {"loss.aggregation": "seq_mean_token_sum_norm", "loss.kl_coef": 0.1},
}


@pytest.mark.parametrize("case", list(CASES))
def test_two_ranks_compute_the_same_step_as_one(group: LearnerGroup, batch: tuple[list[Trajectory], torch.Tensor],
                                                tiny_model_dir: Path, case: str) -> None:
    """Acceptance of issue 27: after one update (2 epochs x 2 mini-batches) on the same batch from the same weights
    and optimizer state, the parameters of 2 ranks equal those of 1 within 1e-6 (relative), the metrics agree (the
    gradient norm too: AdamW's step is blind to a gradient's scale, a wrong normaliser is not) and the trainer's
    model (the mirror) holds rank 0's weights."""
    _check_same_step_as_one(group, batch, tiny_model_dir, case)


@pytest.mark.parametrize("case", list(CASES))
def test_two_fsdp2_ranks_compute_the_same_step_as_one(fsdp_group: LearnerGroup,
                                                      batch: tuple[list[Trajectory], torch.Tensor],
                                                      tiny_model_dir: Path, case: str) -> None:
    """``cluster.learner_strategy=fsdp2``: parameters and AdamW state sharded over 2 ranks (each rank a different
    number of forward and backward passes), gradients reduce-scattered by FSDP; the same step as 1 rank within 1e-6,
    the same metrics, and the whole weights and optimizer state gathered on rank 0 for the trainer."""
    assert fsdp_group.strategy == "fsdp2"
    _check_same_step_as_one(fsdp_group, batch, tiny_model_dir, case, one_rank_on_fresh_storage=True)


def test_an_fsdp2_checkpoint_written_from_rank_0_resumes_on_every_rank(
        fsdp_group: LearnerGroup, batch: tuple[list[Trajectory], torch.Tensor], tiny_model_dir: Path,
        tmp_path: Path) -> None:
    """The trainer's checkpoint of an fsdp2 group (its model holds the weights gathered on rank 0, its optimizer the
    gathered AdamW state) is the one-process format; a resumed run hands it to every rank (each keeps its shard of
    the weights and of AdamW's moments and step counts), and the next update is one process's second update. Each
    rank holds half of the parameters and of the AdamW state."""
    from rlvr_gym_agents.run_io import load_checkpoint, save_checkpoint

    trajectories, advantages = batch
    config = _config(tiny_model_dir)
    config.algorithm.micro_batch_tokens = 16
    policy = load_policy(config, str(tiny_model_dir))
    one = copy.deepcopy(policy.model)  # fresh storage, as FSDP2's gathered parameters (_check_same_step_as_one)
    initial = copy.deepcopy(one.state_dict())
    optimizer = build_optimizer(config, one)
    fsdp_group.config = update_config(config)
    fsdp_group.mirror, fsdp_group.mirror_optimizer = policy.model, build_optimizer(config, policy.model)
    fsdp_group.load_state(initial, build_optimizer(config, copy.deepcopy(one)).state_dict())
    expected = []
    for seed in (11, 12):
        torch.manual_seed(seed)
        ppo_update(one, optimizer, trajectories, advantages, update_config(config), None, 0)
        expected.append(copy.deepcopy(one.state_dict()))
    torch.manual_seed(11)
    fsdp_group.update(trajectories, advantages)
    fsdp_group.pull_optimizer_state()
    save_checkpoint(tmp_path / "checkpoint", policy.model, policy.tokenizer, fsdp_group.mirror_optimizer, 1,
                    torch.Generator())

    resumed = load_policy(config, str(tiny_model_dir)).model  # the rerun's trainer, then build_updater's load_state
    resumed_optimizer = build_optimizer(config, resumed)
    assert load_checkpoint(tmp_path / "checkpoint", resumed, resumed_optimizer, torch.Generator())[0] == 1
    assert _relative_difference(expected[0], resumed.state_dict()) <= 1e-6
    assert len(resumed_optimizer.state_dict()["state"]) == len(list(resumed.parameters()))
    fsdp_group.mirror, fsdp_group.mirror_optimizer = resumed, resumed_optimizer
    fsdp_group.load_state(resumed.state_dict(), resumed_optimizer.state_dict())
    torch.manual_seed(12)
    fsdp_group.update(trajectories, advantages)
    assert _relative_difference(expected[0], expected[1]) > 1e-4  # the second update moved the weights
    assert _relative_difference(expected[1], fsdp_group.state_dict()) <= 1e-6
    fsdp_group.pull_optimizer_state()
    for moment in ("exp_avg", "exp_avg_sq"):
        assert _relative_difference({str(k): v[moment] for k, v in optimizer.state_dict()["state"].items()},
                                    {str(k): v[moment] for k, v in resumed_optimizer.state_dict()["state"].items()}
                                    ) < 1e-5
    assert {float(v["step"]) for v in resumed_optimizer.state_dict()["state"].values()} == {8.0}  # 2 x 2 x 2 steps

    held = fsdp_group.held_numel()
    full = held[0]["full_parameters"]
    assert sum(h["parameters"] for h in held) == full == sum(p.numel() for p in one.parameters())
    for h in held:
        assert h["parameters"] <= 0.51 * full  # dim-0 shards: half, up to one row of padding per tensor
        assert 0 <= h["optimizer_state"] - 2 * h["parameters"] <= 100  # two moments per element, one step per tensor


@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_float16_ranks_skip_an_overflowed_step_together_and_keep_one_loss_scale(
        group: LearnerGroup, fsdp_group: LearnerGroup, batch: tuple[list[Trajectory], torch.Tensor],
        tiny_model_dir: Path, strategy: str) -> None:
    """``model.dtype: float16``: every rank scales its loss; with a checkpoint's scale of 2^60 the backward pass
    overflows, every rank skips the step (no weight moves, rank 0's sharded or whole weights alike) and halves the
    scale; from 2^16 the next update moves the weights as one process's scaled update does."""
    learners = group if strategy == "ddp" else fsdp_group
    trajectories, advantages = batch
    config = _config(tiny_model_dir)
    config.model.dtype = "float16"
    one = copy.deepcopy(load_policy(config, str(tiny_model_dir)).model)
    initial = copy.deepcopy(one.state_dict())
    optimizer = build_optimizer(config, one)
    learners.config = update_config(config)
    learners.mirror = load_policy(config, str(tiny_model_dir)).model
    learners.mirror_optimizer = build_optimizer(config, learners.mirror)
    learners.load_state(initial, build_optimizer(config, copy.deepcopy(one)).state_dict())
    scaler = grad_scaler("cpu", "float16")
    assert scaler is not None
    learners.load_loss_scaler_state({**scaler.state_dict(), "scale": 2.0**60})
    torch.manual_seed(11)
    metrics = learners.update(trajectories, advantages)
    assert metrics["skipped_steps"] == 4.0 and metrics["loss_scale"] == 2.0**56  # 2 epochs x 2 mini-batches
    assert metrics["grad_norm"] == float("inf")  # no step's gradients were finite
    assert _relative_difference(initial, learners.state_dict()) == 0.0
    learners.load_loss_scaler_state(scaler.state_dict())
    torch.manual_seed(11)
    metrics = learners.update(trajectories, advantages)
    torch.manual_seed(11)
    expected = ppo_update(one, optimizer, trajectories, advantages, update_config(config), None, 0, scaler)
    assert metrics["skipped_steps"] == expected["skipped_steps"] == 0.0
    import ray

    assert ray.get([rank.loss_scaler_state.remote() for rank in learners.ranks]) == [scaler.state_dict()] * 2
    assert learners.loss_scaler_state() == scaler.state_dict()
    assert _relative_difference(initial, one.state_dict()) > 1e-4
    assert _relative_difference(one.state_dict(), learners.state_dict()) <= 1e-3  # float16 sums in another order


def _check_same_step_as_one(group: LearnerGroup, batch: tuple[list[Trajectory], torch.Tensor], tiny_model_dir: Path,
                            case: str, one_rank_on_fresh_storage: bool = False) -> None:
    """Runs ``case`` on one rank in this process and on ``group``; asserts they agree.

    ``one_rank_on_fresh_storage``: the one rank's model is a deep copy (its parameters in freshly allocated memory, as
    FSDP2's all-gathered ones are) instead of the model as loaded (safetensors: 8 bytes past a 64-byte boundary).
    Some CPU kernels round differently with the alignment: the two one-rank models differ by 2.0e-6 after the aepo
    case (its top-entropy mask turns rounding into a token more or less), and 2 fsdp2 ranks score bitwise as the copy
    does (docs/results.md, issue 27 FSDP2).
    """
    trajectories, advantages = batch
    loss = {k.split(".", 1)[1]: v for k, v in CASES[case].items() if k.startswith("loss.")}
    config = _config(tiny_model_dir, **loss)
    if "algorithm.micro_batch_tokens" in CASES[case]:
        config.algorithm.micro_batch_tokens = CASES[case]["algorithm.micro_batch_tokens"]
    one = load_policy(config, str(tiny_model_dir)).model
    if one_rank_on_fresh_storage:
        one = copy.deepcopy(one)
    initial = copy.deepcopy(one.state_dict())
    optimizer = build_optimizer(config, one)
    ref = _reference_model(one, tiny_model_dir) if config.algorithm.loss.kl_coef > 0 else None
    torch.manual_seed(11)
    expected = ppo_update(one, optimizer, trajectories, advantages, update_config(config), ref, 0)

    mirror = load_policy(config, str(tiny_model_dir)).model
    mirror_optimizer = build_optimizer(config, mirror)
    group.config, group.mirror, group.mirror_optimizer = update_config(config), mirror, mirror_optimizer
    group.load_state(initial, build_optimizer(config, copy.deepcopy(one)).state_dict())
    torch.manual_seed(11)  # the group draws the mini-batches in this process, as ppo_update does
    version = group.version
    metrics = group.update(trajectories, advantages)

    two = group.state_dict()
    moved = _relative_difference(initial, one.state_dict())
    assert moved > 1e-4  # the step changed the weights, so equality below says something
    assert _relative_difference(one.state_dict(), two) <= 1e-6
    assert _relative_difference(two, mirror.state_dict()) == 0.0
    assert all(torch.equal(tensor, two[name]) for name, tensor in group.named_parameters())
    assert group.version == version + 1
    group.pull_optimizer_state()  # what a checkpoint saves: rank 0's AdamW moments, equal to one rank's
    for moment in ("exp_avg", "exp_avg_sq"):
        assert _relative_difference({str(k): v[moment] for k, v in optimizer.state_dict()["state"].items()},
                                    {str(k): v[moment] for k, v in mirror_optimizer.state_dict()["state"].items()}) < 1e-5
    assert metrics.keys() == expected.keys()
    for key in expected:
        if key != "train_tokens_per_s":
            assert metrics[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key


@pytest.mark.slow  # starts a group of its own (~20-40 s on a busy 2-core machine)
def test_a_rank_that_raises_while_its_peer_waits_in_a_collective_ends_the_group_with_a_training_error(
        ray_session: None, batch: tuple[list[Trajectory], torch.Tensor], tiny_model_dir: Path) -> None:
    from rlvr_gym_agents.train import TrainingError

    trajectories, _ = batch
    longest = max(range(len(trajectories)), key=lambda i: len(trajectories[i].token_ids))
    longer = copy.deepcopy(trajectories[longest])  # the same prompt group, 3 more generated tokens
    for values, extra in ((longer.token_ids, 5), (longer.loss_mask, 1), (longer.logps, -1.0), (longer.entropies, 1.0)):
        values += [extra] * 3  # type: ignore[operator]
    rows = [longer if i == longest else t for i, t in enumerate(trajectories)]
    # per-token advantages as wide as the longest original row: the rank holding the longer row raises in its first
    # lines, the other enters the first collective and waits for it
    advantages = torch.zeros(len(rows), len(trajectories[longest].token_ids))
    owned = shard_rows(rows, 2)
    failing = next(rank for rank, mine in enumerate(owned) if longest in mine)
    config = _config(tiny_model_dir)
    learners = LearnerGroup(2, functools.partial(trainable_model, config, str(tiny_model_dir)),
                            functools.partial(build_optimizer, config), update_config(config), 0)
    pids = learners.pids()
    with pytest.raises(TrainingError, match=rf"learner rank {failing} failed during update 1: .*per-token advantages"):
        learners.update(rows, advantages)
    _wait_until_gone(pids)  # both ranks, the waiting one included


@pytest.mark.parametrize("death", ["segmentation fault", "SIGKILL"])
def test_a_dead_rank_is_named_with_how_its_process_ended(ray_session: None, tiny_model_dir: Path,
                                                         death: str) -> None:
    """A rank that dies of a fatal signal is named with the fault handler's error and innermost frames, and the file
    with every thread's stack outlives the group; one killed outright (SIGKILL: the out-of-memory killer) leaves no
    report, and the error says so with Ray's exit type."""
    from rlvr_gym_agents.train import TrainingError

    config = _config(tiny_model_dir)
    with LearnerGroup(1, functools.partial(trainable_model, config, str(tiny_model_dir)),
                      functools.partial(build_optimizer, config), update_config(config), 0,
                      start_timeout_s=600) as learners:  # closed by the error; by the with if the test fails first
        pid = learners.pids()[0]
        if death == "SIGKILL":
            os.kill(pid, signal.SIGKILL)
            expected = (r"learner rank 0 died during counting the parameters \(its process ended with no fault "
                        r"report: a signal the fault handler does not catch \(SIGKILL, .*; Ray: SYSTEM_ERROR\)")
        else:
            # a lambda travels by value (the rank cannot import this test module): it reads address 0, a SIGSEGV
            learners.ranks[0].__ray_call__.remote(lambda rank: __import__("ctypes").string_at(0))
            expected = (r"learner rank 0 died during counting the parameters \(its process ended: Fatal Python error: "
                        r"Segmentation fault, in string_at \(ctypes/__init__.py:\d+\) < <lambda> \(rlvr_gym_agents/"
                        r"test_cluster_learner.py:\d+\) < .*; every thread's stack: (\S+)\)")
        with pytest.raises(TrainingError, match=expected) as raised:
            learners.held_numel()
    _wait_until_gone([pid])
    fault_dir = Path(learners._fault_dir)
    if death == "SIGKILL":
        assert not fault_dir.exists()  # nothing recorded, nothing kept
    else:
        stack = Path(re.search(expected, str(raised.value)).group(1))  # type: ignore[union-attr]
        assert stack.parent == fault_dir and "Current thread" in stack.read_text(encoding="utf-8")
        shutil.rmtree(fault_dir)


def test_a_rank_whose_constructor_raises_is_named_with_its_error(ray_session: None, tiny_model_dir: Path) -> None:
    from rlvr_gym_agents.train import TrainingError

    config = _config(tiny_model_dir)
    before = set(Path(tempfile.gettempdir()).glob("rlvr-gym-learners-*"))
    with pytest.raises(TrainingError, match=r"learner rank 0 failed while starting: .*no-such-model"):
        LearnerGroup(1, functools.partial(trainable_model, config, str(tiny_model_dir / "no-such-model")),
                     functools.partial(build_optimizer, config), update_config(config), 0, start_timeout_s=600)
    assert set(Path(tempfile.gettempdir()).glob("rlvr-gym-learners-*")) == before  # its empty fault files removed


def test_fault_summary_reads_the_fault_handlers_report() -> None:
    program = "import ctypes, faulthandler\nfaulthandler.enable(all_threads=True)\n" \
              "def read_null():\n    ctypes.string_at(0)\nread_null()\n"
    crashed = subprocess.run([sys.executable, "-c", program], check=False, capture_output=True, text=True, timeout=60)
    assert crashed.returncode == -signal.SIGSEGV
    assert re.fullmatch(r"Fatal Python error: Segmentation fault, in string_at \(ctypes/__init__.py:\d+\) < "
                        r"read_null \(<string>:4\) < <module> \(<string>:5\)", fault_summary(crashed.stderr) or "")
    # the report's shape, by hand: another thread first, then the one that crashed
    report = ('Fatal Python error: Aborted\n\nThread 0x00007f01 (most recent call first):\n  File "/a/b/idle.py", '
              'line 7 in wait\n\nCurrent thread 0x00007f02 (most recent call first):\n  File "/x/y/z/gloo.py", line '
              '31 in all_gather\n  File "/x/y/learner.py", line 250 in optimizer_state\n\nExtension modules: torch\n')
    assert fault_summary(report) == ("Fatal Python error: Aborted, in all_gather (z/gloo.py:31) < optimizer_state "
                                     "(y/learner.py:250)")
    assert fault_summary(report, frames=1) == "Fatal Python error: Aborted, in all_gather (z/gloo.py:31)"
    assert fault_summary("Fatal Python error: Bus error\n") == "Fatal Python error: Bus error"
    # a crash while collecting garbage (a line that is no frame), a Windows path, a path holding ", line "
    report = ('Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n'
              '  Garbage-collecting\n  File "C:\\env\\torch\\tensor.py", line 3 in __del__\n'
              '  File "/srv/a, line 2 in b/gc.py", line 9 in collect\n\n')
    assert fault_summary(report) == ("Fatal Python error: Segmentation fault, in __del__ (torch/tensor.py:3) < "
                                     "collect (a, line 2 in b/gc.py:9)")
    assert fault_summary("") is None


def test_shard_rows_keeps_prompt_groups_together_and_balances_tokens() -> None:
    def episode(prompt: int, length: int) -> Trajectory:
        ids = [prompt, 1] + [2] * (length - 2)
        return Trajectory(task_id=f"t{prompt}", env_id="x", token_ids=ids, loss_mask=[0, 0] + [1] * (length - 2),
                          logps=[0.0] * length, entropies=[0.0] * length, prompt_length=2)

    # groups (prompt ids 7, 8, 9) of 30, 8 and 24 tokens: 7 -> rank 0; 9 -> rank 1 (0 < 30); 8 -> rank 1 (24 < 30)
    batch = [episode(7, 10), episode(8, 4), episode(7, 10), episode(9, 12), episode(8, 4), episode(7, 10),
             episode(9, 12)]
    assert shard_rows(batch, 2) == [[0, 2, 5], [1, 3, 4, 6]]
    assert shard_rows(batch, 1) == [list(range(7))]
    # fewer groups than ranks: rows one by one, longest first
    assert shard_rows(batch[:3], 4) == [[0], [2], [1], []]


def test_backend_auto_is_gloo_on_cpu_and_nccl_on_cuda() -> None:
    assert resolve_backend("auto", "cpu") == "gloo"
    assert resolve_backend("auto", "cuda") == "nccl"
    assert resolve_backend("gloo", "cuda:0") == "gloo"
    with pytest.raises(ValueError, match="needs model.device=cuda"):
        resolve_backend("nccl", "cpu")
    with pytest.raises(ValueError, match="auto, gloo or nccl"):
        resolve_backend("mpi", "cpu")


def test_one_learner_updates_in_process_without_ray(tiny_model_dir: Path, tmp_path: Path) -> None:
    config = _config(tiny_model_dir)
    policy = load_policy(config, str(tiny_model_dir))
    updater = build_updater(config, policy, build_optimizer(config, policy.model), tmp_path)
    assert isinstance(updater, PPOUpdater) and updater.model is policy.model


NUM_STEPS = 3


def _train_argv(tiny_model_dir: Path, tmp_path: Path) -> list[str]:
    """A flat-sampler Echo run of ``NUM_STEPS`` RL steps on 2 learner ranks, a checkpoint after every step."""
    TaskSuite("train", echo_tasks(8, "train")).save(tmp_path / "train.jsonl")
    TaskSuite("test", echo_tasks(4, "test")).save(tmp_path / "test.jsonl")
    (tmp_path / "recipe.yaml").write_text("seed: 3\n", encoding="utf-8")
    return [str(tmp_path / "recipe.yaml"), f"model.path_or_id={tiny_model_dir}", "env.env_id=testing/Echo-v0",
            f"env.train_suite={tmp_path / 'train.jsonl'}", f"env.test_suite={tmp_path / 'test.jsonl'}",
            "sft.enabled=false", "rollout.max_new_tokens=4", "train.tasks_per_step=2", "train.group_size=4",
            "algorithm.drop_zero_variance_groups=false", f"train.num_steps={NUM_STEPS}", "train.checkpoint_every=1",
            "eval.num_tasks=2", "eval.k=1", "eval.greedy=false", f"output.dir={tmp_path / 'run'}",
            "output.progress=false", "output.tensorboard=false", "model.num_threads=1", "cluster.learners=2"]


@pytest.mark.slow  # two training runs on 2 learner ranks each (~80 s on a busy 2-core machine)
def test_a_killed_learner_rank_stops_the_run_and_a_rerun_resumes_without_losing_or_repeating_a_step(
        ray_session: None, tiny_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    argv, run = _train_argv(tiny_model_dir, tmp_path), tmp_path / "run"
    gather, killed = LearnerGroup._gather, []

    def kill_rank_1_during_update_2(self: LearnerGroup, refs: list[Any], what: str,
                                    timeout_s: float | None = None) -> list[Any]:
        if what == "update 2":  # the ranks have their work (rank 0 then waits for rank 1 in a collective)
            os.kill(killed[1], signal.SIGKILL)
        results = gather(self, refs, what, timeout_s)
        if what == "update 1":  # an actor runs its calls in turn: ask for the pids between updates
            killed.extend(self.pids())
        return results

    monkeypatch.setattr(LearnerGroup, "_gather", kill_rank_1_during_update_2)
    assert train_main(argv) == 1
    error = capsys.readouterr().err
    assert "learner rank 1 died during update 2" in error and "resume from the last checkpoint" in error
    assert torch.load(run / "checkpoint" / "trainer_state.pt", weights_only=False)["step"] == 1
    _wait_until_gone(killed)  # the group killed rank 0 too

    monkeypatch.setattr(LearnerGroup, "_gather", gather)
    assert train_main(argv) == 0
    output = capsys.readouterr().err
    assert f"resumed from {run / 'checkpoint'} at RL step 1" in output
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["step"] for r in records if r["phase"] == "rl"] == list(range(1, NUM_STEPS + 1))
    assert [r["step"] for r in records if r["phase"] == "eval"] == [0, NUM_STEPS]
    assert torch.load(run / "checkpoint" / "trainer_state.pt", weights_only=False)["step"] == NUM_STEPS


def _wait_until_gone(pids: list[int], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    for pid in pids:
        while _alive(pid):
            assert time.monotonic() < deadline, f"learner process {pid} still runs after the group was closed"
            time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
