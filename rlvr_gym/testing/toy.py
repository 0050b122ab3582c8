"""A toy env with a known optimum, for tests of rollouts, trainers and the harness.

``testing/Echo-v0``: the observation names a target word; answering ``"say <word>"`` ends the episode with
reward 1.0; any other well-formed ``say ...`` ends it with 0.0; anything else is a parse error that costs a
turn. The optimal policy solves every task in one turn.

Version History:
    v0: first version.
"""

from __future__ import annotations

import time
from typing import Any

from rlvr_gym.core import Env, StepResult
from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym.tasks import Task
from rlvr_gym.verifier import RewardResult

WORDS = ("apple", "bread", "candle", "dish", "egg", "fork", "glass", "hat")


def verify_echo(target: str, said: str) -> RewardResult:
    """1.0 when ``said`` equals ``target`` (case- and space-insensitive), else 0.0."""
    ok = said.strip().lower() == target.strip().lower()
    return RewardResult(1.0 if ok else 0.0, {"match": float(ok)}, "match" if ok else f"said {said!r}, not {target!r}")


class EchoEnv(Env):
    """Say the word you are shown. Known optimum: reward 1.0 in one turn."""

    max_turns = 3

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        data = task.data if task is not None else {}
        self.target = str(data.get("target") or WORDS[int(self.np_random.integers(len(WORDS)))])
        return f"Say the word: {self.target}", {"admissible_actions": [f"say {w}" for w in WORDS]}

    def _step(self, action: str) -> StepResult:
        text = action.strip()
        if not text.lower().startswith("say "):
            failure = Failure(FailureKind.PARSE_ERROR, "actions look like 'say <word>'")
            return StepResult(f"Invalid action {text!r}: {failure.message}.", 0.0, False, False, {"failure": failure})
        result = verify_echo(self.target, text[4:])
        info = {"reward_details": result.to_dict(), "success": result.success}
        return StepResult("Correct." if result.success else "Wrong.", result.value, True, False, info)


class SlowEchoEnv(EchoEnv):
    """:class:`EchoEnv` whose every step takes ``step_delay_s`` seconds of wall clock (sleeping, as an env waiting on
    a sandbox, a simulator or a browser does): what concurrent env stepping is measured on."""

    def __init__(self, step_delay_s: float = 0.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if step_delay_s < 0:
            raise ValueError(f"step_delay_s must be >= 0, got {step_delay_s}")
        self.step_delay_s = float(step_delay_s)

    def _step(self, action: str) -> StepResult:
        time.sleep(self.step_delay_s)
        return super()._step(action)


def echo_tasks(num_tasks: int, split: str = "train") -> list[Task]:
    """Tasks for ``testing/Echo-v0`` with gold ``say <target>`` and wrong ``say <other>`` solutions."""
    tasks = []
    for i in range(num_tasks):
        target, other = WORDS[i % len(WORDS)], WORDS[(i + 1) % len(WORDS)]
        tasks.append(
            Task(
                id=f"echo-{split}-{i}", env_id="testing/Echo-v0", options={"seed": i}, data={"target": target},
                gold=[f"say {target}"], wrong=[f"say {other}"], split=split,  # type: ignore[arg-type]
            )
        )
    return tasks
