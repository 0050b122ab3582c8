"""Settings panel tasks: change two or three settings across sections, leaving every other setting alone."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.desktop.common import GuiSolver, call, click, heading, run_policy, score, tool
from rlvr_gym_web.observation import find, parse_tree

TOOLS = [
    tool("get_settings", "Read every setting of a section.", section=("string", "display, network, privacy or sound")),
    tool("set_setting", "Change one setting.", section=("string", "section name"), key=("string", "setting key"),
         value=(["boolean", "integer", "string"], "true/false for switches, an integer, or one of the choices")),
]
SCHEMA: dict[str, dict[str, dict[str, Any]]] = {
    "display": {"theme": {"type": "choice", "options": ["light", "dark", "system"]},
                "brightness": {"type": "number", "min": 0, "max": 100},
                "font_size": {"type": "choice", "options": ["small", "medium", "large"]}},
    "network": {"wifi": {"type": "bool"}, "bluetooth": {"type": "bool"}, "airplane_mode": {"type": "bool"}},
    "privacy": {"location": {"type": "bool"}, "camera": {"type": "bool"}, "usage_analytics": {"type": "bool"}},
    "sound": {"volume": {"type": "number", "min": 0, "max": 100}, "do_not_disturb": {"type": "bool"},
              "alert_tone": {"type": "choice", "options": ["chime", "bell", "none"]}},
}
KINDS = ("change",)


def _label(key: str) -> str:
    return key.replace("_", " ").capitalize()


def _random_value(rng: np.random.Generator, spec: dict[str, Any], avoid: Any = None) -> Any:
    while True:
        if spec["type"] == "bool":
            value: Any = bool(rng.random() < 0.5)
        elif spec["type"] == "number":
            value = int(rng.integers(spec["min"] // 10, spec["max"] // 10 + 1)) * 10
        else:
            value = str(rng.choice(spec["options"]))
        if value != avoid:
            return value


def _phrase(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"turn {'on' if value else 'off'} {_label(key).lower()}"
    return f"set {_label(key).lower()} to {value}"


def generate(rng: np.random.Generator, kind: str) -> dict[str, Any]:
    """Task data: ``instruction``, ``state``, ``expect`` (the final settings), ``api_gold`` and ``wrong``."""
    if kind not in KINDS:
        raise ValueError(f"unknown settings task kind {kind!r}; kinds: {KINDS}")
    settings = {section: {key: _random_value(rng, spec) for key, spec in keys.items()} for section, keys in SCHEMA.items()}
    pairs = [(s, k) for s, keys in SCHEMA.items() for k in keys]
    chosen = [pairs[i] for i in sorted(rng.choice(len(pairs), size=int(rng.integers(2, 4)), replace=False))]
    final = {section: dict(values) for section, values in settings.items()}
    changes = []
    for section, key in chosen:
        final[section][key] = _random_value(rng, SCHEMA[section][key], avoid=settings[section][key])
        changes.append((section, key, final[section][key]))
    text = "In Settings, " + ", ".join(_phrase(k, v) for _, k, v in changes[:-1]) + (
        " and " if len(changes) > 1 else "") + _phrase(*changes[-1][1:]) + "."
    gold = [call("set_setting", section=s, key=k, value=v) for s, k, v in changes]
    return {"instruction": text, "state": {"settings": settings, "schema": SCHEMA}, "expect": {"settings": final},
            "api_gold": gold + ["done()"], "wrong": gold[:-1] + ["done()"]}


def verify(data: dict[str, Any], state: dict[str, Any], answer: str | None) -> RewardResult:
    """Every setting must equal its expected value (the asked changes made, nothing else changed)."""
    want, got = data["expect"]["settings"], state["settings"]
    checks = {f"{s}.{k}": got.get(s, {}).get(k) == v for s, keys in want.items() for k, v in keys.items()}
    return score(checks, "settings")


def gui_solver(data: dict[str, Any]) -> GuiSolver:
    """Scripted GUI solution: open each changed setting's section and set its control."""
    start, final = data["state"]["settings"], data["expect"]["settings"]
    pending = [(s, k, v) for s, keys in final.items() for k, v in keys.items() if start[s][k] != v]
    finished: set[tuple[str, str]] = set()

    def step(obs: str) -> str | None:
        nodes = parse_tree(obs)
        for section, key, value in pending:
            if (section, key) in finished:
                continue
            if heading(nodes) != _label(section):
                return click(nodes, "button", _label(section))
            node = nodes[find(nodes, name=_label(key), role=None)[-1]]
            if node.role == "checkbox":
                if ("checked" in node.props) == value:
                    finished.add((section, key))
                    continue
                return f'click("{node.bid}")'
            current = node.value
            if current == str(value):
                finished.add((section, key))
                continue
            action = "select_option" if node.role == "combobox" else "fill"
            return f'{action}("{node.bid}", {str(value)!r})'
        return None

    return run_policy(step)
