"""The pure verifiers of the web envs, on hand-made states and on every generated task kind (no browser)."""

from __future__ import annotations

import copy

import pytest
from rlvr_gym_web.desktop import apps
from rlvr_gym_web.desktop.common import normalise_answer, score
from rlvr_gym_web.miniwob import verify_miniwob


def test_verify_miniwob_is_binary_on_the_raw_reward() -> None:
    assert verify_miniwob(True, 0.8).value == 1.0
    assert verify_miniwob(True, -1.0).value == 0.0
    assert verify_miniwob(False, 0.0).value == 0.0
    assert verify_miniwob(False, 1.0).value == 0.0  # not done yet: no reward
    assert verify_miniwob(True, 1.0, "ok").components == {"raw_reward": 1.0, "done": 1.0}


@pytest.mark.parametrize(("text", "expected"), [(" 12 ", "12"), ("12.0", "12"), ("'Seven.'", "seven"),
                                                ("1,200", "1200"), ("2.50", "2.5"), (None, "")])
def test_normalise_answer(text: object, expected: str) -> None:
    assert normalise_answer(text) == expected


def test_score_counts_checks() -> None:
    result = score({"a": True, "b": False, "c": True, "d": True}, "x")
    assert result.value == 0.0 and result.components["checks_passed"] == 0.75 and "b" in result.reason
    assert score({"a": True}, "x").value == 1.0


FILES = {
    "app": "files",
    "state": {"folders": ["/A", "/B"], "files": [{"path": "/A/x.txt", "size_kb": 3}, {"path": "/A/y.txt", "size_kb": 4}]},
    "expect": {"folders": ["/A", "/B"], "files": [["/A/y.txt", 4], ["/B/x.txt", 3]]},
}


def test_files_verifier_by_hand() -> None:
    moved = {"folders": ["/A", "/B"], "files": [{"path": "/B/x.txt", "size_kb": 3}, {"path": "/A/y.txt", "size_kb": 4}]}
    assert apps.verify(FILES, moved, None).value == 1.0
    assert apps.verify(FILES, FILES["state"], None).value == 0.0
    deleted_too = {**moved, "files": moved["files"][:1]}
    result = apps.verify(FILES, deleted_too, None)
    assert result.value == 0.0 and "has /A/y.txt" in result.reason
    extra_folder = {**moved, "folders": ["/A", "/B", "/C"]}
    assert apps.verify(FILES, extra_folder, None).value == 0.0


def test_sheet_verifier_compares_numbers_and_rejects_stray_cells() -> None:
    data = {"app": "sheet", "expect": {"cells": {"A1": "Qty", "B2": "12"}}}
    assert apps.verify(data, {"cells": {"A1": "Qty", "B2": "12.0"}}, None).value == 1.0
    assert apps.verify(data, {"cells": {"A1": "Qty", "B2": "12", "C9": "x"}}, None).value == 0.0
    assert apps.verify(data, {"cells": {"A1": "Qty", "B2": "13"}}, None).value == 0.0
    question = {"app": "sheet", "expect": {"answer": "7"}}
    assert apps.verify(question, {"cells": {}}, "7.0").value == 1.0
    assert apps.verify(question, {"cells": {}}, None).value == 0.0


def _expected_state(data: dict) -> dict:
    """The final state a perfect agent leaves, in the page's getState() shape."""
    app, expect, state = data["app"], data["expect"], copy.deepcopy(data["state"])
    if app == "files":
        return {"folders": expect["folders"], "files": [{"path": p, "size_kb": s} for p, s in expect["files"]]}
    if app == "mail":
        for message in state["messages"]:
            message.update(expect[str(message["id"])])
        if "sent" in expect:
            state["messages"].append({"id": 99, "folder": "sent", **expect["sent"]})
        return state
    if app == "todo":
        return expect
    if app == "widgets":  # the page committed with every record as expected
        return {"records": expect["records"], "submitted": True}
    return expect  # sheet: {"cells"}, settings: {"settings"}


@pytest.mark.parametrize("app", list(apps.APPS))
def test_every_kind_gold_state_scores_one_and_start_state_scores_zero(app: str) -> None:
    for kind in apps.APPS[app].KINDS:
        for seed in range(5):
            data = apps.generate(app, seed, kind)
            assert data["instruction"]
            if app != "widgets":  # widgets has no tools: no API solution, its wrong edits are tasks' ``wrong``
                assert data["api_gold"] and data["wrong"]
            if "answer" in data["expect"]:
                assert apps.verify(data, data["state"], data["expect"]["answer"]).value == 1.0
                wrong = data["wrong"][-1].split('"')[1]
                assert apps.verify(data, data["state"], wrong).value == 0.0
                continue
            assert apps.verify(data, _expected_state(data), None).value == 1.0, (app, kind, seed)
            assert apps.verify(data, data["state"], None).value == 0.0, (app, kind, seed)
            if app == "widgets":  # committed without the edit
                committed = {"records": data["state"]["records"], "submitted": True}
                assert apps.verify(data, committed, None).value == 0.0, (kind, seed)


def test_generation_is_seeded() -> None:
    assert apps.generate("mail", 3) == apps.generate("mail", 3)
    assert apps.generate("mail", 3) != apps.generate("mail", 4)
    with pytest.raises(ValueError, match="unknown app"):
        apps.generate("paint", 0)
    with pytest.raises(ValueError, match="kinds"):
        apps.generate("files", 0, "shred")
