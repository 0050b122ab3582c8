"""Loads a script of ``benchmarks/`` (not a package) as a module for its tests."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as module ``name``."""
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def load_benchmark() -> Callable[[str], ModuleType]:
    """The loader (a test file's module-scoped fixture calls it once)."""
    return _load
