"""Getting a program out of an action: the last fenced code block, or the raw text."""

from __future__ import annotations

import re

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
PYTHON_TAGS = ("python", "py", "python3")
SHELL_TAGS = ("bash", "sh", "shell", "console")


def extract_code(action: str, tags: tuple[str, ...] = PYTHON_TAGS) -> str:
    """Returns the program in ``action``.

    Rules, in order: the last fenced block whose language tag is in ``tags``; else the last fenced block
    with no tag; else the last fenced block of any tag; else the whole action. An unclosed final fence
    counts as a block running to the end of the text (models often stop before the closing fence).

    Args:
        action: the agent's text.
        tags: the language tags preferred, lower case.

    Returns:
        The code (possibly empty), without the fences, with trailing whitespace removed.
    """
    blocks = [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(action)]
    for wanted in (lambda tag: tag in tags, lambda tag: tag == "", lambda tag: True):
        chosen = [body for tag, body in blocks if wanted(tag)]
        if chosen:
            return chosen[-1].rstrip()
    return action.strip("\n").rstrip()
