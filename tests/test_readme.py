"""The README's examples stay true: the example env passes `rlvr-gym check`, the commands parse, the Python
snippet prints what the README says."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

import gymnasium
import pytest

from rlvr_gym import registry
from rlvr_gym.cli import build_parser, main

README = Path(__file__).resolve().parent.parent / "README.md"


def _section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, flags=re.DOTALL | re.MULTILINE)
    assert match, f"README has no section '## {title}'"
    return match.group(1)


def _blocks(section: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", section, flags=re.DOTALL | re.MULTILINE)


def _commands(section: str) -> list[list[str]]:
    """The argv of every `rlvr-gym ...` line in the bash blocks (comments and env assignments dropped)."""
    commands = []
    for block in _blocks(section, "bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            while words and "=" in words[0]:
                words.pop(0)
            if words and words[0] == "rlvr-gym":
                commands.append(words[1:])
    return commands


@pytest.fixture
def guess_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Writes the README's example module and suite into tmp_path, as a user would."""
    section = _section("Register a new environment")
    (module_code,) = _blocks(section, "python")
    (suite_lines,) = _blocks(section, "jsonl")
    (tmp_path / "rlvr_gym_mygames.py").write_text(module_code)
    (tmp_path / "tasks" / "mygames").mkdir(parents=True)
    (tmp_path / "tasks" / "mygames" / "guess.jsonl").write_text(suite_lines)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("RLVR_GYM_TASKS", str(tmp_path / "tasks"))
    monkeypatch.chdir(tmp_path)
    try:
        yield tmp_path
    finally:
        sys.modules.pop("rlvr_gym_mygames", None)
        registry._REGISTRY.pop("mygames/Guess-v0", None)
        gymnasium.registry.pop("mygames/Guess-v0", None)


def test_register_example_passes_check_and_gold_eval(guess_package: Path, capsys: pytest.CaptureFixture[str]) -> None:
    commands = _commands(_section("Register a new environment"))
    assert [c[0] for c in commands] == ["check", "eval"]
    for argv in commands:
        assert main(argv) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "mygames/Guess-v0: all checks passed" in out
    report = (guess_package / "runs" / "eval" / "mygames_guess-gold" / "report.md").read_text()
    assert "| pass@1 | 1.000 ± 0.000 |" in report and "| two-step |" in report


def test_evaluate_commands_parse_and_snippet_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    section = _section("Evaluate")
    for argv in _commands(section):
        build_parser().parse_args(argv)  # raises SystemExit on a stale flag
    monkeypatch.chdir(tmp_path)
    (snippet,) = _blocks(section, "python")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet, "README.md", "exec"), {"__name__": "readme_snippet"})  # noqa: S102
    assert printed.getvalue().strip() == "1.0 1.0"
    assert (tmp_path / "runs" / "eval" / "say-the-last-word" / "report.png").is_file()


def test_readme_keeps_its_structure() -> None:
    text = README.read_text(encoding="utf-8")
    titles = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert titles == ["Quick start", "What the main job prints", "Environments", "Register a new environment",
                      "Train", "Evaluate", "Benchmarks", "Layout"]
    assert "make quickstart" in _section("Quick start") and "make test" in _section("Quick start")


def test_benchmarks_readme_lists_every_benchmark() -> None:
    folder = README.parent / "benchmarks"
    listed = (folder / "README.md").read_text(encoding="utf-8")
    missing = [p.name for p in folder.glob("*.py") if f"`{p.name}`" not in listed]
    assert not missing, f"add a row for {missing} to benchmarks/README.md"


def test_environments_section_names_every_installed_family() -> None:
    import rlvr_gym
    import rlvr_gym.testing  # registers the testing family

    listed = set(re.findall(r"^\| `(\w+)` \|", _section("Environments"), re.MULTILINE))
    missing = sorted({s.family for s in rlvr_gym.list_envs()} - listed)
    assert not missing, f"add the families {missing} to the README's Environments table"
