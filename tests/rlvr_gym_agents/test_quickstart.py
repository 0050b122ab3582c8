"""The CPU quickstart end to end (slow: ~10-15 minutes on an idle 2-core machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rlvr_gym_agents.config import load_config
from rlvr_gym_agents.trainer import train

RECIPE = Path(__file__).resolve().parents[2] / "agents" / "recipes" / "quickstart.yaml"


@pytest.mark.slow
@pytest.mark.xfail(strict=False, reason="issue 2 target not met reliably (README status): 3 of 5 seeds on a fast "
                   "machine (136-158 RL steps: +0.129, +0.107, +0.165, +0.094, +0.080); on slower ones the "
                   "15-minute run budget leaves 74-104 RL steps (+0.018 to +0.115, 2 of 9 seeds over +10)")
def test_quickstart_beats_the_warm_start_by_ten_points(tmp_path: Path) -> None:
    summary = train(load_config(RECIPE, [f"output.dir={tmp_path / 'run'}", "output.progress=false"]))
    before, after = summary["before"], summary["after"]
    assert before["num_tasks"] >= 50 and before["k"] >= 4
    # pass@1 is a multiple of 1/800: 0.300 - 0.200 is 0.09999999999999998 in floats
    assert after["pass@1_sampled"] - before["pass@1_sampled"] >= 0.10 - 1e-9
    assert (tmp_path / "run" / "learning_curve.png").stat().st_size > 1000
    saved = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert saved["after"]["pass@1_sampled"] == pytest.approx(after["pass@1_sampled"])
