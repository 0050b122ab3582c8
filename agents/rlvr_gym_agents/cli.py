"""Command-line entry points of the learning side.

``rlvr-gym train RECIPE [key=value ...]`` delegates to :func:`train_main`; ``rlvr-gym eval --agent SPEC``
builds its agent with :func:`load_agent` (a model directory or hub id).
"""

from __future__ import annotations

import argparse
import sys
import time

import psutil

from rlvr_gym import UnknownEnvError
from rlvr_gym.tasks import SuiteNotFoundError
from rlvr_gym_agents.config import ConfigError, load_config
from rlvr_gym_agents.evaluate import PolicyAgent
from rlvr_gym_agents.evaluate import load_agent as _load_agent
from rlvr_gym_agents.policy.transformers import UnknownModelError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def train_main(argv: list[str]) -> int:
    """Runs ``rlvr-gym train RECIPE [key=value ...]``; returns the exit status.

    Bad input fails before any work (:func:`rlvr_gym_agents.train.check_recipe_inputs`). A failure the user can fix is printed as one line,
    ``rlvr-gym train: <message>`` on stderr, without a traceback.

    Returns:
        0 on success; 1 when the run failed (:class:`~rlvr_gym_agents.train.TrainingError`, e.g. every episode of a
        step crashed); 2 on bad input (malformed or unknown recipe keys, an unknown env id, suite or model), as
        every ``rlvr-gym`` command.

    Example: ``rlvr-gym train agents/recipes/quickstart.yaml seed=1 train.num_steps=30``; on Ray rollout workers:
    ``rlvr-gym train agents/recipes/quickstart.yaml cluster.rollout_workers=2 --ray-address auto``.
    """
    parser = argparse.ArgumentParser(prog="rlvr-gym train", description="Train a policy with a YAML recipe.")
    parser.add_argument("recipe", help="path to a recipe, e.g. agents/recipes/quickstart.yaml")
    parser.add_argument("overrides", nargs="*", help="dotted key=value overrides, e.g. seed=1 train.num_steps=30")
    parser.add_argument("--ray-address", help="join this Ray cluster (sets cluster.ray_address; e.g. auto or "
                                              "ray://head:10001); default: a local Ray when the recipe needs one")
    args = parser.parse_intermixed_args(argv)
    if args.ray_address is not None:
        args.overrides.append(f"cluster.ray_address={args.ray_address}")
    from rlvr_gym_agents.train import TrainingError, check_recipe_inputs, train

    try:
        config = load_config(args.recipe, args.overrides)
        check_recipe_inputs(config)
    except (ConfigError, UnknownEnvError, FileNotFoundError, ValueError, UnknownModelError) as error:
        return _fail(error, EXIT_USAGE)
    try:
        train(config, started=process_start())
    except TrainingError as error:
        return _fail(error, EXIT_FAILED)
    except (ConfigError, UnknownEnvError, SuiteNotFoundError, UnknownModelError) as error:
        return _fail(error, EXIT_USAGE)
    return EXIT_OK


def _fail(error: Exception, status: int) -> int:
    print(f"rlvr-gym train: {error}", file=sys.stderr)
    return status


def process_start() -> float:
    """The ``time.monotonic()`` reading at which this process started (its creation time from ``psutil``), so
    that a run's budget counts the interpreter's start and the imports."""
    return time.monotonic() - (time.time() - psutil.Process().create_time())


def load_agent(spec: str, **sampling: object) -> PolicyAgent:
    """A ``BatchAgent`` over the policy at ``spec`` (model directory or hub id).

    Args:
        spec: a model directory (e.g. ``runs/quickstart/checkpoint``) or a hub id.
        **sampling: ``temperature``, ``top_p``, ``max_new_tokens``, ``device``, ``dtype``, ``system_prompt``,
            ``seed``, ``max_turns``; those left None come from the training run's ``config.json`` when ``spec`` is a
            directory inside a run directory (:func:`rlvr_gym_agents.evaluate.load_agent`).

    Raises:
        FileNotFoundError: naming the path when a local model directory or its tokenizer is missing.
    """
    return _load_agent(spec, **sampling)  # type: ignore[arg-type]


if __name__ == "__main__":
    raise SystemExit(train_main(sys.argv[1:]))
