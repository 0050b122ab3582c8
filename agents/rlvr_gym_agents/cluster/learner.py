"""The learner group: the policy update on M torch.distributed ranks, Ray actors in one placement group.

``cluster.learners = M > 1`` makes the trainer's RL step call :meth:`LearnerGroup.update` instead of
:func:`~rlvr_gym_agents.update.ppo.ppo_update`; the group computes the same optimizer steps on M processes:

- **start**: M :class:`LearnerRank` actors, one bundle each of a ``ray.util.placement_group`` (``PACK``), every one
  builds the model and optimizer with the trainer's own factories, then receives the trainer's weights and optimizer
  state (after a resume: the checkpoint's) from the object store, so all ranks start equal;
- **rendezvous**: rank 0 picks a free TCP port; the ranks join one process group with
  ``init_method=tcp://127.0.0.1:<port>`` (rank 0's node address when the ranks span nodes); backend ``gloo`` on CPU,
  ``nccl`` on CUDA (``cluster.backend=auto``);
- **update**: the trainer draws the mini-batches (:func:`~rlvr_gym_agents.update.ppo.minibatch_plan`, its own torch
  generator, as one process would) and puts the whole batch in the object store once; each rank back-propagates the
  rows it owns (whole prompt groups, balanced by tokens: :func:`shard_rows`) through
  :func:`~rlvr_gym_agents.update.ppo.update_shard`. Every loss normaliser (token and sequence counts, entropy
  statistics) is summed or gathered over ranks, so each rank's loss is a summand of the whole mini-batch's loss; the
  gradients are then **summed** over ranks, giving the one-process gradient, and every rank takes the same clipped
  AdamW step;
- **weights back**: rank 0's weights are loaded into the trainer's model after every update (the trainer samples
  with it and forwards it to a vLLM engine or rollout workers); :meth:`LearnerGroup.state_dict` /
  :meth:`LearnerGroup.named_parameters` give them, stamped with :attr:`LearnerGroup.version`;
- **checkpoints**: the trainer writes them (``run_io.save_checkpoint``) from its model, which holds rank 0's
  weights, and its optimizer, into which :meth:`LearnerGroup.pull_optimizer_state` loads rank 0's state first; a
  resumed run hands the checkpoint's weights and optimizer state to every rank at start;
- **faults**: a rank whose process dies (or a rank that raises) during an update ends the group: every actor is
  killed, the placement group removed, Ray shut down if the group started it, and
  :class:`~rlvr_gym_agents.train.TrainingError` names the rank, how its process ended (each rank's
  :mod:`faulthandler` writes to a file of the group: a fatal signal is named with the innermost frames and the file
  with every thread's stack is kept; an empty report means a signal it does not catch, most often the out-of-memory
  killer's SIGKILL, an exit or a Python fatal error) and how to resume; a rank whose constructor raised is named
  with its error.

How the ranks sum their gradients (``ddp``: one all_reduce per optimizer step) or shard the model (``fsdp2``), and
why not DDP's reducer: :mod:`rlvr_gym_agents.cluster.sync`.

Tested here: CPU, gloo, one machine, loopback rendezvous, 2 ranks (``tests/rlvr_gym_agents/test_cluster_learner.py``:
2 ranks equal 1 rank after a step within 1e-6 relative, with ``ddp`` and ``fsdp2``; with fsdp2 a checkpoint written
from rank 0's gathered state, resumed by both ranks, continues as one process does; a SIGKILLed rank stops the run
with a TrainingError and the rerun resumes). Not tested here: NCCL on GPUs (FSDP2 included), ranks on several nodes
(the rendezvous then uses rank 0's node address; ``cluster.ray_address`` joins the cluster; every rank reads the model
directory, and with a KL term ``output.dir/sft_model``, from its own disk, so they must be on a shared filesystem),
FSDP2 with LoRA (frozen and trainable parameters in one FSDP group) or with mixed precision.
"""

from __future__ import annotations

import contextlib
import datetime
import faulthandler
import logging
import os
import shutil
import socket
import tempfile
from collections.abc import Callable
from typing import Any, Self

import torch

from rlvr_gym.workers import ensure_ray
from rlvr_gym_agents.cluster.faults import describe_death
from rlvr_gym_agents.cluster.sync import (
    STRATEGIES,
    FullyShardedSync,
    TorchDistributedSync,
    resolve_backend,
    shard_model,
)
from rlvr_gym_agents.rollout.types import Trajectory
from rlvr_gym_agents.update.ppo import (
    ShardResult,
    UpdateConfig,
    batch_loss_config,
    merge_shards,
    minibatch_plan,
    update_shard,
)
from rlvr_gym_agents.update.precision import grad_scaler, model_device

ModelFactory = Callable[[], torch.nn.Module]
"""Builds the trainable model (weights are replaced by the trainer's right after); runs inside each rank."""
OptimizerFactory = Callable[[torch.nn.Module], torch.optim.Optimizer]
"""Builds the optimizer over a model's trainable parameters (the trainer's :func:`~rlvr_gym_agents.train.build_optimizer`)."""
ReferenceFactory = Callable[[torch.nn.Module], torch.nn.Module]
"""Builds the frozen reference model of the KL term from a rank's model."""


def shard_rows(trajectories: list[Trajectory], num_ranks: int) -> list[list[int]]:
    """The rows (indices into ``trajectories``) each rank back-propagates, a pure function of the batch.

    Rows that share a prompt (a GRPO group, a tree's leaves) stay on one rank, so each rank still runs each of its
    prompts once; groups go, largest (in tokens) first, to the rank with the fewest tokens so far (ties: the lowest
    rank). With fewer groups than ranks the rows are dealt out one by one the same way. The split does not change the
    result (every loss normaliser is global, :func:`~rlvr_gym_agents.update.ppo.update_shard`), only the balance.

    Returns:
        ``num_ranks`` sorted lists of rows; together every row exactly once (a list may be empty when there are
        fewer rows than ranks).
    """
    groups: dict[tuple[int, ...], list[int]] = {}
    for row, trajectory in enumerate(trajectories):
        groups.setdefault(tuple(trajectory.token_ids[: trajectory.prompt_length]), []).append(row)
    units = list(groups.values()) if len(groups) >= num_ranks else [[row] for row in range(len(trajectories))]
    units.sort(key=lambda rows: -sum(len(trajectories[r].token_ids) for r in rows))  # stable: first seen first
    owned: list[list[int]] = [[] for _ in range(num_ranks)]
    load = [0] * num_ranks
    for rows in units:
        rank = min(range(num_ranks), key=lambda r: (load[r], r))
        owned[rank] += rows
        load[rank] += sum(len(trajectories[r].token_ids) for r in rows)
    return [sorted(rows) for rows in owned]


class LearnerRank:
    """The body of one learner actor (rank ``rank`` of ``world_size``).

    Args:
        rank / world_size: this rank and the group's size.
        model_factory / optimizer_factory / reference_factory: see :class:`LearnerGroup`.
        num_threads: torch CPU threads of this process.
        strategy: ``ddp`` (a whole replica) or ``fsdp2`` (sharded when the rank joins the group).
        fault_file: where Python's fault handler writes every thread's stack if this process dies of a fatal signal
            (segmentation fault, abort, bus or floating-point error); None: Ray's worker log. Skipped when the file
            cannot be created (a rank on another node than the group's owner).
    """

    def __init__(self, rank: int, world_size: int, model_factory: ModelFactory,
                 optimizer_factory: OptimizerFactory, reference_factory: ReferenceFactory | None,
                 num_threads: int, strategy: str = "ddp", fault_file: str | None = None) -> None:
        self._fault_log = None
        if fault_file is not None:
            with contextlib.suppress(OSError):
                self._fault_log = open(fault_file, "w", encoding="utf-8")  # noqa: SIM115 (open while the process lives)
                faulthandler.enable(self._fault_log, all_threads=True)
        torch.set_num_threads(max(1, num_threads))
        self.rank, self.world_size, self.strategy = rank, world_size, strategy
        self.model_factory, self.optimizer_factory = model_factory, optimizer_factory
        self.model = model_factory()
        self.optimizer: torch.optim.Optimizer | None = None  # built in join(), over the (maybe sharded) parameters
        self.reference_factory = reference_factory
        self.ref_model: torch.nn.Module | None = None
        self.sync: TorchDistributedSync | None = None
        self.scaler: torch.amp.GradScaler | None = None  # float16's loss scaler, built at the first update

    def pid(self) -> int:
        """This rank's process id."""
        return os.getpid()

    def rendezvous(self) -> tuple[str, int]:
        """``(this node's address, a free TCP port on it)`` for the process group's ``tcp://`` init (rank 0)."""
        import ray

        with socket.socket() as probe:
            probe.bind(("", 0))
            port = int(probe.getsockname()[1])
        return ray.util.get_node_ip_address(), port

    def node_id(self) -> str:
        """The Ray node this rank runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def join(self, init_method: str, backend: str, timeout_s: float) -> None:
        """Joins the process group (blocks until every rank has joined); ``timeout_s`` bounds every collective."""
        import torch.distributed as dist

        dist.init_process_group(backend, init_method=init_method, rank=self.rank, world_size=self.world_size,
                                timeout=datetime.timedelta(seconds=timeout_s))
        device = next(self.model.parameters()).device if backend == "nccl" else torch.device("cpu")
        if self.strategy == "fsdp2":
            self.model = shard_model(self.model, str(next(self.model.parameters()).device))
            self.sync = FullyShardedSync(device, self.model)
        else:
            self.sync = TorchDistributedSync(device)
        self.optimizer = self.optimizer_factory(self.model)

    def load(self, state: tuple[dict[str, torch.Tensor], dict[str, Any]]) -> None:
        """Takes the trainer's ``(weights, optimizer state)`` (then builds the reference model from them; with fsdp2
        from a whole copy of the weights: the reference is not sharded)."""
        model_state, optimizer_state = state
        assert self.optimizer is not None, "join() first"
        if self.strategy == "fsdp2":
            from torch.distributed.checkpoint.state_dict import (
                StateDictOptions,
                set_model_state_dict,
                set_optimizer_state_dict,
            )

            if self.reference_factory is not None:
                whole = self.model_factory()
                whole.load_state_dict(model_state)
                self.ref_model = self.reference_factory(whole)
            full = StateDictOptions(full_state_dict=True)  # the dicts are copied: DCP puts the shards into them
            set_model_state_dict(self.model, dict(model_state), options=full)
            self.model.zero_grad(set_to_none=True)  # DCP makes a state only for parameters without a gradient
            self.optimizer = self.optimizer_factory(self.model)  # no state left from an earlier load or update
            if not optimizer_state.get("state"):
                # Nothing stepped yet: only the hyper-parameters to take. DCP's set_optimizer_state_dict would first
                # make a state with a zero-gradient step (lr 0), which leaves AdamW at step 1 with zero moments, so
                # the first real step would be Adam's second, 0.74 x as long.
                self.optimizer.load_state_dict(optimizer_state)
                return
            names = self._names()
            set_optimizer_state_dict(self.model, self.optimizer, _state_by_name(optimizer_state, names), options=full)
            stepped = {names[int(index)] for index in optimizer_state["state"]}
            for name, parameter in zip(names, self._trainable()):
                if name not in stepped:  # never had a gradient in the trainer: no state (DCP's zero step made one)
                    self.optimizer.state.pop(parameter, None)
            return
        self.model.load_state_dict(model_state)
        self.optimizer.load_state_dict(optimizer_state)
        if self.reference_factory is not None:
            self.ref_model = self.reference_factory(self.model)

    def update(self, batch: tuple[list[Trajectory], torch.Tensor, list[torch.Tensor], Any, UpdateConfig, int],
               owned: list[int]) -> ShardResult:
        """This rank's share of one update (:func:`~rlvr_gym_agents.update.ppo.update_shard` on ``owned``)."""
        trajectories, advantages, plan, loss_config, config, pad_token_id = batch
        assert self.sync is not None and self.optimizer is not None, "join() first"
        if config.autocast_dtype != "float16":
            self.scaler = None
        elif self.scaler is None:  # kept across updates (and loaded from a checkpoint)
            self.scaler = grad_scaler(model_device(self.model), config.autocast_dtype)
        return update_shard(self.model, self.optimizer, trajectories, advantages, config, loss_config, self.ref_model,
                            pad_token_id, plan, owned, self.sync, self.scaler)

    def loss_scaler_state(self) -> dict[str, Any] | None:
        """This rank's loss scaler state (every rank's is the same: they skip and grow together); None without one."""
        return self.scaler.state_dict() if self.scaler is not None else None

    def load_loss_scaler_state(self, state: dict[str, Any]) -> None:
        """Restores a checkpoint's loss scaler (float16 autocast)."""
        self.scaler = grad_scaler(model_device(self.model), "float16")
        assert self.scaler is not None
        self.scaler.load_state_dict(state)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The model's whole weights, on the CPU (fsdp2: gathered on rank 0, every rank must call; others get {})."""
        if self.strategy == "fsdp2":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            gathered = get_model_state_dict(self.model, options=StateDictOptions(full_state_dict=True,
                                                                                 cpu_offload=True))
            return {name: tensor.detach() for name, tensor in gathered.items() if isinstance(tensor, torch.Tensor)}
        return {name: tensor.detach().cpu() for name, tensor in self.model.state_dict().items()}

    def named_parameters(self) -> list[tuple[str, torch.Tensor]]:
        """The model's parameters by name, on the CPU (fsdp2: as :meth:`state_dict`)."""
        if self.strategy == "fsdp2":
            whole = self.state_dict()
            return [(name, whole[name]) for name, _ in self.model.named_parameters()] if whole else []
        return [(name, parameter.detach().cpu()) for name, parameter in self.model.named_parameters()]

    def optimizer_state(self) -> dict[str, Any]:
        """The optimizer's ``state_dict()`` in the trainer's layout (parameter indices), tensors on the CPU (fsdp2:
        gathered whole on rank 0, every rank must call; others get {})."""
        assert self.optimizer is not None, "join() first"
        if self.strategy == "fsdp2":
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_optimizer_state_dict

            gathered = get_optimizer_state_dict(self.model, self.optimizer,
                                                options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            return _state_by_index(gathered, self._names()) if gathered else {}
        return _to_cpu(self.optimizer.state_dict())

    def held_numel(self) -> dict[str, int]:
        """Elements this rank holds between updates: ``parameters`` (its shard with fsdp2, DTensor local tensors;
        every parameter with ddp), ``optimizer_state`` (its tensors: AdamW's two moments and step counts) and
        ``full_parameters`` (the whole model's parameter count)."""
        assert self.optimizer is not None, "join() first"

        def local(tensor: torch.Tensor) -> torch.Tensor:
            to_local = getattr(tensor, "to_local", None)
            return to_local() if to_local is not None else tensor

        full = sum(parameter.numel() for parameter in self.model.parameters())
        return {"parameters": sum(local(parameter).numel() for parameter in self.model.parameters()),
                "optimizer_state": sum(local(value).numel() for state in self.optimizer.state.values()
                                       for value in state.values() if isinstance(value, torch.Tensor)),
                "full_parameters": full}

    def _names(self) -> list[str]:
        """The trainable parameters' names, in the optimizer's (and the trainer's optimizer's) order."""
        return [name for name, parameter in self.model.named_parameters() if parameter.requires_grad]

    def _trainable(self) -> list[torch.nn.Parameter]:
        """The trainable parameters, in :meth:`_names`' order."""
        return [parameter for parameter in self.model.parameters() if parameter.requires_grad]


class LearnerGroup:
    """M learner ranks on Ray that run the PPO-family update together (an :class:`~rlvr_gym_agents.update.ppo.Updater`).

    Args:
        num_ranks: M >= 1 (1 works, for tests; the trainer uses :class:`~rlvr_gym_agents.update.ppo.PPOUpdater`).
        model_factory: builds the trainable model in each rank (the trainer's loader: model directory, dtype,
            device, LoRA); must be picklable (a module-level function or a ``functools.partial`` of one).
        optimizer_factory: builds the optimizer over the model's trainable parameters.
        config: the update's settings (:class:`UpdateConfig`); may be replaced between updates.
        pad_token_id: the tokenizer's padding id.
        reference_factory: builds the frozen KL reference model from a rank's model (None: no KL term).
        mirror: the trainer's model; rank 0's weights are loaded into it after every update (None: nowhere).
        mirror_optimizer: the trainer's optimizer; :meth:`pull_optimizer_state` loads rank 0's state into it.
        backend: ``auto`` | ``gloo`` | ``nccl`` (:func:`resolve_backend`).
        device: the model's device, ``cpu`` or ``cuda`` (each rank then reserves one GPU; Ray sets which).
        ray_address: a Ray cluster to join (None: this process's Ray, or a local one started here).
        num_cpus_per_rank: CPUs each rank's placement-group bundle reserves in Ray's scheduler (fractions allowed).
            Default: 1 on a cluster (``ray_address``); on a local Ray, at most 1 and together half of this machine's
            CPUs (rollout workers reserve the other half), so both fit the local Ray of ``os.cpu_count()`` CPUs.
        threads_per_rank: torch CPU threads of each rank.
        start_timeout_s: the longest wait for the placement group and for the ranks to start and join.
        collective_timeout_s: how long a rank waits in one collective (torch.distributed's process-group timeout)
            before it fails; an update itself has no time limit (a rank that dies ends it at once).
        strategy: ``ddp`` (whole replicas, gradients all-reduced) or ``fsdp2`` (:func:`shard_model`; reading the
            weights or the optimizer state then gathers them from every rank).

    Raises:
        ValueError: ``num_ranks < 1``, a bad backend or an unknown strategy.
        TrainingError: the placement group cannot be scheduled (the message says what it needs and what Ray has),
            or a rank fails while starting.
    """

    def __init__(self, num_ranks: int, model_factory: ModelFactory, optimizer_factory: OptimizerFactory,
                 config: UpdateConfig, pad_token_id: int, *, reference_factory: ReferenceFactory | None = None,
                 mirror: torch.nn.Module | None = None, mirror_optimizer: torch.optim.Optimizer | None = None,
                 backend: str = "auto", device: str = "cpu", ray_address: str | None = None,
                 num_cpus_per_rank: float | None = None, threads_per_rank: int = 1, start_timeout_s: float = 120.0,
                 collective_timeout_s: float = 1800.0, strategy: str = "ddp") -> None:
        if num_ranks < 1:
            raise ValueError(f"a learner group needs num_ranks >= 1, got {num_ranks}")
        if strategy not in STRATEGIES:
            raise ValueError(f"a learner group's strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        self.strategy = strategy
        self.backend = resolve_backend(backend, device)
        self.num_ranks, self.config, self.pad_token_id = num_ranks, config, pad_token_id
        self.mirror, self.mirror_optimizer = mirror, mirror_optimizer
        self.version = 0
        self._closed = False
        self._fault_dir: str | None = None  # one fault-handler file per rank, made when the ranks start
        num_gpus = 1 if torch.device(device).type == "cuda" else 0
        if num_cpus_per_rank is None:
            num_cpus_per_rank = 1.0 if ray_address else min(1.0, (os.cpu_count() or 1) / (2 * num_ranks))
        self._started_ray = ensure_ray(ray_address, num_cpus=os.cpu_count())
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = {"CPU": num_cpus_per_rank, **({"GPU": num_gpus} if num_gpus else {})}
        self._placement = placement_group([dict(bundle) for _ in range(num_ranks)], strategy="PACK")
        self.ranks: list[Any] = []
        try:
            ready, _ = ray.wait([self._placement.ready()], timeout=start_timeout_s)
            if not ready:
                raise self._error(f"the placement group of {num_ranks} learner bundles {bundle} was not scheduled "
                                  f"within {start_timeout_s:g} s; Ray has {ray.available_resources()} free. Lower "
                                  f"cluster.learners or add resources")
            self._fault_dir = tempfile.mkdtemp(prefix="rlvr-gym-learners-")
            actor = ray.remote(LearnerRank)
            self.ranks = [actor.options(
                num_cpus=num_cpus_per_rank, num_gpus=num_gpus, max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._placement, placement_group_bundle_index=i),
            ).remote(i, num_ranks, model_factory, optimizer_factory, reference_factory, threads_per_rank, strategy,
                      self._fault_file(i))
                for i in range(num_ranks)]
            host, port = self._gather([self.ranks[0].rendezvous.remote()], "the rendezvous", start_timeout_s)[0]
            nodes = self._gather([rank.node_id.remote() for rank in self.ranks], "start", start_timeout_s)
            address = "127.0.0.1" if len(set(nodes)) == 1 else host  # one machine: loopback
            self._gather([rank.join.remote(f"tcp://{address}:{port}", self.backend, collective_timeout_s)
                          for rank in self.ranks], "joining the process group", start_timeout_s)
        except BaseException:
            self.close()
            raise

    def load_state(self, model_state: dict[str, torch.Tensor], optimizer_state: dict[str, Any]) -> None:
        """Gives every rank these weights and this optimizer state (the trainer's, fresh or resumed)."""
        import ray

        state = ray.put((model_state, _to_cpu(optimizer_state)))
        self._gather([rank.load.remote(state) for rank in self.ranks], "loading the trainer's state")

    def update(self, trajectories: list[Trajectory], advantages: torch.Tensor) -> dict[str, float]:
        """One update on the ranks: the same optimizer steps, metrics and random draws as :func:`ppo_update` with
        the same arguments in this process; rank 0's new weights are then loaded into ``mirror``.

        Raises:
            TrainingError: a rank died or raised (the group is closed; the message names the rank).
        """
        import ray

        plan = minibatch_plan(len(trajectories), self.config)  # this process's generator, as ppo_update draws it
        batch = ray.put((trajectories, advantages, plan, batch_loss_config(self.config.loss, trajectories),
                         self.config, self.pad_token_id))
        owned = shard_rows(trajectories, self.num_ranks)
        shards = self._gather([rank.update.remote(batch, rows) for rank, rows in zip(self.ranks, owned)],
                              f"update {self.version + 1}")
        self.version += 1
        if self.mirror is not None:
            self.mirror.load_state_dict(self.state_dict())
        return merge_shards(shards)

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Rank 0's weights (CPU tensors; fsdp2: gathered whole), as of update :attr:`version`."""
        return dict(self._from_rank_0("state_dict", "reading the weights"))

    def named_parameters(self) -> list[tuple[str, torch.Tensor]]:
        """Rank 0's parameters by name (CPU tensors; fsdp2: gathered whole), as of update :attr:`version`."""
        return list(self._from_rank_0("named_parameters", "reading the weights"))

    def pull_optimizer_state(self) -> None:
        """Loads rank 0's optimizer state (fsdp2: gathered whole) into ``mirror_optimizer`` (the trainer then
        checkpoints it)."""
        if self.mirror_optimizer is not None:
            self.mirror_optimizer.load_state_dict(self._from_rank_0("optimizer_state", "reading the optimizer state"))

    def loss_scaler_state(self) -> dict[str, Any] | None:
        """Rank 0's float16 loss scaler state (None without one), for the checkpoint."""
        return self._gather([self.ranks[0].loss_scaler_state.remote()], "reading the loss scale")[0]

    def load_loss_scaler_state(self, state: dict[str, Any] | None) -> None:
        """Gives every rank a checkpoint's loss scaler state (nothing to do for None)."""
        if state:
            self._gather([rank.load_loss_scaler_state.remote(state) for rank in self.ranks], "loading the loss scale")

    def _from_rank_0(self, method: str, what: str) -> Any:
        """Rank 0's answer to ``method``; with fsdp2 every rank is asked (it is a collective), rank 0's is kept."""
        ranks = self.ranks if self.strategy == "fsdp2" else self.ranks[:1]
        return self._gather([getattr(rank, method).remote() for rank in ranks], what)[0]

    def held_numel(self) -> list[dict[str, int]]:
        """What each rank holds between updates, in rank order (:meth:`LearnerRank.held_numel`)."""
        return list(self._gather([rank.held_numel.remote() for rank in self.ranks], "counting the parameters"))

    def pids(self) -> list[int]:
        """Each rank's process id, in rank order."""
        return [int(pid) for pid in self._gather([rank.pid.remote() for rank in self.ranks], "reading the pids")]

    def close(self) -> None:
        """Kills the ranks, removes the placement group and shuts Ray down if this group started it."""
        if self._closed:
            return
        self._closed = True
        import ray
        from ray.util.placement_group import remove_placement_group

        for rank in self.ranks:
            with contextlib.suppress(Exception):  # already gone
                ray.kill(rank, no_restart=True)
        with contextlib.suppress(Exception):  # already removed
            remove_placement_group(self._placement)
        if self._started_ray:
            ray.shutdown()
        if self._fault_dir is None:
            return
        faults = [path for path in map(self._fault_file, range(self.num_ranks))
                  if os.path.exists(path) and os.path.getsize(path)]
        if faults:  # kept, and said, whether or not an error named them (a peer may crash after the first death)
            logging.getLogger(__name__).warning("learner ranks wrote fault reports: %s", ", ".join(faults))
        else:
            shutil.rmtree(self._fault_dir, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _gather(self, refs: list[Any], what: str, timeout_s: float | None = None) -> list[Any]:
        """``ray.get`` of one call per rank (or rank 0 only), in order, waiting at most ``timeout_s`` for each (None:
        as long as it takes); on the first failure the group is closed and a TrainingError names the ranks that died
        (or the one that raised)."""
        import ray

        index = {ref: i for i, ref in enumerate(refs)}
        results: dict[int, Any] = {}
        pending = list(refs)
        while pending:
            ready, pending = ray.wait(pending, num_returns=1, timeout=timeout_s)
            if not ready:
                self.close()
                raise self._error(f"the learner ranks did not finish {what} within {timeout_s:g} s")
            try:
                results[index[ready[0]]] = ray.get(ready[0])
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as error:
                raise self._failed(what, index, ready[0], error, pending) from None
        return [results[i] for i in range(len(refs))]

    def _failed(self, what: str, index: dict[Any, int], first: Any, error: Exception,
                pending: list[Any]) -> Exception:
        """Closes the group after a failed call; the TrainingError to raise, naming the dead ranks (a rank that
        raises may only have lost its peer, so the others get a few seconds to report first)."""
        import ray

        if getattr(error, "actor_init_failed", False):  # the rank's constructor raised: no process died
            self.close()
            return self._error(f"learner rank {index[first]} failed while starting: {_last_line(error)}")
        died = {index[first]} if isinstance(error, ray.exceptions.RayActorError) else set()
        if not died and pending:
            done, _ = ray.wait(pending, num_returns=len(pending), timeout=10)
            for ref in done:
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError:
                    died.add(index[ref])
                except ray.exceptions.RayTaskError:  # a peer's error; the dead rank is the news
                    continue
        how = "; ".join(("" if len(died) == 1 else f"rank {rank}: ")  # read before close() removes empty reports
                        + describe_death(self._fault_file(rank) if self._fault_dir else None, error)
                        for rank in sorted(died))
        self.close()
        if died:
            ranks = ", ".join(str(rank) for rank in sorted(died))
            cause = f"learner rank {ranks} died during {what} ({how})"
        else:
            cause = f"learner rank {index[first]} failed during {what}: {_last_line(error)}"
        return self._error(f"{cause}; the learner group was shut down. Rerun the same command with the same "
                           f"output.dir (train.resume=true, the default) to resume from the last checkpoint")

    def _fault_file(self, rank: int) -> str:
        return os.path.join(self._fault_dir or "", f"rank{rank}.log")

    @staticmethod
    def _error(message: str) -> Exception:
        from rlvr_gym_agents.train import TrainingError

        return TrainingError(message)


def _last_line(error: Exception) -> str:
    """The last line of a Ray error's text (the exception the rank raised), at most 400 characters."""
    return str(error).strip().splitlines()[-1][:400]


def _state_by_name(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """An optimizer ``state_dict()`` keyed by parameter index (``torch.optim``'s layout: the i-th trainable parameter)
    keyed by parameter name instead (``torch.distributed.checkpoint``'s layout)."""
    return {"state": {names[int(i)]: value for i, value in state["state"].items()},
            "param_groups": [{**group, "params": [names[int(i)] for i in group["params"]]}
                             for group in state["param_groups"]]}


def _state_by_index(state: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """The inverse of :func:`_state_by_name`."""
    index = {name: i for i, name in enumerate(names)}
    return {"state": {index[name]: value for name, value in state["state"].items()},
            "param_groups": [{**group, "params": [index[name] for name in group["params"]]}
                             for group in state["param_groups"]]}


def _to_cpu(value: Any) -> Any:
    """``value`` (an optimizer state: nested dicts, lists, tensors) with every tensor moved to the CPU."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return {key: _to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_cpu(item) for item in value)
    return value
