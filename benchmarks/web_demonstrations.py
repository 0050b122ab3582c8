"""Oracle demonstrations of ``web/Widgets-v0`` as the trainer collects them: seconds per episode with the browser
held for the run (``Env.hold_shared_resources``, what ``rlvr-gym train`` and ``rlvr-gym eval`` now do) against the
baseline, each episode's env launching Chromium and closing it again (what they did before).

Run: ``python benchmarks/web_demonstrations.py [--episodes 10] [--repeats 3]``

Each repeat collects ``--episodes`` demonstrations (``agents/recipes/web-tiny.yaml``'s ``sft`` settings: the
oracle with its injected mistakes) both ways, alternating which goes first, so a loaded machine slows both alike.
Prints seconds per episode, min / median / max over the repeats, and the held / cold ratio of the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.warmstart.demonstrations import collect_demonstrations

import rlvr_gym

RECIPE = Path(__file__).resolve().parents[1] / "agents" / "recipes" / "web-tiny.yaml"


def per_episode(held: bool, episodes: int, seed: int) -> float:
    """Seconds per demonstration of ``episodes`` fresh generated tasks, the browser held for the batch or not."""
    config = load_config(RECIPE)
    start = time.perf_counter()
    if held:
        with rlvr_gym.spec(config.env.env_id).hold_shared_resources():
            demos = collect_demonstrations(config.sft, config.env, None, episodes, seed)
    else:
        demos = collect_demonstrations(config.sft, config.env, None, episodes, seed)
    assert len(demos) == episodes
    return (time.perf_counter() - start) / episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"held": [], "cold": []}
    for repeat in range(args.repeats):
        order = ("held", "cold") if repeat % 2 == 0 else ("cold", "held")
        for name in order:
            times[name].append(per_episode(name == "held", args.episodes, seed=repeat))
    for name, values in times.items():
        print(f"{name:5s} s per episode: {min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f} "
              f"(min / median / max over {len(values)} repeats of {args.episodes} episodes)")
    print(f"held / cold (medians): {statistics.median(times['held']) / statistics.median(times['cold']):.2f}x")


if __name__ == "__main__":
    main()
