"""Task generation: seeded tasks with gold and wrong trajectories, split by seed range and layout.

Seeds never overlap between splits: task ``i`` of split ``s`` has seed ``SPLIT_SEED_BASE[s] + seed_offset + i``.
Task types are balanced (task ``i`` gets type ``i mod number of types``). Train and dev tasks use only the
training room layouts; in the test split every second block of one task per type uses held-out layouts only
(metadata ``held_out_layout: true``), "layouts never seen in training", so every task type is tested in both
seen and held-out layouts. (Alternating single tasks, as before, crossed layout with type whenever the number
of types is even: in the two-type starter suite every held-out layout was a cool-then-place task.)
"""

from __future__ import annotations

import numpy as np

from rlvr_gym.tasks import Split, Task, check_generator_range
from rlvr_gym_textworld.generator import generate_world, get_difficulty
from rlvr_gym_textworld.oracle import oracle_plan, wrong_plan

SPLIT_SEED_BASE: dict[str, int] = {"train": 0, "dev": 1_000_000, "test": 2_000_000}
MAX_TASKS_PER_SPLIT = 1_000_000

ENV_DIFFICULTY: dict[str, str] = {
    "textworld/ALFWorld-Starter-v0": "starter",
    "textworld/ALFWorld-Easy-v0": "easy",
    "textworld/ALFWorld-v0": "medium",
    "textworld/ALFWorld-Hard-v0": "hard",
}
"""Registered env id -> its difficulty preset."""


def generate_tasks(env_id: str, split: Split, num_tasks: int, seed_offset: int = 0) -> list[Task]:
    """Generates ``num_tasks`` tasks for one of the registered text-world ids.

    Args:
        env_id: a key of :data:`ENV_DIFFICULTY`.
        split: ``train``, ``dev`` or ``test``; selects the seed range and the layouts.
        num_tasks: how many tasks, >= 0.
        seed_offset: shifts the seeds within the split's range (so two calls can give disjoint tasks).

    Returns:
        Tasks with ``options`` (seed, difficulty, layout, task_type), ``data`` (goal), ``gold`` (the
        oracle's trajectory), ``wrong`` (a near-miss that earns 0) and ``metadata``.

    Raises:
        ValueError: on an unknown env id or split, or when the seeds would leave the split's range.
    """
    if env_id not in ENV_DIFFICULTY:
        raise ValueError(f"no text-world env {env_id!r}; expected one of {', '.join(ENV_DIFFICULTY)}")
    check_generator_range(split, SPLIT_SEED_BASE, num_tasks, seed_offset, MAX_TASKS_PER_SPLIT)
    level = get_difficulty(ENV_DIFFICULTY[env_id])
    tasks = []
    for i in range(seed_offset, seed_offset + num_tasks):
        seed = SPLIT_SEED_BASE[split] + i
        task_type = level.task_types[i % len(level.task_types)]
        held_out = split == "test" and (i // len(level.task_types)) % 2 == 1
        # the layout is drawn once from the seed, then fixed in the task's options
        layout = generate_world(np.random.default_rng(seed), level, task_type=task_type, held_out=held_out)
        world = generate_world(np.random.default_rng(seed), level, layout=layout.house.layout, task_type=task_type)
        tasks.append(
            Task(
                id=f"tw-{level.name}-{split}-{i:06d}",
                env_id=env_id,
                options={"seed": seed, "difficulty": level.name, "layout": world.house.layout, "task_type": task_type},
                data={"goal": world.goal.to_dict(), "goal_text": world.goal.text()},
                gold=oracle_plan(world),
                wrong=wrong_plan(world),
                split=split,
                metadata={"task_type": task_type, "difficulty": level.name, "held_out_layout": held_out},
            )
        )
    return tasks
