"""Tests of the ``rlvr-gym`` CLI, driven through ``main([...])``."""

from __future__ import annotations

import io
import json
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

import pytest

from rlvr_gym import StepResult
from rlvr_gym.cli import main
from rlvr_gym.testing import EchoEnv, temporary_env


def test_envs_lists_ids_grouped_by_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "testing" in out and "testing/Echo-v0" in out and "say the word you are shown" in out
    assert main(["envs", "--family", "testing"]) == 0
    assert main(["envs", "--family", "nope"]) == 2
    assert "no envs in family 'nope'" in capsys.readouterr().out


def test_check_prints_every_check_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "testing/Echo-v0", "--num-tasks", "2"]) == 0
    out = capsys.readouterr().out
    for name in ("gymnasium_api", "seed_determinism", "fork_equivalence", "gold_and_wrong", "close"):
        assert name in out
    assert "testing/Echo-v0: all checks passed" in out


class _GoldFailsEnv(EchoEnv):
    """Never rewards.

    Version History:
        v0: test double.
    """

    def _step(self, action: str) -> StepResult:
        result = super()._step(action)
        return result._replace(reward=0.0, info={**result.info, "success": False})


@pytest.fixture
def broken_env_id() -> Iterator[str]:
    with temporary_env("testing/CliGoldFails-v0", _GoldFailsEnv, default_suite="testing/echo") as env_id:
        yield env_id


def test_check_failure_exits_1_and_says_how_to_fix(broken_env_id: str, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    suite = tmp_path / "broken.jsonl"
    line = {"id": "b0", "env_id": broken_env_id, "data": {"target": "egg"}, "gold": ["say egg"]}
    suite.write_text(json.dumps(line) + "\n")
    assert main(["check", broken_env_id, "--suite", str(suite)]) == 1
    out = capsys.readouterr().out
    assert "gold_and_wrong" in out and "failed" in out and "gold did not succeed" in out and "How to fix" in out


def test_unknown_env_id_exits_2_with_closest_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "testing/Echo-v1"]) == 2
    assert "No env `testing/Echo-v1`. Closest registered ids: testing/Echo-v0" in capsys.readouterr().out
    assert main(["play", "testing/Ecko-v0"]) == 2


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["check"]) == 2  # neither ENV_ID nor --all
    assert main(["eval", "--suite", "testing/echo"]) == 2  # --agent missing
    assert main(["eval", "--agent", "gold", "--suite", "testing/nope"]) == 2
    assert "no suite 'testing/nope'" in capsys.readouterr().out
    assert main(["eval", "--agent", "python:no_such_module:Agent", "--suite", "testing/echo"]) == 2
    assert "cannot load agent" in capsys.readouterr().out
    assert main(["--help"]) == 0


def test_eval_gold_writes_the_three_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_dir = tmp_path / "report"
    assert main(["eval", "--agent", "gold", "--suite", "testing/echo", "-k", "2", "--limit", "3",
                 "--out", str(out_dir)]) == 0
    printed = capsys.readouterr().out
    assert "pass@2" in printed and "1.000" in printed
    payload = json.loads((out_dir / "report.json").read_text())
    assert payload["metrics"]["pass@1"] == 1.0 and payload["metrics"]["num_episodes"] == 6
    assert payload["config"]["agent"] == "gold" and payload["config"]["k"] == 2
    assert "| pass@2 | 1.000 ± 0.000 |" in (out_dir / "report.md").read_text()
    assert (out_dir / "report.png").read_bytes()[:4] == b"\x89PNG"


def test_eval_python_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = types.ModuleType("cli_test_agents")

    class Wrong:
        def act(self, observation: str, info: dict[str, Any]) -> str:
            return "say nothing"

    module.Wrong = Wrong  # type: ignore[attr-defined]
    module.echo = lambda observation, info: "say " + observation.rsplit(" ", 1)[-1]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cli_test_agents", module)
    for target, expected in (("Wrong", 0.0), ("echo", 1.0)):
        out = tmp_path / target
        assert main(["eval", "--agent", f"python:cli_test_agents:{target}", "--suite", "testing/echo",
                     "--out", str(out)]) == 0
        assert json.loads((out / "report.json").read_text())["metrics"]["pass@1"] == expected


def test_model_agent_delegates_to_rlvr_gym_agents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []

    class FakeBatchAgent:
        def act_batch(self, keys: list[str], observations: list[str], infos: list[dict[str, Any]]) -> list[str]:
            return ["say " + o.rsplit(" ", 1)[-1] for o in observations]

    def load_agent(spec: str, **sampling: Any) -> FakeBatchAgent:
        calls.append((spec, sampling))
        return FakeBatchAgent()

    fake_cli = types.ModuleType("rlvr_gym_agents.cli")
    fake_cli.load_agent = load_agent  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rlvr_gym_agents.cli", fake_cli)
    assert main(["eval", "--agent", "runs/some-model", "--suite", "testing/echo", "--temperature", "0.7",
                 "--top-p", "0.9", "--out", str(tmp_path)]) == 0
    assert calls == [("runs/some-model", {"temperature": 0.7, "top_p": 0.9, "seed": 0})]  # --seed reaches the model


def test_missing_agents_package_is_a_clear_message(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "rlvr_gym_agents", None)  # makes `import rlvr_gym_agents` fail
    monkeypatch.setitem(sys.modules, "rlvr_gym_agents.cli", None)
    assert main(["train", "agents/recipes/quickstart.yaml"]) == 2
    assert "pip install -e ./agents" in capsys.readouterr().out
    assert main(["eval", "--agent", "Qwen/Qwen2.5-0.5B-Instruct", "--suite", "testing/echo"]) == 2
    assert "pip install -e ./agents" in capsys.readouterr().out


def test_train_delegates_recipe_and_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    received: list[list[str]] = []
    fake_cli = types.ModuleType("rlvr_gym_agents.cli")
    fake_cli.train_main = lambda argv: received.append(argv) or 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "rlvr_gym_agents.cli", fake_cli)
    assert main(["train", "r.yaml", "seed=1", "train.num_steps=3"]) == 0
    assert received == [["r.yaml", "seed=1", "train.num_steps=3"]]
    assert main(["train", "--ray-address", "auto", "r.yaml", "seed=1"]) == 0
    assert received[-1] == ["r.yaml", "seed=1", "--ray-address", "auto"]


def test_play_with_fake_stdin(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Task index 1 of testing/echo asks for "bread": a malformed action, then the right one.
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\nsay bread\n"))
    assert main(["play", "testing/Echo-v0", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "Say the word: bread" in out and "admissible: say apple | say bread" in out
    assert "failure: parse_error" in out and "Correct." in out
    assert "episode terminated: success=True after 2 turn(s)" in out


def test_play_quits_on_colon_q_and_eof(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(":q\n"))
    assert main(["play", "testing/Echo-v0", "--task", "echo-test-3"]) == 0
    out = capsys.readouterr().out
    assert "Say the word: dish" in out and out.rstrip().endswith("quit")
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(["play", "testing/Echo-v0"]) == 0
    assert main(["play", "testing/Echo-v0", "--task", "nope"]) == 2
    assert "no task 'nope'" in capsys.readouterr().out


def test_eval_workers_use_an_env_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rlvr_gym
    import rlvr_gym.workers

    events: list[str] = []

    class FakePool:
        def __init__(self, num_workers: int) -> None:
            events.append(f"start {num_workers}")

        def __enter__(self) -> Self:
            return self

        def __exit__(self, *exc: object) -> None:
            events.append("close")

        def make(self, env_id: str) -> Any:
            events.append(f"make {env_id}")
            return rlvr_gym.make(env_id)

    monkeypatch.setattr(rlvr_gym.workers, "EnvPool", FakePool)
    assert main(["eval", "--agent", "gold", "--suite", "testing/echo", "--limit", "2", "--workers", "3",
                 "--out", str(tmp_path)]) == 0
    assert events == ["start 3", "make testing/Echo-v0", "make testing/Echo-v0", "close"]


def test_play_reads_multi_line_actions(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    original_step = EchoEnv._step

    def recording_step(self: EchoEnv, action: str) -> StepResult:
        seen.append(action)
        return original_step(self, action)

    monkeypatch.setattr(EchoEnv, "_step", recording_step)
    monkeypatch.setattr(sys, "stdin", io.StringIO(":paste\nsay\n  apple\n:end\n:q\n"))
    assert main(["play", "testing/Echo-v0", "--task", "echo-test-0"]) == 0
    assert seen == ["say\n  apple"]
