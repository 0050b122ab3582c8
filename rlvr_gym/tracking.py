"""Experiment tracking behind one small interface, and progress bars that behave in logs. No torch.

A :class:`Tracker` takes the run's config once, then scalar metrics by step::

    from rlvr_gym.tracking import make_tracker
    tracker = make_tracker(["jsonl", "tensorboard", "wandb"], "runs/exp1", project="rlvr", config=config)
    tracker.log({"train/reward": 0.4, "eval/pass@1": 0.2}, step=10)
    tracker.close()

Back-ends (:data:`TRACKERS`): ``jsonl`` (``metrics.jsonl``, one JSON object per call, always available),
``tensorboard`` (event files under ``<dir>/tensorboard``, written with the ``tensorboard`` package's own
``tensorboard.summary.Writer``: no torch, no TensorFlow), ``wandb`` (``pip install 'rlvr-gym[wandb]'``;
``WANDB_MODE=offline`` works without an account) and ``mlflow`` (``pip install 'rlvr-gym[mlflow]'``; a local
``mlruns/`` file store unless ``MLFLOW_TRACKING_URI`` names a server). Non-numeric values are skipped by the
scalar back-ends and kept by ``jsonl``.

:func:`progress_bar` is a tqdm bar in a terminal and, when its stream is not a terminal (a log file, CI), a
plain line at most every ``log_interval_s`` seconds instead of thousands of carriage-return redraws.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol, runtime_checkable

from tqdm.auto import tqdm

__all__ = [
    "TRACKERS",
    "JsonlTracker",
    "MLflowTracker",
    "MultiTracker",
    "TensorBoardTracker",
    "Tracker",
    "WandbTracker",
    "make_tracker",
    "progress_bar",
]


@runtime_checkable
class Tracker(Protocol):
    """Receives a run's config and metrics. Implementations must accept any JSON-able config."""

    def log_config(self, config: Mapping[str, Any]) -> None:
        """Records the run's configuration (once, before the first :meth:`log`)."""
        ...

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Records ``metrics`` (name -> value; scalar back-ends keep finite numbers only) at ``step`` (>= 0)."""
        ...

    def close(self) -> None:
        """Flushes and releases the back-end; calling it twice is safe."""
        ...


def scalars(metrics: Mapping[str, Any]) -> dict[str, float]:
    """The finite int/float/bool values of ``metrics`` as floats (what scalar back-ends can plot)."""
    kept = {}
    for name, value in metrics.items():
        if isinstance(value, bool | int | float) and math.isfinite(float(value)):
            kept[name] = float(value)
    return kept


class JsonlTracker:
    """Appends ``{"step": step, "time_s": ..., **metrics}`` to ``<directory>/metrics.jsonl`` and writes the
    config to ``<directory>/config.json``.

    Args:
        directory: the run directory (created).
    """

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.path = self.directory / "metrics.jsonl"
        self._file: IO[str] | None = self.path.open("a", encoding="utf-8")

    def log_config(self, config: Mapping[str, Any]) -> None:
        (self.directory / "config.json").write_text(json.dumps(dict(config), indent=2, default=str) + "\n")

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        if self._file is None:
            raise RuntimeError("JsonlTracker.log() after close()")
        self._file.write(json.dumps({"step": step, "time_s": time.time(), **metrics}, default=str) + "\n")
        self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoardTracker:
    """Scalars into TensorBoard event files under ``<directory>`` (``tensorboard --logdir <directory>``); the
    config as ``<directory>/config.json``.

    Args:
        directory: the event-file directory (created).

    Raises:
        ModuleNotFoundError: when ``tensorboard`` is not installed (``pip install tensorboard``).
    """

    def __init__(self, directory: str | Path) -> None:
        self._summary = _require("tensorboard.summary", "tensorboard", "tensorboard")
        self.directory = Path(directory)
        self._writer: Any = self._summary.Writer(str(self.directory))

    def rewrite(self, history: Iterable[tuple[Mapping[str, Any], int]]) -> None:
        """Replaces every event file of the directory with ``history`` (``(metrics, step)`` pairs, in order) and
        goes on appending after it. A resumed run calls this with its log cut back to its checkpoint: TensorBoard
        keeps both copies of a step written twice (it drops none on reload), so the events after the checkpoint
        would otherwise show twice."""
        self.close()
        for path in self.directory.glob("events.out.tfevents.*"):
            path.unlink()
        self._writer = self._summary.Writer(str(self.directory))
        for metrics, step in history:
            for name, value in scalars(metrics).items():
                self._writer.add_scalar(name, value, step)
        self._writer.flush()

    def log_config(self, config: Mapping[str, Any]) -> None:
        # tensorboard's own Writer writes scalars only; the config goes beside the event files.
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / "config.json").write_text(json.dumps(dict(config), indent=2, default=str) + "\n")

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for name, value in scalars(metrics).items():
            self._writer.add_scalar(name, value, step)
        self._writer.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None


class WandbTracker:
    """A Weights & Biases run (``wandb.init``); ``WANDB_MODE=offline`` or ``mode="offline"`` needs no account.
    wandb keeps a ``wandb-core`` service process until the interpreter exits or ``wandb.teardown()``.

    Args:
        directory: where wandb writes its files (``<directory>/wandb``).
        project: the wandb project.
        name: the run name (default: the directory's name).
        **init_kwargs: more ``wandb.init`` arguments (``mode``, ``entity``, ``tags``, ...).

    Raises:
        ModuleNotFoundError: when ``wandb`` is not installed (``pip install 'rlvr-gym[wandb]'``).
    """

    def __init__(self, directory: str | Path, project: str = "rlvr-gym", name: str | None = None,
                 **init_kwargs: Any) -> None:
        wandb = _require("wandb", "wandb", "wandb")
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.run: Any = wandb.init(project=project, name=name or Path(directory).resolve().name, dir=str(directory),
                                   reinit="create_new", **init_kwargs)

    def log_config(self, config: Mapping[str, Any]) -> None:
        self.run.config.update(dict(config), allow_val_change=True)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        self.run.log(scalars(metrics), step=step, commit=True)  # visible at once, not at the next step

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


class MLflowTracker:
    """An MLflow run in experiment ``project`` (tracking URI from ``MLFLOW_TRACKING_URI``, e.g. an MLflow
    server, else a local file store ``<directory>/mlruns``, for which it sets ``MLFLOW_ALLOW_FILE_STORE=true``:
    MLflow 3 keeps file stores in maintenance mode); the config as params (flattened ``a.b`` keys).

    Args:
        directory: the run directory; its ``mlruns/`` is the default store.
        project: the experiment name.
        name: the run name (default: the directory's name).
        tracking_uri: overrides the store.

    Raises:
        ModuleNotFoundError: when ``mlflow`` is not installed (``pip install 'rlvr-gym[mlflow]'``).
    """

    def __init__(self, directory: str | Path, project: str = "rlvr-gym", name: str | None = None,
                 tracking_uri: str | None = None) -> None:
        import os

        mlflow = _require("mlflow", "mlflow-skinny", "mlflow")
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        if uri is None:  # a local store needs no server; mlflow-skinny has no SQL stores, so a file store
            uri = (Path(directory).resolve() / "mlruns").as_uri()
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")  # mlflow 3 refuses file stores otherwise
        self.client: Any = mlflow.MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(project)
        experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(project)
        run = self.client.create_run(experiment_id, run_name=name or Path(directory).resolve().name)
        self.run_id: str | None = run.info.run_id

    def log_config(self, config: Mapping[str, Any]) -> None:
        assert self.run_id is not None
        for key, value in _flatten(config).items():
            self.client.log_param(self.run_id, key, str(value)[:6000])

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        assert self.run_id is not None
        for name, value in scalars(metrics).items():
            self.client.log_metric(self.run_id, _mlflow_key(name), value, step=step)

    def close(self) -> None:
        if self.run_id is not None:
            self.client.set_terminated(self.run_id)
            self.run_id = None


class MultiTracker:
    """Sends every call to each of several trackers, in order."""

    def __init__(self, trackers: Sequence[Tracker]) -> None:
        self.trackers = list(trackers)

    def log_config(self, config: Mapping[str, Any]) -> None:
        for tracker in self.trackers:
            tracker.log_config(config)

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        for tracker in self.trackers:
            tracker.log(metrics, step)

    def close(self) -> None:
        for tracker in self.trackers:
            tracker.close()


TRACKERS = ("jsonl", "tensorboard", "wandb", "mlflow")
"""The back-end names :func:`make_tracker` accepts."""


def make_tracker(names: Sequence[str], directory: str | Path, *, project: str = "rlvr-gym",
                 config: Mapping[str, Any] | None = None) -> MultiTracker:
    """Builds the named back-ends (see :data:`TRACKERS`) for one run directory and logs ``config`` to them.

    ``tensorboard`` writes under ``<directory>/tensorboard``; the others as their classes say.

    Raises:
        ValueError: on an unknown name (naming the known ones).
        ModuleNotFoundError: when a named back-end's package is missing (saying what to install).
    """
    unknown = sorted(set(names) - set(TRACKERS))
    if unknown:
        raise ValueError(f"unknown trackers {unknown}; known: {', '.join(TRACKERS)}")
    directory = Path(directory)
    builders: dict[str, Callable[[], Tracker]] = {
        "jsonl": lambda: JsonlTracker(directory),
        "tensorboard": lambda: TensorBoardTracker(directory / "tensorboard"),
        "wandb": lambda: WandbTracker(directory, project),
        "mlflow": lambda: MLflowTracker(directory, project),
    }
    tracker = MultiTracker([builders[name]() for name in dict.fromkeys(names)])
    if config is not None:
        tracker.log_config(config)
    return tracker


def _require(module: str, package: str, extra: str) -> Any:
    import importlib

    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name and module.startswith(error.name):
            raise ModuleNotFoundError(f"the {extra} tracker needs `{package}`: pip install 'rlvr-gym[{extra}]'",
                                      name=error.name) from None
        raise


def _flatten(config: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def _mlflow_key(name: str) -> str:
    """MLflow keys allow letters, digits, ``_ - . / space``; ``pass@1`` becomes ``pass_at_1``."""
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in name.replace("@", "_at_"))


# -- progress bars ------------------------------------------------------------------------------------------
LOG_INTERVAL_S = 30.0
"""Seconds between two progress lines when the stream is not a terminal."""


class _LineProgress(tqdm):  # type: ignore[misc]
    """A tqdm that prints its status as a full line (no carriage return) at most every ``mininterval``."""

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg == "":  # tqdm clears the bar on close(leave=False): nothing to clear in a log
            return False
        self.fp.write((msg if msg is not None else self.__str__()) + "\n")
        self.fp.flush()
        return True

    def close(self) -> None:
        last_printed: int = getattr(self, "last_print_n", -1)
        if not self.disable and self.n != last_printed:
            self.display()  # the final count, even inside the interval
            self.last_print_n = self.n
        super().close()


def progress_bar(total: int | None = None, *, desc: str = "", unit: str = "it", enabled: bool = True,
                 file: IO[str] | None = None, log_interval_s: float = LOG_INTERVAL_S, **tqdm_kwargs: Any) -> tqdm:
    """A progress bar that suits where it writes: tqdm's redrawn bar when ``file`` (default ``sys.stderr``) is a
    terminal, else one plain line at most every ``log_interval_s`` seconds (and a last one at the end).

    Use it like ``tqdm`` (``with progress_bar(n, desc="episodes") as bar: bar.update(1)``); ``enabled=False``
    makes it silent. Extra keyword arguments go to tqdm.
    """
    stream = file if file is not None else sys.stderr
    interactive = bool(getattr(stream, "isatty", lambda: False)())
    if interactive:
        return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=stream, **tqdm_kwargs)
    tqdm_kwargs["leave"] = False  # close() prints the last line itself; leave=True would add an empty one
    tqdm_kwargs.setdefault("bar_format", _LOG_FORMAT if total else "{desc}: {n_fmt} [{elapsed}, {rate_fmt}]")
    return _LineProgress(total=total, desc=desc, unit=unit, disable=not enabled, file=stream,
                         mininterval=log_interval_s, maxinterval=max(log_interval_s, 10.0), **tqdm_kwargs)


_LOG_FORMAT = "{desc}: {n_fmt}/{total_fmt} ({percentage:.0f}%) [{elapsed}<{remaining}, {rate_fmt}]"
