"""Fixtures for the RTL family: a real judge (skips cleanly without iverilog or a sandbox)."""

from __future__ import annotations

import shutil

import pytest
from rlvr_gym_rtl.judge import RtlJudge
from rlvr_gym_rtl.problem import RtlProblem
from rlvr_gym_rtl.verilog_eval import BUNDLED_DIR, load_problem, resolve_problem_dir


def _needs_tools() -> None:
    for tool in ("iverilog", "vvp"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (apt-get install iverilog)")


@pytest.fixture(scope="session")
def judge() -> RtlJudge:
    _needs_tools()
    from rlvr_gym.sandbox import SandboxUnavailableError

    try:
        return RtlJudge(timeout_s=10.0)
    except SandboxUnavailableError as error:
        pytest.skip(f"no sandbox: {error}")


@pytest.fixture(scope="session")
def strict_judge(judge: RtlJudge) -> RtlJudge:
    """A judge that always runs Icarus's stand-alone elaboration."""
    return RtlJudge(timeout_s=10.0, standalone_elaboration="always")


@pytest.fixture(scope="session")
def fast_judge() -> RtlJudge:
    """A judge with a short wall-clock limit, for attempts that hang the simulator."""
    _needs_tools()
    return RtlJudge(timeout_s=3.0)


@pytest.fixture(scope="session")
def counter() -> RtlProblem:
    """Prob035_count1to10: clk, reset -> q[3:0] (a decade counter, 439 samples)."""
    return load_problem(resolve_problem_dir(BUNDLED_DIR), "Prob035_count1to10")
