"""The sandboxed python tool inside an episode (needs a working rlvr_gym.sandbox back-end)."""

from __future__ import annotations

import pytest
from rlvr_gym_tools.math_env import MathEnv
from rlvr_gym_tools.suites import math_task

from rlvr_gym import FailureKind
from rlvr_gym.toolcall import ToolCall


def _sandbox_available() -> bool:
    try:
        from rlvr_gym.sandbox import get_sandbox

        return get_sandbox("auto").run(["python3", "-c", "print(1)"]).ok
    except Exception:  # noqa: BLE001 - any sandbox problem means the test cannot run here
        return False


pytestmark = pytest.mark.skipif(not _sandbox_available(), reason="no working sandbox back-end here")


def test_python_tool_solves_a_math_task() -> None:
    env = MathEnv()
    task = math_task(7, "test")
    env.reset(options={"task": task})
    code = f"print({task.data['solution']})"
    obs, _, _, _, info = env.step(ToolCall("python", {"code": code}).to_hermes())
    assert "failure" not in info and task.data["answer"] in obs
    assert env.step(f"<answer>{task.data['answer']}</answer>").reward == 1.0


def test_python_tool_errors_are_typed() -> None:
    env = MathEnv()
    env.reset(options={"task": math_task(7, "test")})
    obs, _, terminated, _, info = env.step(ToolCall("python", {"code": "raise ValueError('boom')"}).to_hermes())
    assert not terminated and info["failure"].kind is FailureKind.TOOL_ERROR and "ValueError: boom" in obs
    obs, *_ = env.step(ToolCall("python", {"code": "x = 1"}).to_hermes())
    assert "no output" in obs


@pytest.mark.slow
def test_python_tool_timeout_is_typed() -> None:
    env = MathEnv()
    env.reset(options={"task": math_task(7, "test")})
    _, _, _, _, info = env.step(ToolCall("python", {"code": "while True: pass"}).to_hermes())
    assert info["failure"].kind is FailureKind.TIMEOUT
