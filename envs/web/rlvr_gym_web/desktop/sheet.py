"""Spreadsheet-like table tasks: fill a computed column, write a column total, look up a value (a question).

The sheet holds plain values (no formulas): A = item, B = quantity, C = unit price, D = total.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.desktop.common import GuiSolver, call, normalise_answer, run_policy, score, tool, verify_answer
from rlvr_gym_web.observation import find, parse_tree

TOOLS = [
    tool("get_cell", "Read one cell.", cell=("string", "cell name such as B3")),
    tool("set_cell", "Write one cell ('' clears it).", cell=("string", "cell name such as B3"),
         value=("string", "the new value")),
    tool("get_range", "Read a rectangle of cells, row by row.", start=("string", "top-left cell, e.g. A1"),
         end=("string", "bottom-right cell, e.g. D5")),
]
ITEMS = ["pens", "paper", "stapler", "folders", "tape", "markers", "envelopes", "clips", "labels", "ink"]
KINDS = ("fill_totals", "sum_column", "lookup")


def generate(rng: np.random.Generator, kind: str) -> dict[str, Any]:
    """Task data: ``instruction``, ``state``, ``expect`` (final cells or the answer), ``api_gold``, ``wrong``."""
    num_items = int(rng.integers(3, 6))
    cells = {"A1": "Item", "B1": "Qty", "C1": "Price", "D1": "Total"}
    for row, item in enumerate(rng.choice(ITEMS, size=num_items, replace=False).tolist(), start=2):
        cells[f"A{row}"], cells[f"B{row}"], cells[f"C{row}"] = item, str(int(rng.integers(1, 20))), str(int(rng.integers(1, 30)))
    state = {"rows": num_items + 2, "cols": 4, "cells": cells}
    last = num_items + 1
    final = dict(cells)
    if kind == "fill_totals":
        for row in range(2, last + 1):
            final[f"D{row}"] = str(int(cells[f"B{row}"]) * int(cells[f"C{row}"]))
        text = f"Fill cells D2 to D{last} with the row's Qty times its Price."
        wrong_cells = {f"D{row}": str(int(cells[f"B{row}"]) + int(cells[f"C{row}"])) for row in range(2, last + 1)}
    elif kind == "sum_column":
        total = sum(int(cells[f"B{row}"]) for row in range(2, last + 1))
        final[f"B{last + 1}"] = str(total)
        text = f"Write the total of the Qty column (B2 to B{last}) in cell B{last + 1}."
        wrong_cells = {f"B{last + 1}": str(total - int(cells[f"B{last}"]))}
    elif kind == "lookup":
        row = int(rng.integers(2, last + 1))
        text = f"What is the price of {cells[f'A{row}']}? Reply with answer(\"<number>\")."
        return {"instruction": text, "state": state, "expect": {"answer": cells[f"C{row}"]},
                "api_gold": [call("get_range", start="A1", end=f"D{last}"), f'answer("{cells[f"C{row}"]}")'],
                "wrong": [f'answer("{cells[f"B{row}"]}")' if cells[f"B{row}"] != cells[f"C{row}"] else 'answer("-1")']}
    else:
        raise ValueError(f"unknown sheet task kind {kind!r}; kinds: {KINDS}")
    changed = {k: v for k, v in final.items() if cells.get(k) != v}
    return {"instruction": text, "state": state, "expect": {"cells": final},
            "api_gold": [call("set_cell", cell=k, value=v) for k, v in changed.items()] + ["done()"],
            "wrong": [call("set_cell", cell=k, value=v) for k, v in wrong_cells.items()] + ["done()"]}


def verify(data: dict[str, Any], state: dict[str, Any], answer: str | None) -> RewardResult:
    """Every cell must hold its expected value (numbers compared as numbers, '12' == '12.0'); no other cell may
    be filled. Question tasks check the answer."""
    expect = data["expect"]
    if "answer" in expect:
        return verify_answer(expect["answer"], answer)
    want, got = expect["cells"], {k: v for k, v in state["cells"].items() if str(v).strip()}
    checks = {cell: normalise_answer(got.get(cell)) == normalise_answer(value) for cell, value in sorted(want.items())}
    checks["no other cells"] = set(got) <= set(want)
    return score(checks, "sheet")


def gui_solver(data: dict[str, Any]) -> GuiSolver:
    """Scripted GUI solution: fill each cell's textbox that differs from the expected value; read the table
    for the question."""
    expect = data["expect"]
    if "answer" in expect:
        item = data["instruction"].split("price of ")[1].split("?")[0]
        return _lookup_solver(item)

    def step(obs: str) -> str | None:
        nodes = parse_tree(obs)
        for cell, value in sorted(expect["cells"].items()):
            box = nodes[find(nodes, "textbox", cell)[0]]
            if box.value != value:
                return f'fill("{box.bid}", {value!r})'
        return None

    return run_policy(step)


def _lookup_solver(item: str) -> GuiSolver:
    obs = yield ""
    nodes = parse_tree(obs)
    row = next(nodes[i].name[1:] for i in find(nodes, "textbox") if nodes[i].value == item)
    yield f'answer("{nodes[find(nodes, "textbox", f"C{row}")[0]].value}")'
