"""The random baseline's grammar for the code family (used by ``rlvr_gym.testing.RandomAgent``).

- ``code/HumanEval*``, ``code/CodeIO-v0``: a function named after ``info["entry_point"]`` that returns a random
  constant or a simple function of its first argument (``0``, ``True``, ``[]``, ``args[0]``,
  ``sorted(args[0])``, ...). Any task whose hidden tests such a function passes is solved.
- ``code/Shell-v0``: a random command from templates over the files the observation lists (``cat``, ``sort``,
  ``uniq``, ``wc -l``, ``head``, copying a file to an output name from the goal), or ``submit``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

RETURNS = ("None", "0", "1", "-1", "True", "False", "''", "[]", "{}", "args[0]", "len(args[0])",
           "sorted(args[0])", "sum(args[0])", "args[0][::-1]", "max(args[0])", "min(args[0])", "str(args[0])")
"""What the random function returns (expressions of its positional arguments ``args``)."""
SHELL_TEMPLATES = ("cat {f}", "sort {f} > {o}", "LC_ALL=C sort {f} > {o}", "sort -u {f} > {o}", "uniq {f} > {o}",
                   "wc -l {f} > {o}", "head -n 3 {f} > {o}", "cp {f} {o}", "tac {f} > {o}", "ls", "submit")
"""Shell commands the random agent fills with a listed file ``{f}`` and an output name ``{o}``."""
_PATH = re.compile(r"\b[\w.-]+/[\w./-]+|\b[\w-]+\.(?:txt|csv|json|log|md|py|sh)\b")


def random_action(env_id: str, observation: str, info: dict[str, Any], rng: np.random.Generator) -> str | None:
    """A random program (function envs) or shell command (``code/Shell-v0``); None for other ids."""
    if env_id.startswith("code/Shell"):
        return _shell(observation, rng)
    entry_point = info.get("entry_point")
    if not entry_point:
        return None
    returned = RETURNS[int(rng.integers(len(RETURNS)))]
    body = f"    try:\n        return {returned}\n    except Exception:\n        return None\n"
    return f"```python\ndef {entry_point}(*args, **kwargs):\n{body}```"


def _shell(observation: str, rng: np.random.Generator) -> str:
    paths = sorted(set(_PATH.findall(observation))) or ["data.txt"]
    template = SHELL_TEMPLATES[int(rng.integers(len(SHELL_TEMPLATES)))]
    source, output = paths[int(rng.integers(len(paths)))], paths[int(rng.integers(len(paths)))]
    return template.format(f=source, o=output)
