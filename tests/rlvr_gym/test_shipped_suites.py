"""Suites ship inside their family packages; families registered by any documented route are listed.

The fresh-venv install test (``pip install`` of the core and one family, no checkout on the path) is in
the ``slow`` tier at the bottom.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium
import pytest

import rlvr_gym
from rlvr_gym import registry, tasks
from rlvr_gym.cli import main
from rlvr_gym.tasks import SUITES_FOLDER, TaskSuite, family_suite_dirs, find_task_path, list_suites, load_suite
from rlvr_gym.testing import echo_tasks

REPO = Path(__file__).resolve().parents[2]
GUESS_MODULE = textwrap.dedent('''
    from rlvr_gym import Env, Failure, FailureKind, StepResult, register

    class GuessEnv(Env):
        max_turns = 4

        def _reset(self, task):
            self.secret = int((task.data if task else {}).get("secret", 3))
            return "Say `guess N`.", {"admissible_actions": [f"guess {n}" for n in range(1, 6)]}

        def _step(self, action):
            words = action.split()
            if len(words) != 2 or words[0] != "guess" or not words[1].isdigit():
                return StepResult("Invalid.", 0.0, False, False, {"failure": Failure(FailureKind.PARSE_ERROR, "x")})
            ok = int(words[1]) == self.secret
            return StepResult("Correct!" if ok else "Wrong.", float(ok), ok, False,
                              {"success": ok, "reward_details": {"value": float(ok)}} if ok else {})

    register("{family}/Guess-v0", "{module}:GuessEnv", max_turns=4, default_suite="{family}/guess")
''')


@pytest.fixture()
def no_task_dirs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing but the packages: no RLVR_GYM_TASKS, no ./tasks, no repository tasks/."""
    monkeypatch.setattr(tasks, "task_dirs", list)


@pytest.fixture()
def forget_family() -> object:
    """Removes the ids a test registered, so they do not leak into other tests."""
    before = set(registry._REGISTRY)
    yield None
    for env_id in set(registry._REGISTRY) - before:
        registry._REGISTRY.pop(env_id)
        gymnasium.registry.pop(env_id, None)


def test_every_default_suite_loads_from_its_package_alone(no_task_dirs: None) -> None:
    for env_spec in rlvr_gym.list_envs():
        if env_spec.default_suite is None:
            continue
        suite = load_suite(env_spec.default_suite)
        package_dir = family_suite_dirs()[env_spec.family]
        assert suite.path is not None and suite.path.parent == package_dir, env_spec.id
        assert any(t.env_id == env_spec.id for t in suite), env_spec.id


def test_the_repository_tasks_folder_shows_the_same_files() -> None:
    for family, folder in family_suite_dirs().items():
        repo_folder = REPO / "tasks" / family
        assert repo_folder.resolve() == folder.resolve(), family
    assert load_suite("textworld/easy-test").path.resolve() == (  # type: ignore[union-attr]
        family_suite_dirs()["textworld"] / "easy-test.jsonl").resolve()


def test_bundled_rtl_problems_resolve_from_the_package(no_task_dirs: None) -> None:
    folder = find_task_path("rtl/verilog-eval")
    assert folder == family_suite_dirs()["rtl"] / "verilog-eval"
    assert (folder / "LICENSE").is_file()
    with pytest.raises(FileNotFoundError, match="rlvr-gym-nosuch"):
        find_task_path("nosuch/data")


def test_rlvr_gym_tasks_folders_come_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    TaskSuite("easy-test", echo_tasks(1)).save(tmp_path / "textworld" / "easy-test.jsonl")
    TaskSuite("mine", echo_tasks(2)).save(tmp_path / "textworld" / "mine.jsonl")
    monkeypatch.setenv("RLVR_GYM_TASKS", str(tmp_path))
    assert len(load_suite("textworld/easy-test")) == 1  # the user's copy shadows the shipped one
    assert len(load_suite("textworld/mine")) == 2
    assert {"textworld/mine", "textworld/easy-test", "textworld/hard-test"} <= set(list_suites("textworld"))


def test_unknown_suite_names_the_suites_and_the_package(no_task_dirs: None) -> None:
    with pytest.raises(FileNotFoundError, match="textworld/easy-test"):
        load_suite("textworld/nope")
    with pytest.raises(FileNotFoundError, match="rlvr-gym-nofamily"):
        load_suite("nofamily/x")


def test_suite_round_trips_through_a_hugging_face_dataset() -> None:
    datasets = pytest.importorskip("datasets")
    suite = load_suite("tools/math_test")
    dataset = suite.to_hf_dataset()
    assert isinstance(dataset, datasets.Dataset)
    assert dataset.column_names == list(tasks.HF_COLUMNS) and len(dataset) == len(suite)
    assert dataset[0]["data"] == suite[0].data and dataset.features["data"] == datasets.Json()
    back = TaskSuite.from_hf_dataset(dataset)
    assert back.tasks == suite.tasks and back.name == "math_test"


def test_a_module_on_the_path_is_a_family_everywhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forget_family: None, capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "rlvr_gym_pathgames.py").write_text(GUESS_MODULE.replace("{family}", "pathgames").replace(
        "{module}", "rlvr_gym_pathgames"))
    suite = TaskSuite("guess", [rlvr_gym.Task(id="g0", env_id="pathgames/Guess-v0", data={"secret": 2},
                                              gold=["guess 2"], wrong=["guess 3"], split="test")])
    suite.save(tmp_path / "tasks" / "pathgames" / "guess.jsonl")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("RLVR_GYM_TASKS", str(tmp_path / "tasks"))
    assert registry.family_modules()["pathgames"] == "rlvr_gym_pathgames"
    assert "pathgames" in registry.installed_families()
    assert [s.id for s in rlvr_gym.list_envs("pathgames")] == ["pathgames/Guess-v0"]
    assert main(["envs", "--family", "pathgames"]) == 0
    assert "pathgames/Guess-v0" in capsys.readouterr().out
    assert "pathgames/Guess-v0" in [s.id for s in rlvr_gym.list_envs()]  # what `check --all` iterates


def test_an_entry_point_family_is_listed_and_ships_its_suites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, forget_family: None, no_task_dirs: None,
) -> None:
    package = tmp_path / "ep_games_pkg"
    (package / SUITES_FOLDER).mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "envs.py").write_text(GUESS_MODULE.replace("{family}", "epgames").replace("{module}",
                                                                                          "ep_games_pkg.envs"))
    TaskSuite("guess", [rlvr_gym.Task(id="e0", env_id="epgames/Guess-v0", data={"secret": 4}, gold=["guess 4"],
                                      split="test")]).save(package / SUITES_FOLDER / "guess.jsonl")
    dist_info = tmp_path / "ep_games_pkg-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: ep-games-pkg\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[rlvr_gym.envs]\nepgames = ep_games_pkg.envs\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert registry.family_modules()["epgames"] == "ep_games_pkg.envs"
    assert [s.id for s in rlvr_gym.list_envs("epgames")] == ["epgames/Guess-v0"]
    assert family_suite_dirs()["epgames"] == package / SUITES_FOLDER
    assert [t.id for t in load_suite("epgames/guess")] == ["e0"]
    assert main(["check", "epgames/Guess-v0", "--num-tasks", "1"]) == 0


@pytest.mark.slow
def test_fresh_venv_install_runs_eval_and_check_without_a_checkout(tmp_path: Path) -> None:
    """``pip install`` (not editable) of the core and the textworld family into a new venv without torch, then
    ``rlvr-gym eval --agent gold`` and ``rlvr-gym check`` from a folder outside the repository."""
    source = tmp_path / "src"  # a copy, so the in-tree build leaves nothing in the checkout
    skip = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".venv")
    for part in ("pyproject.toml", "README.md", "rlvr_gym", "envs/textworld"):
        copy = shutil.copytree if (REPO / part).is_dir() else shutil.copy2
        (source / part).parent.mkdir(parents=True, exist_ok=True)
        copy(REPO / part, source / part, **({"ignore": skip} if copy is shutil.copytree else {}))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(source),
                    str(source / "envs" / "textworld")], check=True, timeout=900)
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RLVR_GYM_TASKS")}

    def rlvr_gym_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(venv / "bin" / "rlvr-gym"), *args], check=False, cwd=work, env=env,
                              capture_output=True, text=True, timeout=600)

    evaluated = rlvr_gym_cli("eval", "--agent", "gold", "--suite", "textworld/easy-test", "--limit", "20", "--out",
                             "report")
    assert evaluated.returncode == 0, evaluated.stdout + evaluated.stderr
    report = json.loads((work / "report" / "report.json").read_text())
    assert report["metrics"]["pass@1"] == 1.0 and report["metrics"]["num_tasks"] == 20
    checked = rlvr_gym_cli("check", "textworld/ALFWorld-Easy-v0", "--num-tasks", "1")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    listed = rlvr_gym_cli("envs", "--family", "textworld")
    assert listed.returncode == 0 and "textworld/ALFWorld-Easy-v0" in listed.stdout
    no_torch = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('torch'))"],
                              capture_output=True, text=True, check=True)
    assert no_torch.stdout.strip() == "None"
