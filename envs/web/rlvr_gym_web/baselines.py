"""The random baseline's grammar for the web family (used by ``rlvr_gym.testing.RandomAgent``): a click on a
random element of the page (the ``[id]`` lines of the observation), sometimes typing a word of the page into
a random element, or ``done()``. Pages whose goal is one click on the right element are solved by chance.
"""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np

_ELEMENT = re.compile(r"^\s*\[([^\]]+)\]\s+(\S+)(?:\s+'((?:[^'\\]|\\.)*)')?", re.MULTILINE)
CLICK_PROB, FILL_PROB = 0.8, 0.1
"""Shares of clicks and fills; the rest is ``done()``."""


def random_action(env_id: str, observation: str, info: dict[str, Any], rng: np.random.Generator) -> str | None:
    """``click("<id>")``, ``fill("<id>", "<word>")`` or ``done()``; None when the page shows no element."""
    elements = _ELEMENT.findall(observation)
    if not elements:
        return None
    draw = rng.random()
    bid = elements[int(rng.integers(len(elements)))][0]
    if draw < CLICK_PROB:
        return f'click("{bid}")'
    if draw < CLICK_PROB + FILL_PROB:
        words = [name for _, _, name in elements if name] or ["x"]
        word = words[int(rng.integers(len(words)))].split()[0] if words else "x"
        return f"fill({json.dumps(bid)}, {json.dumps(word)})"
    return "done()"
