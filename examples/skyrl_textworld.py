"""Run an rlvr_gym env through SkyRL-gym: register the adapter, build envs the way SkyRL's generator does
(``skyrl_gym.make(env_class, env_config=, extras=row)``), and play episodes to their reward.

    python examples/skyrl_textworld.py --suite textworld/starter-test --num-tasks 4 --agent gold

In a SkyRL training run, write the rows with ``datasets.Dataset.from_list(rows).to_parquet(...)``, call
``register_skyrl_env()`` in the process that builds envs, and set ``environment.env_class=rlvr_gym``.
"""

from __future__ import annotations

import argparse
from typing import Any

import skyrl_gym

from rlvr_gym import load_suite
from rlvr_gym.adapters.skyrl import register_skyrl_env, skyrl_dataset
from rlvr_gym.testing import GoldAgent, RandomAgent


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", default="textworld/starter-test")
    parser.add_argument("--num-tasks", type=int, default=4)
    parser.add_argument("--agent", choices=["gold", "random"], default="gold")
    args = parser.parse_args(argv)
    env_class = register_skyrl_env()
    tasks = load_suite(args.suite).tasks[: args.num_tasks]
    results = []
    for task, row in zip(tasks, skyrl_dataset(tasks, env_class), strict=True):
        agent: Any = GoldAgent() if args.agent == "gold" else RandomAgent(seed=0)
        agent.reset(task)
        env = skyrl_gym.make(env_class, env_config={}, extras=row)
        messages, _ = env.init(row["prompt"])
        total, done, output = 0.0, False, None
        while not done:
            output = env.step(agent.act(messages[-1]["content"], {}) if messages else "")
            total += output["reward"]
            done = output["done"]
            messages = output["observations"] or messages
        results.append({"task_id": task.id, "reward": total, **env.get_metrics()})
        env.close()
        print(f"{task.id}: reward {total:g}, {results[-1]['turns']} turns, success {results[-1]['success']:g}")
    return results


if __name__ == "__main__":
    main()
