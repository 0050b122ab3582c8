"""What a training run writes: metrics (JSONL, TensorBoard), checkpoints, the learning-curve plot."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlvr_gym.tracking import TensorBoardTracker, make_tracker


class MetricsLogger:
    """Appends one JSON object per record to ``metrics.jsonl`` (the run's own log, cut back on resume, TensorBoard's
    event files with it) and mirrors its scalars to the trackers of :mod:`rlvr_gym.tracking` (TensorBoard, wandb,
    MLflow) as ``<phase>/<key>`` at the record's step.

    Args:
        run_dir: the run directory.
        trackers: tracker names (:data:`rlvr_gym.tracking.TRACKERS` other than ``jsonl``), e.g. ``["tensorboard"]``.
        config: the run's configuration, logged to the trackers once.

    Raises:
        ValueError / ModuleNotFoundError: an unknown tracker, or one whose package is not installed (what to
            install is in the message).
    """

    def __init__(self, run_dir: Path, trackers: Sequence[str] = ("tensorboard",),
                 config: Mapping[str, Any] | None = None) -> None:
        self.path = run_dir / "metrics.jsonl"
        self.tracker = make_tracker([t for t in trackers if t != "jsonl"], run_dir, config=config)

    def log(self, record: dict[str, Any]) -> None:
        """Writes ``record`` (must hold ``phase`` and ``step``)."""
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, default=float) + "\n")
        self.tracker.log(*_tracked(record))

    def num_lines(self) -> int:
        """Records written so far (a checkpoint stores it, so a resumed run can drop what came after)."""
        if not self.path.is_file():
            return 0
        return sum(1 for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip())

    def truncate(self, num_lines: int) -> None:
        """Keeps the first ``num_lines`` records, in the log and in TensorBoard's event files: a resumed run writes
        the records after its checkpoint again, so none is lost and none repeated."""
        if not self.path.is_file():
            return
        lines = [line for line in self.path.read_text(encoding="utf-8").splitlines() if line.strip()]
        part = self.path.with_name(self.path.name + ".part")
        part.write_text("".join(line + "\n" for line in lines[:num_lines]), encoding="utf-8")
        part.replace(self.path)  # atomic: a kill here leaves the old log or the truncated one, never a half
        for tracker in self.tracker.trackers:  # TensorBoard's files follow the log (wandb/MLflow runs are new runs)
            if isinstance(tracker, TensorBoardTracker):
                tracker.rewrite(_tracked(json.loads(line)) for line in lines[:num_lines])

    def read(self) -> list[dict[str, Any]]:
        """All records so far."""
        return read_metrics(self.path.parent)

    def close(self) -> None:
        self.tracker.close()


def _tracked(record: Mapping[str, Any]) -> tuple[dict[str, Any], int]:
    """A log record as a tracker's ``(metrics, step)``: its keys as ``<phase>/<key>``."""
    return ({f"{record['phase']}/{key}": value for key, value in record.items() if key not in ("phase", "step")},
            int(record["step"]))


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` (:class:`MetricsLogger`), in the order written; [] when it has none.

    Each record holds ``phase`` (``sft``, ``eval`` or ``rl``) and ``step`` (0 for the warm start and the evaluation
    before RL; the evaluation after RL carries the last RL step).
    """
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def rng_state(generator: torch.Generator) -> dict[str, Any]:
    """Every random state a resumed run needs: Python, NumPy, torch and the sampler's generator."""
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "sampler": generator.get_state()}


def set_rng_state(state: dict[str, Any], generator: torch.Generator) -> None:
    """Inverse of :func:`rng_state`."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    generator.set_state(state["sampler"])


def save_model_dir(path: Path, model: torch.nn.Module, tokenizer: Any) -> None:
    """Writes ``path/`` as a model directory that loads like a hub model: weights, config, tokenizer (its class
    pinned to ``PreTrainedTokenizerFast``)."""
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)  # type: ignore[operator]
    tokenizer.save_pretrained(path)
    _pin_tokenizer_class(path)


def save_checkpoint(path: Path, model: torch.nn.Module, tokenizer: Any, optimizer: torch.optim.Optimizer,
                    step: int, generator: torch.Generator, extra: dict[str, Any] | None = None) -> None:
    """Writes ``path/`` as a loadable model directory plus ``trainer_state.pt`` (optimizer, step, RNG, extra).

    Atomic: the checkpoint is written to ``path.tmp`` (``trainer_state.pt`` last), the previous one is renamed to
    ``path.old``, ``path.tmp`` to ``path``, and ``path.old`` is removed. A kill at any point leaves either the old or
    the new checkpoint complete; :func:`recover_checkpoint` (called by :func:`load_checkpoint` and here) finishes or
    undoes the interrupted save, so nothing blocks a later run. Durable: every file of ``path.tmp`` and the directory
    itself are flushed to disk (``fsync``) before the renames, and the parent directory after them, so a power loss
    cannot leave a renamed checkpoint whose files are empty.
    """
    recover_checkpoint(path)
    tmp, old = _tmp(path), _old(path)
    _remove_tree(tmp)
    save_model_dir(tmp, model, tokenizer)
    torch.save({"optimizer": optimizer.state_dict(), "step": step, "rng": rng_state(generator),
                "extra": extra or {}}, tmp / "trainer_state.pt.part")
    _fsync_tree(tmp)
    (tmp / "trainer_state.pt.part").rename(tmp / "trainer_state.pt")
    _fsync(tmp)
    if path.exists():
        path.rename(old)
    tmp.rename(path)
    _fsync(path.parent)
    _remove_tree(old)


def _fsync(path: Path) -> None:
    """Flushes a file's or a directory's entries to disk (POSIX ``fsync`` on a read-only descriptor)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_tree(root: Path) -> None:
    """:func:`_fsync` on every file and directory under ``root`` (files first, ``root`` last)."""
    for directory, _, files in os.walk(root, topdown=False):
        for name in files:
            _fsync(Path(directory) / name)
        _fsync(Path(directory))


def recover_checkpoint(path: Path) -> None:
    """Cleans up after a save that was killed: a complete ``path.tmp`` (it has ``trainer_state.pt``) whose rename
    did not happen becomes ``path``; else a ``path.old`` stands in for a missing ``path``; leftovers are removed."""
    tmp, old = _tmp(path), _old(path)
    if not path.exists():
        if (tmp / "trainer_state.pt").is_file():
            tmp.rename(path)
        elif old.exists():
            old.rename(path)
    _remove_tree(tmp)
    _remove_tree(old)


def _tmp(path: Path) -> Path:
    return path.with_name(path.name + ".tmp")


def _old(path: Path) -> Path:
    return path.with_name(path.name + ".old")


def load_checkpoint(path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    generator: torch.Generator) -> tuple[int, dict[str, Any]]:
    """Restores model weights, optimizer, RNG states from ``path``; returns ``(step, extra)``.

    Raises:
        FileNotFoundError: when ``path`` has no ``trainer_state.pt``.
    """
    from safetensors.torch import load_file

    recover_checkpoint(path)
    state_file = path / "trainer_state.pt"
    if not state_file.is_file():
        raise FileNotFoundError(f"no checkpoint at {path} (expected {state_file})")
    weights = load_file(str(path / "model.safetensors"))
    model.load_state_dict(weights, strict=False)
    if getattr(model.config, "tie_word_embeddings", False):
        model.tie_weights()  # type: ignore[operator]
    state = torch.load(state_file, weights_only=False)
    optimizer.load_state_dict(state["optimizer"])
    set_rng_state(state["rng"], generator)
    return int(state["step"]), dict(state["extra"])


def _pin_tokenizer_class(folder: Path) -> None:
    """Makes ``AutoTokenizer.from_pretrained(folder)`` load the tokenizer saved there, as the project's loader does.

    The class is named ``PreTrainedTokenizerFast`` (the project's loader reads that name). transformers 5 (5.24
    checked) ignores that name for model types it lists in ``MODELS_WITH_INCORRECT_HUB_TOKENIZER_CLASS``, ``qwen2``
    among them: ``AutoTokenizer`` builds ``Qwen2Tokenizer``, which keeps only ``tokenizer.json``'s vocabulary and
    merges and puts Qwen2's byte-level pipeline around them. A byte-level BPE tokenizer built with that pipeline (the
    tiny policy's ``bpe``, Qwen's own) loads the same either way. A word-level vocabulary does not: it has no merges
    and its words are not byte-level symbols, so ``lookup(entity='Kelkel Lingath')`` came back as a few stray ids.
    For a ``WordLevel`` tokenizer the config also gets an ``auto_map`` naming ``PreTrainedTokenizerFast``:
    ``AutoTokenizer`` then skips the model type's class and, as remote code is refused for these model types
    unless ``trust_remote_code=True``, loads the class the config names (``trust_remote_code=True`` then fails
    loudly instead of mis-loading).
    """
    config_file = folder / "tokenizer_config.json"
    if not config_file.is_file():
        return
    config = json.loads(config_file.read_text(encoding="utf-8"))
    changed = dict(config)
    if config.get("tokenizer_class") in (None, "TokenizersBackend"):
        changed["tokenizer_class"] = "PreTrainedTokenizerFast"
    tokenizer_file = folder / "tokenizer.json"
    if changed.get("tokenizer_class") == "PreTrainedTokenizerFast" and tokenizer_file.is_file():
        model_type = json.loads(tokenizer_file.read_text(encoding="utf-8")).get("model", {}).get("type")
        if model_type == "WordLevel":
            changed["auto_map"] = {"AutoTokenizer": [None, "PreTrainedTokenizerFast"]}
    if changed != config:
        config_file.write_text(json.dumps(changed, indent=2) + "\n", encoding="utf-8")


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def plot_learning_curve(records: list[dict[str, Any]], out_file: Path) -> Path:
    """Plots training reward/success per RL step and held-out pass@1 (sampled, greedy) at each evaluation.

    Args:
        records: the run's metrics records (``phase`` = ``rl`` or ``eval``).
        out_file: the PNG to write.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rl = [r for r in records if r.get("phase") == "rl"]
    evals = [r for r in records if r.get("phase") == "eval"]
    fig, ax = plt.subplots(figsize=(7, 4))
    if rl:
        ax.plot([r["step"] for r in rl], [r["success_rate"] for r in rl], alpha=0.5, label="train rollouts: success")
    for key, style in (("pass@1_sampled", "o-"), ("pass@1_greedy", "s--")):
        points = [(r["step"], r[key]) for r in evals if r.get(key) is not None]
        if points:
            ax.plot(*zip(*points), style, label=f"held-out {key}")
    ax.set_xlabel("RL step")
    ax.set_ylabel("success rate")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out_file, dpi=110)
    plt.close(fig)
    return out_file
