"""Train with tree rollouts: a trainer recipe plus a ``tree:`` section, run by the flat trainer.

Usage::

    .venv/bin/python -m rlvr_gym_agents.tree_train agents/recipes/textworld-tree.yaml seed=1 tree.branch.alpha=0.3

The recipe is an ordinary :mod:`rlvr_gym_agents.config` recipe with one more top-level section, ``tree:``
(the fields of :class:`~rlvr_gym_agents.tree_sampler.TreeSamplerConfig`, with ``branch:`` holding
:class:`~rlvr_gym_agents.tree_branching.BranchConfig`). Each RL step grows one tree per task with
``train.group_size`` leaves instead of sampling ``group_size`` independent episodes; everything else (warm
start, evaluation, update, checkpoints) is :func:`rlvr_gym_agents.trainer.train` unchanged.

Credit is ARPO's "soft" attribution: the trainer's group estimator over the leaves of each tree (the leaves
of a task are consecutive rows, exactly the trainer's groups), so a shared prefix is credited once per leaf
below it. Until the trainer has a sampler hook, the tree sampler is plugged in by replacing the trainer
module's ``run_episodes`` for the duration of the run (:func:`tree_rollouts`); per-segment credit modes
(TreeRL, ARPO-hard) need the trainer to take per-token advantages, which
:func:`rlvr_gym_agents.advantages.broadcast_to_tokens` already accepts as a (B, T) tensor.
Tree metrics of every step go to ``<output.dir>/tree_metrics.jsonl``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

import rlvr_gym
from rlvr_gym import Env, Task
from rlvr_gym_agents import trainer
from rlvr_gym_agents.chat import ChatFormat
from rlvr_gym_agents.config import ConfigError, TrainConfig, load_config
from rlvr_gym_agents.policy import Policy, SamplingParams
from rlvr_gym_agents.rollout import Trajectory
from rlvr_gym_agents.tree_branching import BranchConfig
from rlvr_gym_agents.tree_sampler import TreeSampler, TreeSamplerConfig


def load_tree_recipe(recipe: str | Path, overrides: Sequence[str] = ()) -> tuple[TrainConfig, TreeSamplerConfig]:
    """Splits a tree recipe into the trainer's config and the tree sampler's config.

    ``tree.*`` overrides go to the tree section, every other override to the trainer. The tree's
    ``num_leaves`` is derived here: it equals ``train.group_size``.

    Raises:
        FileNotFoundError: no such recipe. ConfigError: unknown keys, bad values, or a ``tree.num_leaves``
            that differs from ``train.group_size``.
    """
    path = Path(recipe)
    if not path.is_file():
        raise FileNotFoundError(f"recipe {path} not found (recipes live in agents/recipes/*.yaml)")
    raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    tree_raw = dict(raw.pop("tree", None) or {})
    trainer_overrides = []
    for override in overrides:
        key, sep, value = override.partition("=")
        if key.startswith("tree.") and sep:
            _set_path(tree_raw, key.split(".")[1:], yaml.safe_load(value))
        else:
            trainer_overrides.append(override)
    config = _load_trainer_config(raw, trainer_overrides, path)
    tree_config = _build_tree_config(tree_raw)
    if "num_leaves" in tree_raw and tree_config.num_leaves != config.train.group_size:
        raise ConfigError(
            f"tree.num_leaves ({tree_config.num_leaves}) must equal train.group_size "
            f"({config.train.group_size}); set only train.group_size"
        )
    tree_config.num_leaves = config.train.group_size
    tree_config.reuse_kv_cache = config.rollout.reuse_kv_cache
    tree_config.max_turns = config.env.max_turns
    return config, tree_config


def _load_trainer_config(raw: dict[str, Any], overrides: list[str], recipe: Path) -> TrainConfig:
    """The trainer's own loader (validation, overrides, derived values) on the recipe without ``tree:``."""
    with tempfile.TemporaryDirectory() as scratch:
        path = Path(scratch) / recipe.name
        path.write_text(yaml.safe_dump(raw), encoding="utf-8")
        return load_config(path, overrides)


def _set_path(raw: dict[str, Any], keys: list[str], value: Any) -> None:
    for key in keys[:-1]:
        raw = raw.setdefault(key, {})
    raw[keys[-1]] = value


def _build_tree_config(raw: dict[str, Any]) -> TreeSamplerConfig:
    branch_raw = raw.pop("branch", None) or {}
    known = {f.name for f in dataclasses.fields(TreeSamplerConfig)} - {"branch"}
    known_branch = {f.name for f in dataclasses.fields(BranchConfig)}
    unknown = sorted(set(raw) - known) + [f"branch.{k}" for k in sorted(set(branch_raw) - known_branch)]
    if unknown:
        raise ConfigError(f"unknown tree keys {unknown}; valid: {sorted(known)} and branch.{sorted(known_branch)}")
    try:
        return TreeSamplerConfig(branch=BranchConfig(**branch_raw), **raw)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"invalid tree section: {error}") from None


def tree_episodes(tree_config: TreeSamplerConfig, metrics_path: Path | None = None) -> Callable[..., list[Trajectory]]:
    """A drop-in for :func:`rlvr_gym_agents.rollout.run_episodes` that grows trees.

    The returned function takes the trainer's batch (each task repeated ``num_leaves`` times in a row) and
    returns the leaves' trajectories in the same order: tree by tree, leaves in creation order.
    """

    samplers: dict[tuple[int, int, int], TreeSampler] = {}

    def run(
        policy: Policy,
        chat: ChatFormat,
        batch: Sequence[Task],
        sampling: SamplingParams,
        *,
        reuse_kv_cache: bool = True,
        env_factory: Callable[..., Env] = rlvr_gym.make,
        max_turns: int | None = None,
        on_turn: Callable[[int], None] | None = None,
    ) -> list[Trajectory]:
        n = tree_config.num_leaves
        tasks = list(batch[::n])
        if len(batch) != n * len(tasks) or any(batch[i].id != tasks[i // n].id for i in range(len(batch))):
            raise ValueError(f"tree rollouts need each task repeated num_leaves={n} times in a row")
        config = dataclasses.replace(tree_config, reuse_kv_cache=reuse_kv_cache, max_turns=max_turns)
        key = (id(policy), id(chat), id(env_factory))
        if key not in samplers:  # one sampler per run: its call counter varies the branching draws per step
            samplers[key] = TreeSampler(policy, chat, config, env_factory)
        rollout = samplers[key].sample(tasks, sampling)
        if metrics_path is not None:
            with metrics_path.open("a", encoding="utf-8") as out:
                out.write(json.dumps(rollout.metrics, default=str) + "\n")
        return [t for tree in rollout.trees for t in tree.trajectories()]

    return run


@contextlib.contextmanager
def tree_rollouts(tree_config: TreeSamplerConfig, metrics_path: Path | None = None) -> Iterator[None]:
    """Within the block, the trainer samples rollout trees instead of flat episodes."""
    original = trainer.run_episodes
    trainer.run_episodes = tree_episodes(tree_config, metrics_path)  # type: ignore[assignment]
    try:
        yield
    finally:
        trainer.run_episodes = original  # type: ignore[assignment]


def train_tree(recipe: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Runs a tree recipe; returns the trainer's summary."""
    config, tree_config = load_tree_recipe(recipe, overrides)
    run_dir = Path(config.output.dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "tree_config.json").write_text(
        json.dumps(dataclasses.asdict(tree_config), indent=2) + "\n", encoding="utf-8"
    )
    with tree_rollouts(tree_config, run_dir / "tree_metrics.jsonl"):
        return trainer.train(config)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlvr_gym_agents.tree_train RECIPE [key=value ...]``; returns the exit status."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if args else 2
    try:
        train_tree(args[0], args[1:])
    except (ConfigError, FileNotFoundError) as error:
        print(f"tree_train: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
