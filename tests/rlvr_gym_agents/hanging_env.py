"""``testing/HangingEcho-v0``: :class:`~rlvr_gym.testing.toy.EchoEnv` whose step never returns on a task that asks for
it, for the tests of rollout workers that hang or die mid-step (``test_cluster_rollouts.py``).

Registered when imported. Only the Ray rollout workers import it, through the ``module:Id`` env id
:data:`agent_helpers.HANGING_ECHO` of the tasks :func:`agent_helpers.hanging_tasks` makes (a Ray worker has the
driver's working directory, the repository root, on its path); the test process never does, so the registry that the
conformance tests enumerate does not list it.

Version History:
    v0: first version.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rlvr_gym import Task, register
from rlvr_gym.core import StepResult
from rlvr_gym.testing.toy import EchoEnv


class HangingEchoEnv(EchoEnv):
    """Echo; on a task whose ``data["hang"]`` is true, ``step`` first creates the file ``data["started_file"]`` (when
    given: the test's signal that the step has begun) and then blocks forever (a deadlock: only killing the process
    ends it)."""

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        data = task.data if task is not None else {}
        self.hang, self.started_file = bool(data.get("hang")), data.get("started_file")
        return super()._reset(task)

    def _step(self, action: str) -> StepResult:
        if self.hang:
            if self.started_file:
                Path(self.started_file).touch()
            threading.Event().wait()  # never set
        return super()._step(action)


register("testing/HangingEcho-v0", "tests.rlvr_gym_agents.hanging_env:HangingEchoEnv", max_turns=3,
         description="testing/Echo-v0 whose step blocks forever on tasks with data['hang'] (rollout worker tests)")
