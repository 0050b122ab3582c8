"""The guides in docs/ run: every ```python block of a guide is executed, in order, in one namespace per guide
(blocks fenced ```python skip are shown, not run), and every ```yaml block parses; a printed value followed by
``# <expected>`` on the same line must print that."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import gymnasium
import pytest
import yaml

from rlvr_gym import registry

DOCS = sorted((Path(__file__).resolve().parent.parent / "docs").glob("*.md"))
BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
EXPECTED = re.compile(r"^print\(.*\)\s*#\s*(.+)$")


@pytest.mark.parametrize("guide", DOCS, ids=[p.name for p in DOCS])
def test_guide_code_runs(guide: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = set(registry._REGISTRY)
    namespace: dict[str, object] = {"__name__": "guide"}
    try:
        for language, info, code in BLOCK.findall(guide.read_text(encoding="utf-8")):
            if language == "yaml":
                recipe = yaml.safe_load(code)
                assert recipe is not None
                if isinstance(recipe, dict) and "env" in recipe:
                    _check_recipe(code, tmp_path)
            if language != "python" or "skip" in info:
                continue
            if "register(" in code and "class " in code:  # a module the guide tells you to save
                (tmp_path / "rlvr_gym_mygames.py").write_text(code)
                continue
            output = io.StringIO()
            with contextlib.redirect_stdout(output):
                exec(compile(code, f"{guide.name}", "exec"), namespace)  # noqa: S102 - the guide's own code
            printed = output.getvalue().splitlines()
            expected = [m.group(1).strip() for line in code.splitlines() if (m := EXPECTED.match(line.strip()))]
            assert [line.strip() for line in printed[-len(expected):]] == expected if expected else True, printed
    finally:
        import sys

        sys.modules.pop("rlvr_gym_mygames", None)
        for env_id in set(registry._REGISTRY) - before:
            entry = registry._REGISTRY[env_id].entry_point
            module = entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", "")
            if module in sys.modules:  # a family module the guide imported stays imported: keep its ids, or a
                continue  # later `import` is a no-op and the ids are gone for the rest of the session
            registry._REGISTRY.pop(env_id)
            gymnasium.registry.pop(env_id, None)


def _check_recipe(text: str, tmp_path: Path) -> None:
    """A recipe in a guide loads with the trainer's own config loader (when the trainer is installed)."""
    try:
        from rlvr_gym_agents.config import load_config
    except ImportError:
        return
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    load_config(path)
