"""A pool of environment workers on Ray: heavy envs (one browser each) run in actors, cheap ones in-process.

``EnvPool.make(env_id)`` returns an :class:`Env`. For ids matching ``remote`` (``"web/*"`` by default) it is a
:class:`RemoteEnv`, a proxy whose ``reset``/``step``/``fork``/``close`` run inside a Ray actor (an
:class:`EnvWorker`); for every other id it is the plain env from :func:`rlvr_gym.make`. The evaluation
harness and the rollout samplers take ``env_factory=pool.make`` and need no other code::

    with EnvPool(num_workers=2) as pool:
        env = pool.make("web/MiniWoB-v0")
        obs, info = env.reset(options={"task": task})
        obs, reward, terminated, truncated, info = env.step('click("4")')

Workers are long-lived processes; each holds any number of envs (a reset env and its forks share the
worker's browser). Envs are spread over ``num_workers`` workers, fewest envs first. A closed env is parked in
its worker and reused by the next ``make`` of the same id, so a web worker launches Chromium once.

Crashes: when a worker process dies (killed, out of memory, a browser took it down) or a call exceeds
``call_timeout_s``, the step that noticed it returns ``terminated=True`` with a typed failure in
``info["failure"]`` (``ENV_CRASH``, or ``TIMEOUT`` for a hung call), the worker is replaced, and the next
``reset`` of the same proxy runs on the new worker: the run goes on. A reset that hits a dead worker is
retried once on a fresh worker before it reports ``ENV_CRASH``.

Ray: ``ray`` is imported only when a pool first needs a worker. Without ``ray_address`` a small local
instance starts (``num_cpus`` CPUs, no dashboard; about 4 s on a 2-core machine); with it the pool joins
that cluster (``"auto"`` or ``"ray://host:10001"``). A pool that started Ray shuts it down on ``close()``.
No home-made multiprocessing: worker life cycle, scheduling and restarts are Ray's.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import signal
import threading
import traceback
from collections.abc import Sequence
from typing import Any, Self

from rlvr_gym.core import Env, ForkNotSupportedError, StepResult
from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym.registry import make as make_local
from rlvr_gym.registry import spec as env_spec


class EnvWorker:
    """The body of one Ray actor: holds envs by integer handle and runs their calls.

    Closing an env parks it (up to ``max_idle_envs``) instead of closing it, and the next ``create`` of the
    same id and arguments takes it back: ``reset`` starts every episode afresh, and a web env parked this way
    keeps the worker's browser running between episodes (a Chromium launch costs about 1 s). An env may
    define ``release_episode()`` to free what only its last episode needed (a web env closes its page) when
    it is parked.

    The worker holds each env class's shared resources (:meth:`rlvr_gym.Env.hold_shared_resources`: the code
    envs' pool of warm judging sandboxes) from its first env of that id until :meth:`shutdown`.

    Every method returns plain picklable values. Exceptions raised by an env propagate to the caller (the
    proxy turns them into ``ENV_CRASH`` failures).

    Args:
        max_idle_envs: how many closed envs to keep for reuse (0 closes them at once).
    """

    def __init__(self, max_idle_envs: int = 2) -> None:
        self._envs: dict[int, Env] = {}
        self._keys: dict[int, str] = {}
        self._idle: list[tuple[str, Env]] = []
        self._next_handle = 0
        self.max_idle_envs = max_idle_envs
        self._held = contextlib.ExitStack()  # what each env class shares, entered on its first create
        self._held_ids: set[str] = set()

    def pid(self) -> int:
        """The worker's process id."""
        return os.getpid()

    def create(self, env_id: str, kwargs: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Builds ``env_id`` with ``kwargs`` (or takes back a parked one); returns
        ``(handle, {"max_turns", "supports_fork", "pid", "reused"})``."""
        if env_id not in self._held_ids:
            self._held.enter_context(env_spec(env_id).hold_shared_resources())
            self._held_ids.add(env_id)
        key = repr((env_id, sorted(kwargs.items())))
        parked = next((i for i, (k, _) in enumerate(self._idle) if k == key), None)
        env = self._idle.pop(parked)[1] if parked is not None else make_local(env_id, **kwargs)
        handle = self._add(env, key)
        meta = {"max_turns": env.max_turns, "supports_fork": env.supports_fork, "pid": os.getpid()}
        return handle, {**meta, "reused": parked is not None}

    def reset(self, handle: int, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict[str, Any]]:
        """``env.reset(seed=seed, options=options)`` on the env behind ``handle``."""
        return self._envs[handle].reset(seed=seed, options=options)

    def step(self, handle: int, action: str) -> StepResult:
        """``env.step(action)`` on the env behind ``handle``."""
        return self._envs[handle].step(action)

    def fork(self, handle: int) -> int:
        """Forks the env behind ``handle`` inside this worker; returns the fork's handle."""
        return self._add(self._envs[handle].fork(), self._keys[handle])

    def close_env(self, handle: int) -> None:
        """Parks the env behind ``handle`` for reuse, or closes it when the park is full (no error if the
        handle is already gone)."""
        env, key = self._envs.pop(handle, None), self._keys.pop(handle, "")
        if env is None:
            return
        if len(self._idle) < self.max_idle_envs:
            release = getattr(env, "release_episode", None)
            if callable(release):  # e.g. a web env closes its page but keeps the browser
                release()
            self._idle.append((key, env))
        else:
            env.close()

    def num_envs(self) -> int:
        """How many envs this worker holds."""
        return len(self._envs)

    def shutdown(self) -> None:
        """Closes every env, parked ones included (their browsers and processes with them)."""
        envs = list(self._envs.values()) + [env for _, env in self._idle]
        self._envs, self._keys, self._idle = {}, {}, []
        for env in envs:
            try:
                env.close()
            except Exception:  # noqa: BLE001 - shutting down: close the others regardless
                traceback.print_exc()
        held, self._held, self._held_ids = self._held, contextlib.ExitStack(), set()
        held.close()

    def _add(self, env: Env, key: str) -> int:
        self._next_handle += 1
        self._envs[self._next_handle] = env
        self._keys[self._next_handle] = key
        return self._next_handle


class WorkerLost(RuntimeError):
    """A worker died or hung during a call. ``failure`` is the typed failure to report."""

    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


class EnvPool:
    """Makes envs, running the heavy ones in a pool of Ray actors.

    Args:
        num_workers: how many worker actors (processes) at most; each holds one browser for web envs.
        remote: ``fnmatch`` patterns of env ids that run in workers; other ids run in-process.
        ray_address: an existing cluster to join (``"auto"``, ``"ray://host:port"``); None starts a local one.
        num_cpus: CPUs of a local Ray instance (ignored when joining a cluster).
        worker_num_cpus: CPUs each worker reserves in Ray's scheduler (fractions allowed).
        call_timeout_s: seconds one reset/step/fork may take before the worker is declared hung, killed
            and replaced.
        max_idle_envs: closed envs each worker keeps for reuse (see :class:`EnvWorker`).

    Raises:
        ValueError: on ``num_workers < 1`` or a non-positive timeout.
    """

    def __init__(
        self,
        num_workers: int = 2,
        *,
        remote: Sequence[str] = ("web/*",),
        ray_address: str | None = None,
        num_cpus: int = 2,
        worker_num_cpus: float = 0.5,
        call_timeout_s: float = 120.0,
        max_idle_envs: int = 2,
    ) -> None:
        if num_workers < 1:
            raise ValueError(f"num_workers must be >= 1, got {num_workers}")
        if call_timeout_s <= 0:
            raise ValueError(f"call_timeout_s must be > 0, got {call_timeout_s}")
        self.num_workers = num_workers
        self.remote_patterns = tuple(remote)
        self.ray_address = ray_address
        self.num_cpus = num_cpus
        self.worker_num_cpus = worker_num_cpus
        self.call_timeout_s = call_timeout_s
        self.max_idle_envs = max_idle_envs
        self._actors: list[Any] = [None] * num_workers
        self._load = [0] * num_workers
        self._rotation = 0
        self._started_ray = False
        self._closed = False
        self._lock = threading.RLock()  # the evaluation harness makes and steps envs from several threads
        self.restarts = 0

    # -- public API -----------------------------------------------------------------------------------
    def is_remote(self, env_id: str) -> bool:
        """Whether ``env_id`` runs in a worker."""
        return any(fnmatch.fnmatchcase(env_id, pattern) for pattern in self.remote_patterns)

    def make(self, env_id: str, **kwargs: Any) -> Env:
        """Builds ``env_id``: a :class:`RemoteEnv` for remote ids, else ``rlvr_gym.make(env_id, **kwargs)``.

        Raises:
            UnknownEnvError: when the id is not registered (checked in this process first).
            RuntimeError: when the pool is closed.
        """
        if self._closed:
            raise RuntimeError("this EnvPool is closed; create a new one")
        if not self.is_remote(env_id):
            return make_local(env_id, **kwargs)
        env_spec(env_id)  # fail fast, with the registry's helpful message, before starting anything
        return RemoteEnv(self, env_id, kwargs)

    __call__ = make

    def worker_pids(self) -> list[int | None]:
        """The process id of each worker slot (None for a slot not started yet)."""
        pids: list[int | None] = []
        for slot, actor in enumerate(self._actors):
            pids.append(None if actor is None else self.call(slot, actor, "pid"))
        return pids

    def kill_worker(self, slot: int) -> None:
        """Sends SIGKILL to the worker in ``slot`` (for crash tests and chaos drills)."""
        pid = self.worker_pids()[slot]
        if pid is not None:
            os.kill(pid, signal.SIGKILL)

    def close(self) -> None:
        """Closes every env in every worker, ends the workers, and stops Ray if this pool started it."""
        if self._closed:
            return
        self._closed = True
        if all(actor is None for actor in self._actors) and not self._started_ray:
            return
        ray = _import_ray()
        for slot, actor in enumerate(self._actors):
            if actor is None:
                continue
            with contextlib.suppress(Exception):  # a dead or hung worker is killed below anyway
                ray.get(actor.shutdown.remote(), timeout=30)
            ray.kill(actor, no_restart=True)
            self._actors[slot] = None
        if self._started_ray:
            ray.shutdown()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- used by RemoteEnv ----------------------------------------------------------------------------
    def lease_slot(self, slot: int | None = None) -> int:
        """Counts one more env in ``slot`` (by default the slot holding the fewest envs, ties in turn);
        returns the slot."""
        with self._lock:
            if slot is None:  # ties go round-robin, so consecutive envs spread over the workers
                order = [(self._rotation + i) % self.num_workers for i in range(self.num_workers)]
                slot = min(order, key=lambda s: self._load[s])
                self._rotation = (slot + 1) % self.num_workers
            self._load[slot] += 1
            return slot

    def release_slot(self, slot: int) -> None:
        """Counts one env fewer in ``slot``."""
        with self._lock:
            self._load[slot] = max(0, self._load[slot] - 1)

    def current_actor(self, slot: int) -> Any:
        """The actor now serving ``slot`` (None when not started or just replaced)."""
        return self._actors[slot]

    def actor(self, slot: int) -> Any:
        """The live actor of ``slot``, started on first use."""
        with self._lock:
            if self._closed:
                raise RuntimeError("this EnvPool is closed")
            if self._actors[slot] is None:
                ray = self._ensure_ray()
                worker_class = ray.remote(EnvWorker)
                self._actors[slot] = worker_class.options(num_cpus=self.worker_num_cpus, max_restarts=0).remote(
                    self.max_idle_envs)
            return self._actors[slot]

    def call(self, slot: int, actor: Any, method: str, *args: Any) -> Any:
        """Runs ``actor.method(*args)`` and waits at most ``call_timeout_s``.

        Raises:
            WorkerLost: when the worker died (``ENV_CRASH``) or hung (``TIMEOUT``); the slot is then
                replaced so the next call starts a fresh worker.
            Exception: whatever the env raised inside a live worker (the worker is kept).
        """
        ray = _import_ray()
        try:
            return ray.get(getattr(actor, method).remote(*args), timeout=self.call_timeout_s)
        except ray.exceptions.GetTimeoutError:
            failure = Failure(
                FailureKind.TIMEOUT,
                f"the env worker did not answer {method}() within {self.call_timeout_s:g} s; it was restarted",
                {"method": method, "timeout_s": self.call_timeout_s},
            )
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError) as error:
            failure = Failure(
                FailureKind.ENV_CRASH,
                f"the env worker died during {method}(); it was restarted",
                {"method": method, "error": str(error).splitlines()[0][:300] if str(error) else type(error).__name__},
            )
        except ray.exceptions.RayTaskError as error:
            raise error.as_instanceof_cause() from None
        self._replace(slot, actor)
        raise WorkerLost(failure)

    # -- internals ------------------------------------------------------------------------------------
    def _replace(self, slot: int, dead_actor: Any) -> None:
        with self._lock:
            if self._actors[slot] is not dead_actor:
                return  # another proxy already replaced it
            self._actors[slot] = None
            self.restarts += 1
        with contextlib.suppress(Exception):  # already gone
            _import_ray().kill(dead_actor, no_restart=True)

    def _ensure_ray(self) -> Any:
        self._started_ray = ensure_ray(self.ray_address, self.num_cpus) or self._started_ray
        return _import_ray()


def ensure_ray(address: str | None = None, num_cpus: int | None = 2) -> bool:
    """Starts or joins Ray once per process: the one place the project initialises Ray (env pools and the
    learning side's rollout workers share it).

    Args:
        address: an existing cluster to join (``"auto"``, ``"ray://host:10001"``); None starts a local instance.
        num_cpus: CPUs of a local instance (None: all of this machine's); ignored when joining a cluster.

    Returns:
        True when this call started or joined Ray (the caller then owns ``ray.shutdown()``); False when Ray was
        already initialised in this process.

    Raises:
        ModuleNotFoundError: Ray is not installed.
        ConnectionError: ``address`` names no reachable cluster (Ray's own error).
    """
    ray = _import_ray()
    if ray.is_initialized():
        return False
    if address is None:
        ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
    else:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    return True


class RemoteEnv(Env):
    """A proxy env whose episode runs in a pool worker. Same contract as any :class:`Env`.

    ``fork()`` forks inside the worker (for web envs: replay on a new page of the same browser); if the
    worker is gone it replays the action history on a fresh worker instead (:meth:`Env.fork_by_replay`).

    Version History:
        v0: first version (the version of the env it proxies is that env's).
    """

    def __init__(
        self, pool: EnvPool, env_id: str, kwargs: dict[str, Any], *, attach: tuple[int, Any, int] | None = None
    ) -> None:
        super().__init__()
        self.pool, self.env_id, self.kwargs = pool, env_id, dict(kwargs)
        self.spec_id = env_id
        self._actor: Any = None
        self._handle: int | None = None
        self._crash: Failure | None = None
        self._closed = False
        self.worker_pid, self.reused_parked_env = -1, False
        if attach is None:  # a new env on the least loaded worker
            self._slot = pool.lease_slot()
            try:
                self._create()
            except WorkerLost:
                self._handle = None  # the worker died while building it: reset() builds it on a fresh one
        else:  # an env already built in a worker (a fork)
            self._slot, self._actor, self._handle = attach
            pool.lease_slot(self._slot)

    def _create(self) -> None:
        """Builds the env on this proxy's worker (started or restarted as needed)."""
        self._actor = self.pool.actor(self._slot)
        self._handle, meta = self.pool.call(self._slot, self._actor, "create", self.env_id, self.kwargs)
        self.max_turns = int(meta["max_turns"])
        self.supports_fork = bool(meta["supports_fork"])  # type: ignore[misc]  # per instance, from the env
        self.worker_pid = int(meta["pid"])
        self.reused_parked_env = bool(meta["reused"])

    def _reset(self, task: Any) -> tuple[str, dict[str, Any]]:
        seed, options = self._reset_args
        self._crash = None
        for attempt in range(2):
            try:
                if self._handle is None or self._actor is not self.pool.current_actor(self._slot):
                    self._create()
                return self.pool.call(self._slot, self._actor, "reset", self._handle, seed, options)  # type: ignore[no-any-return]
            except WorkerLost as lost:
                self._handle = None
                if attempt == 1:
                    self._crash = lost.failure
        assert self._crash is not None
        return f"The environment crashed while starting the episode: {self._crash.message}.", {"failure": self._crash}

    def _step(self, action: str) -> StepResult:
        if self._crash is not None:
            return self._crashed_result(self._crash)
        try:
            result = self.pool.call(self._slot, self._actor, "step", self._handle, action)
        except WorkerLost as lost:
            self._handle = None
            return self._crashed_result(lost.failure)
        except Exception as error:  # noqa: BLE001 - an env bug must not stop the run
            failure = Failure(FailureKind.ENV_CRASH, f"the env raised {type(error).__name__}: {error}",
                              {"traceback": traceback.format_exc()[-2000:]})
            return self._crashed_result(failure)
        return StepResult(*result)

    @staticmethod
    def _crashed_result(failure: Failure) -> StepResult:
        observation = f"The environment crashed: {failure.message}. The episode is over."
        return StepResult(observation, 0.0, True, False, {"failure": failure, "success": False})

    def fork(self) -> Env:
        """Returns an independent proxy in the same state (see the class docstring).

        Raises:
            ForkNotSupportedError: when the proxied env cannot fork.
        """
        if not self.supports_fork:
            raise ForkNotSupportedError(f"{self.env_id} cannot fork; tree rollouts branch at the root")
        if self._crash is None and self._handle is not None:
            try:
                handle = self.pool.call(self._slot, self._actor, "fork", self._handle)
            except WorkerLost:
                self._handle = None
            else:
                clone = RemoteEnv(self.pool, self.env_id, self.kwargs, attach=(self._slot, self._actor, handle))
                self._copy_episode_to(clone)
                return clone
        return self.fork_by_replay()

    def _copy_episode_to(self, clone: RemoteEnv) -> None:
        clone.max_turns, clone.supports_fork = self.max_turns, self.supports_fork  # type: ignore[misc]
        clone.turn, clone.task, clone.action_history = self.turn, self.task, list(self.action_history)
        clone._reset_args, clone._done, clone._started = self._reset_args, self._done, self._started
        clone.last_observation, clone.worker_pid = self.last_observation, self.worker_pid

    def spawn(self) -> Env:
        """A new proxy for the same env id and arguments, from the same pool."""
        return self.pool.make(self.env_id, **self.kwargs)

    def close(self) -> None:
        """Closes the env in its worker and frees its place in the pool. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.pool.release_slot(self._slot)
        if self._handle is not None and self._actor is self.pool.current_actor(self._slot):
            try:
                self.pool.call(self._slot, self._actor, "close_env", self._handle)
            except WorkerLost:
                pass
        self._handle = None

    def __deepcopy__(self, memo: dict[int, Any]) -> RemoteEnv:
        raise TypeError("a RemoteEnv cannot be deep-copied; use env.fork()")


def _import_ray() -> Any:
    try:
        import ray
    except ModuleNotFoundError:
        raise ModuleNotFoundError(
            "EnvPool runs env workers on Ray, which is not installed; `pip install 'ray>=2.40'`"
        ) from None
    return ray
