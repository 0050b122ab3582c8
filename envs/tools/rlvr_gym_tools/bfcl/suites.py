"""Builds ``tasks/tools/bfcl_<category>.jsonl`` from the ``bfcl-eval`` wheel
(``python -m rlvr_gym_tools.bfcl.suites [tasks_dir]``).

Every task refers to its entry in the wheel (``{"category", "bfcl_id"}``; the entries are read at reset, so
the suites stay small) and carries a gold action sequence and a wrong one: single-turn gold is one action with the first allowed value of every
parameter, wrong is the same call with a value no allowed value matches (or another function when the call
has no parameters); irrelevance gold is an ``<answer>`` and wrong is a call. Multi-turn gold replays the
ground-truth calls turn by turn; wrong drops the calls of the last turn that has any.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlvr_gym.tasks import Task, TaskSuite, tasks_dir
from rlvr_gym_tools.bfcl.data import MULTI_TURN, SINGLE_TURN, UNSUPPORTED, load_category
from rlvr_gym_tools.bfcl.multi_turn import ENV_ID as MULTI_TURN_ID
from rlvr_gym_tools.bfcl.multi_turn import BFCLMultiTurnEnv, gold_actions, wrong_actions
from rlvr_gym_tools.bfcl.single_turn import ENV_ID as SINGLE_TURN_ID
from rlvr_gym_tools.bfcl.single_turn import BFCLEnv, gold_calls, perturbations

LICENCE = "Apache-2.0 (Berkeley Function Calling Leaderboard, bfcl-eval 2026.3.23, ShishirPatil/gorilla)"
SOURCE = "bfcl-eval==2026.3.23 wheel: bfcl_eval/data/BFCL_v4_<category>.json and possible_answer/"
IRRELEVANCE_GOLD = "<answer>None of the available functions can do this.</answer>"


def single_turn_task(entry: dict, category: str) -> Task:
    """A task of ``tools/BFCL-v0`` from one BFCL entry (ground truth merged in)."""
    data = {"category": category, "bfcl_id": entry["id"]}
    wrong = perturbations(entry)
    if entry["ground_truth"] is None:
        gold, wrong_calls = [IRRELEVANCE_GOLD], wrong["spurious_call"]
    else:
        gold = ["".join(c.to_hermes() for c in gold_calls(entry["ground_truth"], entry["function"]))]
        wrong_calls = wrong.get("wrong_value", wrong["wrong_function"])
    return Task(id=entry["id"], env_id=SINGLE_TURN_ID, data=data, gold=gold, split="test",
                wrong=["".join(c.to_hermes() for c in wrong_calls)], metadata={"category": category})  # fmt: skip


def multi_turn_task(entry: dict, category: str) -> Task:
    """A task of ``tools/BFCLMultiTurn-v0`` from one BFCL multi-turn entry."""
    data = {"category": category, "bfcl_id": entry["id"]}
    return Task(id=entry["id"], env_id=MULTI_TURN_ID, data=data, gold=gold_actions(entry), wrong=wrong_actions(entry),
                split="test", metadata={"category": category, "num_user_turns": len(entry["question"])})  # fmt: skip


def gold_problem(task: Task) -> str | None:
    """Plays the task's gold actions in its env; None when they earn 1.0, else the verifier's reason."""
    env = BFCLEnv() if task.env_id == SINGLE_TURN_ID else BFCLMultiTurnEnv()
    env.reset(options={"task": task})
    for action in task.gold or []:
        result = env.step(action)
        if result.terminated or result.truncated:
            details = result.info.get("reward_details", {})
            return None if result.reward == 1.0 else str(details.get("reason", "no reward"))
    return "the gold actions did not end the episode"


def build(root: Path) -> list[Path]:
    """Writes one suite and manifest per supported category under ``root/tools``; returns the paths.

    Entries whose own ground truth cannot score 1.0 (possible answers that contradict the function docs, a
    ground-truth call to a function withheld until a later turn) are left out and listed with the reason in
    the manifest's ``excluded_entries``.
    """
    paths = []
    for category in SINGLE_TURN + MULTI_TURN:
        make = single_turn_task if category in SINGLE_TURN else multi_turn_task
        tasks, excluded = [], {}
        for entry in load_category(category):
            task = make(entry, category)
            problem = gold_problem(task)
            if problem is None:
                tasks.append(task)
            else:
                excluded[task.id] = problem
        suite = TaskSuite(f"bfcl_{category}", tasks)
        path = suite.save(root / "tools" / f"{suite.name}.jsonl")
        suite.write_manifest(path.with_suffix(".manifest.json"), source=SOURCE, licence=LICENCE, category=category,
                             excluded_entries=excluded, unsupported_categories=UNSUPPORTED)  # fmt: skip
        paths.append(path)
    return paths


if __name__ == "__main__":
    for written in build(Path(sys.argv[1]) if len(sys.argv) > 1 else tasks_dir()):
        print(written)
