"""``web/Widgets-v0``: the task generator, held-out rule, verifier and oracle (pure), then the env in Chromium."""

from __future__ import annotations

import pytest
from rlvr_gym_web.browser import BrowserHost
from rlvr_gym_web.desktop import widgets

import rlvr_gym
from rlvr_gym import FailureKind, load_suite

DIALOG_PAGE = """Goal: Edit the contact Cai: turn off Favorite.
Page:
[65] heading 'Contacts'
[35] button 'Edit Ivy'
[14] button 'Edit Cai'
[87] dialog 'Edit Ivy'
  [23] checkbox 'Favorite' checked
  [63] combobox 'Group' value='work'
    [21] option 'family'
    [18] option 'work' selected
  [74] textbox 'Phone' value='4620'
  [50] button 'OK'
  [11] button 'Cancel'"""


def _data(layout: str = "dialog") -> dict:
    fields = [{"key": "favorite", "label": "Favorite", "type": "bool"},
              {"key": "group", "label": "Group", "type": "choice", "options": ["family", "work"]},
              {"key": "phone", "label": "Phone", "type": "text"}]
    start = {"favorite": True, "group": "work", "phone": "4620"}
    records = [{"name": "Ivy", "values": dict(start)}, {"name": "Cai", "values": dict(start)}]
    final = [{"name": "Ivy", "values": dict(start)}, {"name": "Cai", "values": {**start, "favorite": False}}]
    return {"app": "widgets", "kind": layout, "instruction": "Edit the contact Cai: turn off Favorite.",
            "state": {"layout": layout, "title": "Contacts", "noun": "contact", "fields": fields, "records": records,
                      "ids": {}},
            "expect": {"records": final, "target": "Cai"}}


def test_same_seed_same_task_and_seeds_differ() -> None:
    assert widgets.generate_task(7, "tabs") == widgets.generate_task(7, "tabs")
    assert widgets.generate_task(7, "tabs") != widgets.generate_task(8, "tabs")
    first = widgets.generate_tasks(widgets.ENV_ID, "test", 12)
    assert [t.model_dump() for t in first] == [t.model_dump() for t in widgets.generate_tasks(widgets.ENV_ID, "test", 12)]
    assert [t.options["seed"] for t in first[:2]] == [2_000_000, 2_000_001]


def test_held_out_structures_by_hand() -> None:
    # (layout index + change-set index) % 4 == 1; the wizard takes change sets 0-2 only
    assert widgets.all_structures(held_out=True) == sorted([
        "dialog:choice", "dialog:choice+text", "tabs:bool", "tabs:bool+text", "search:bool+choice", "wizard:text"])
    trained = widgets.all_structures(held_out=False)
    assert len(trained) == 15
    for layout in widgets.LAYOUTS:  # every layout and every change set is trained in some combination
        assert any(key.startswith(layout + ":") for key in trained)
    for changes in widgets.CHANGE_SETS:
        assert any(key.endswith(":" + "+".join(changes)) for key in trained)


def test_splits_keep_held_out_structures_out_of_training() -> None:
    train = widgets.generate_tasks(widgets.ENV_ID, "train", 80)
    test = widgets.generate_tasks(widgets.ENV_ID, "test", 40)
    held_out = set(widgets.all_structures(held_out=True))
    assert not any(t.metadata["held_out"] or t.metadata["structure"] in held_out for t in train)
    assert [t.metadata["held_out"] for t in test] == [(i // 4) % 2 == 1 for i in range(40)]
    assert all((t.metadata["structure"] in held_out) == t.metadata["held_out"] for t in test)
    assert [t.metadata["layout"] for t in test[:4]] == list(widgets.LAYOUTS)


def test_task_shape_ids_and_changes() -> None:
    for seed in range(40):
        data = widgets.generate_task(seed)
        state, expect = data["state"], data["expect"]
        ids = list(state["ids"].values())
        assert len(set(ids)) == len(ids) and all(10 <= i <= 99 for i in ids)
        assert 3 <= len(state["records"]) <= 4
        before = {r["name"]: r["values"] for r in state["records"]}
        changed = [(r["name"], k) for r in expect["records"] for k, v in r["values"].items() if before[r["name"]][k] != v]
        num_changes = len(data["structure"].split(":")[1].split("+"))
        assert len(changed) == num_changes and {name for name, _ in changed} == {expect["target"]}
        assert data["instruction"].startswith(f"Edit the {state['noun']} {expect['target']}: ")


def test_generator_errors() -> None:
    with pytest.raises(ValueError, match="layout"):
        widgets.generate_task(0, "popup")
    with pytest.raises(ValueError, match="makes tasks for"):
        widgets.generate_tasks("web/Settings-v0", "train", 1)
    with pytest.raises(ValueError, match="split"):
        widgets.generate_tasks(widgets.ENV_ID, "val", 1)  # type: ignore[arg-type]


def test_verify_checks_commit_target_and_the_other_records() -> None:
    data = _data()
    final = data["expect"]["records"]
    assert widgets.verify(data, {"records": final, "submitted": True}, None).value == 1.0
    assert widgets.verify(data, {"records": final, "submitted": False}, None).value == 0.0
    spaced = [final[0], {"name": "Cai", "values": {**final[1]["values"], "phone": " 4620 "}}]
    assert widgets.verify(data, {"records": spaced, "submitted": True}, None).value == 1.0
    other = [{"name": "Ivy", "values": {**final[0]["values"], "favorite": False}}, final[1]]
    result = widgets.verify(data, {"records": other, "submitted": True}, None)
    assert result.value == 0.0 and "Ivy.favorite" in result.reason
    assert result.components["checks_passed"] == pytest.approx(6 / 7)  # committed + 6 fields, one wrong


def test_oracle_reads_the_page_and_recovers() -> None:
    data = _data()
    assert widgets.next_action(data, DIALOG_PAGE) == 'click("11")'  # the wrong record's dialog: Cancel
    right = DIALOG_PAGE.replace("dialog 'Edit Ivy'", "dialog 'Edit Cai'")
    assert widgets.next_action(data, right) == 'click("23")'  # turn off Favorite
    assert widgets.next_action(data, right.replace("'Favorite' checked", "'Favorite' unchecked")) == 'click("50")'
    closed = "\n".join(DIALOG_PAGE.splitlines()[:5])
    assert widgets.next_action(data, closed) == 'click("14")'


def test_admissible_actions_leave_out_the_commit() -> None:
    actions = widgets.admissible_actions(_data(), DIALOG_PAGE)
    assert 'click("50")' not in actions  # OK
    assert {'click("35")', 'click("14")', 'click("23")', 'click("11")', 'select_option("63", "family")',
            'fill("74", "2041")'} <= set(actions)
    assert 'select_option("63", "work")' not in actions and 'fill("74", "4620")' not in actions


# -- in Chromium ------------------------------------------------------------------------------------------
@pytest.mark.browser
def test_suites_gold_succeeds_and_wrong_fails(warm_browser: BrowserHost) -> None:
    train, test = load_suite("web/widgets-train"), load_suite("web/widgets-test")
    assert (len(train), len(test)) == (500, 100)
    assert sum(bool(t.metadata["held_out"]) for t in test) == 48 and not any(t.metadata["held_out"] for t in train)
    env = rlvr_gym.make(widgets.ENV_ID)
    try:
        for task in list(test)[:8]:  # two blocks: every layout, seen and held-out structures
            obs, info = env.reset(options={"task": task})
            assert "URL:" not in obs and "[w]" not in obs and info["admissible_actions"]
            for action in task.gold or []:
                result = env.step(action)
            assert result.terminated and result.reward == 1.0 and result.info["success"], task.id
            assert 3 <= len(task.gold or []) <= 4
            env.reset(options={"task": task})
            for action in task.wrong or []:
                result = env.step(action)
            assert result.terminated and result.reward == 0.0 and not result.info["success"], task.id
    finally:
        env.close()


@pytest.mark.browser
def test_oracle_recovers_from_every_first_mistake(warm_browser: BrowserHost) -> None:
    env = rlvr_gym.make(widgets.ENV_ID)
    try:
        for task in widgets.generate_tasks(widgets.ENV_ID, "train", 4):  # one per layout
            _, info = env.reset(options={"task": task})
            for mistake in info["admissible_actions"]:
                env.reset(options={"task": task})
                result = env.step(mistake)
                while not (result.terminated or result.truncated):
                    result = env.step(env.oracle_action())
                assert result.reward == 1.0, (task.id, mistake)
    finally:
        env.close()


@pytest.mark.browser
def test_malformed_actions_are_rejected_and_change_nothing(warm_browser: BrowserHost) -> None:
    env = rlvr_gym.make(widgets.ENV_ID)
    try:
        task = widgets.generate_tasks(widgets.ENV_ID, "train", 1)[0]
        obs, _ = env.reset(options={"task": task})
        slips = widgets.malformed_actions(env)
        assert len(slips) == 3
        for slip in slips:
            result = env.step(slip)
            assert result.info["failure"].kind in (FailureKind.INVALID_ACTION, FailureKind.PARSE_ERROR), slip
            assert result.observation.split("\nPage:\n")[1] == obs.split("\nPage:\n")[1]
        with pytest.raises(TypeError, match="Widgets"):
            widgets.malformed_actions(rlvr_gym.make("testing/Echo-v0"))
    finally:
        env.close()
