"""``web/Widgets-v0``: the task generator, held-out rule, verifier and oracle (pure), then the env in Chromium."""

from __future__ import annotations

import pytest
from rlvr_gym_web.browser import BrowserHost
from rlvr_gym_web.desktop import widgets
from rlvr_gym_web.observation import parse_tree

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


def test_oracle_and_admissible_actions_by_name() -> None:
    data = _data()
    assert widgets.next_action(data, DIALOG_PAGE, by_name=True) == 'click("Cancel")'
    right = DIALOG_PAGE.replace("dialog 'Edit Ivy'", "dialog 'Edit Cai'")
    assert widgets.next_action(data, right, by_name=True) == 'click("Favorite")'
    fixed = right.replace("'Favorite' checked", "'Favorite' unchecked")
    assert widgets.next_action(data, fixed, by_name=True) == 'click("OK")'
    closed = "\n".join(DIALOG_PAGE.splitlines()[:5])
    assert widgets.next_action(data, closed, by_name=True) == 'click("Edit Cai")'
    actions = widgets.admissible_actions(data, DIALOG_PAGE, by_name=True)
    assert {'click("Edit Ivy")', 'click("Cancel")', 'select_option("Group", "family")', 'fill("Phone", "2041")'} \
        <= set(actions) and 'click("OK")' not in actions


def test_admissible_actions_leave_out_the_commit() -> None:
    actions = widgets.admissible_actions(_data(), DIALOG_PAGE)
    assert 'click("50")' not in actions  # OK
    assert {'click("35")', 'click("14")', 'click("23")', 'click("11")', 'select_option("63", "family")',
            'fill("74", "2041")'} <= set(actions)
    assert 'select_option("63", "work")' not in actions and 'fill("74", "4620")' not in actions


# -- in Chromium ------------------------------------------------------------------------------------------
def test_relabel_task_renames_names_and_text_values_by_one_permutation_per_pool() -> None:
    """``relabel_task`` by hand: a record name and a text value map through one permutation of their own pools, in
    the goal, on the page and in the actions alike (a slip's name in swapped case too); words that only contain a
    name or a value (``Label`` holds the value ``lab``), choice options and numbers that are not ids are kept."""
    import random

    observations = [("Goal: Edit the device Lamp: set Label to lab.\nPage:\n[12] button 'Edit Lamp'\n"
                    "[13] button 'Edit Fan'"),
                    ("Goal: Edit the device Lamp: set Label to lab.\nPage:\n  [20] textbox 'Label' value='hall'\n"
                    "  [21] combobox 'Mode' value='eco'\nInvalid action: no element with id or name 'eDIT lAMP'; "
                    "write e.g. click(\"12\")")]
    actions = ['click("eDIT lAMP")', 'fill("Label", "lab")']
    new_observations, new_actions = widgets.relabel_task(observations, actions, random.Random(3))
    rng = random.Random(3)
    names = widgets._renaming(rng)
    ids = [str(i) for i in range(*widgets.ID_RANGE)]
    renamed_ids = dict(zip(ids, rng.sample(ids, len(ids))))
    lamp, fan, lab, hall = names["Lamp"], names["Fan"], names["lab"], names["hall"]
    pools = widgets.RENAMED_POOLS
    for pool in pools:  # each pool onto itself (a name never becomes another theme's or a value)
        assert sorted(names[word] for word in pool) == sorted(pool)
    for pool in pools[:len(widgets.THEMES)]:  # names in swapped case (the slips) too
        assert sorted(names[word.swapcase()] for word in pool) == sorted(word.swapcase() for word in pool)
    assert (lamp, fan) != ("Lamp", "Fan") and lab != "lab"  # this seed moves them
    assert new_observations[0] == (f"Goal: Edit the device {lamp}: set Label to {lab}.\nPage:\n[{renamed_ids['12']}] "
                                   f"button 'Edit {lamp}'\n[{renamed_ids['13']}] button 'Edit {fan}'")
    assert new_observations[1].endswith(f"value='{hall}'\n  [{renamed_ids['21']}] combobox 'Mode' value='eco'\n"
                                        f"Invalid action: no element with id or name 'eDIT {lamp.swapcase()}'; "
                                        'write e.g. click("12")')
    assert new_actions == [f'click("eDIT {lamp.swapcase()}")', f'fill("Label", "{lab}")']


def test_renamed_words_appear_nowhere_else_on_a_widgets_page() -> None:
    """``relabel_task`` renames whole words: no record name or text value may be (ignoring case, as the search box
    does) another pool's word, a heading, noun, field label or choice option of any theme, or a string of the page's
    own (button names, hints), or the rewrite would rename text that is not a name or a value."""
    import re
    from pathlib import Path

    pools = widgets.RENAMED_POOLS
    renamed = [word.lower() for pool in pools for word in pool]
    assert len(renamed) == len(set(renamed))
    html = (Path(widgets.__file__).parent.parent / "apps" / "widgets.html").read_text(encoding="utf-8")
    html = re.sub(r"records: \[.*?\]", "", html)  # the app's demo state (no task), which tasks replace
    other = " ".join([theme.title + " " + theme.noun for theme in widgets.THEMES]
                     + [label + " " + key + " " + (" ".join(values) if kind == "choice" else "")
                        for theme in widgets.THEMES for key, label, kind, values in theme.fields]
                     + re.findall(r"'([^']*)'", html) + list(widgets.COMMIT_BUTTONS))
    words = {w.lower() for w in re.findall(r"[A-Za-z0-9]+", other)}
    assert "cancel" in words and "next" in words and "family" in words  # the page's own strings were read
    assert not words & set(renamed), words & set(renamed)


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
@pytest.mark.parametrize("by_name", [False, True])
def test_oracle_recovers_from_every_first_mistake(warm_browser: BrowserHost, by_name: bool) -> None:
    env = rlvr_gym.make(widgets.ENV_ID, name_targets=by_name)
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
@pytest.mark.parametrize("by_name", [False, True])
def test_malformed_actions_are_rejected_and_change_nothing(warm_browser: BrowserHost, by_name: bool) -> None:
    env = rlvr_gym.make(widgets.ENV_ID, name_targets=by_name)
    try:
        task = widgets.generate_tasks(widgets.ENV_ID, "train", 1)[0]
        obs, _ = env.reset(options={"task": task})
        slips = widgets.malformed_actions(env)
        assert len(slips) == 3 and ('"9"' in slips[0]) != by_name, slips
        for slip in slips:
            result = env.step(slip)
            assert result.info["failure"].kind in (FailureKind.INVALID_ACTION, FailureKind.PARSE_ERROR), slip
            assert result.observation.split("\nPage:\n")[1] == obs.split("\nPage:\n")[1]
        with pytest.raises(TypeError, match="Widgets"):
            widgets.malformed_actions(rlvr_gym.make("testing/Echo-v0"))
    finally:
        env.close()


@pytest.mark.browser
def test_a_reused_page_shows_what_a_fresh_context_shows_and_hides_the_last_episode(warm_browser: BrowserHost) -> None:
    """``reuse_page`` (web/Widgets-v0's registration) starts each episode in the same page, restarting the app in
    place after the first (no page load): the same observations, admissible actions and rewards as a new context per
    episode over one oracle episode per layout with a first mistake, the same ``Math.random`` for the same seed;
    what the last episode left in the page (an element added behind the app's back, focus) is gone; a reload
    shows the episode's own task; ``go_back`` cannot reach the previous task's page; ``restart_in_place=False``
    loads the page each time."""
    from rlvr_gym_web.desktop.env import DesktopEnv

    reused, fresh = rlvr_gym.make(widgets.ENV_ID), DesktopEnv(app="widgets", page_header=False, max_turns=8)
    assert reused.unwrapped.reuse_page and not fresh.reuse_page
    leave = "() => { window.__kept = 1; document.body.append(Object.assign(document.createElement('button'), {textContent: 'Left'})); }"
    try:
        tasks = widgets.generate_tasks(widgets.ENV_ID, "train", 4)
        pages = []
        for index, task in enumerate(tasks):
            seen = []
            for env in (reused, fresh):
                if env is reused and index:
                    env.unwrapped.page.evaluate(leave)
                obs, info = env.reset(seed=index, options={"task": task})
                if env is reused and index:
                    assert env.unwrapped.page.evaluate("() => window.__kept") == 1 and "Left" not in obs  # restarted
                trace = [obs, info["admissible_actions"],
                         env.unwrapped.page.evaluate("() => [Math.random(), Math.random()]")]
                result = env.step(info["admissible_actions"][0])  # a mistake, then the oracle's recovery
                while not (result.terminated or result.truncated):
                    trace += [result.observation, result.info.get("admissible_actions")]
                    result = env.step(env.unwrapped.oracle_action())
                seen.append([*trace, result.reward, result.info["success"]])
            assert seen[0] == seen[1], task.id
            pages.append(reused.unwrapped.page)
        assert all(page is pages[0] for page in pages)  # one page for every episode
        obs, _ = reused.reset(options={"task": tasks[1]})
        reused.unwrapped.page.reload()  # the URL is the episode's: a reload shows its task, not the first one's
        assert reused.step("noop()").observation == obs
        obs, _ = reused.reset(options={"task": tasks[0]})
        result = reused.step("go_back()")
        assert result.observation == obs and "failure" not in result.info
        with pytest.raises(ValueError, match="page_header"):
            DesktopEnv(app="widgets", reuse_page=True)
    finally:
        reused.close()
        fresh.close()
    loading = rlvr_gym.make(widgets.ENV_ID, restart_in_place=False)
    try:
        loading.reset(options={"task": tasks[0]})
        loading.unwrapped.page.evaluate(leave)
        obs, _ = loading.reset(options={"task": tasks[1]})
        assert loading.unwrapped.page.evaluate("() => window.__kept") is None and "Left" not in obs  # loaded
    finally:
        loading.close()


def _mistake_slip_and_recovery(env: rlvr_gym.Env, task: rlvr_gym.Task, slip: int) -> tuple[list[str], list[str]]:
    """One episode of ``task``: the last admissible action (a mistake), the ``slip``-th malformed action, then the
    oracle to the end, which must succeed; its observations and actions."""
    obs, info = env.reset(options={"task": task})
    observations, actions = [obs], [info["admissible_actions"][-1], widgets.malformed_actions(env)[slip]]
    for action in actions:
        observations.append(env.step(action).observation)
    result = None
    while result is None or not (result.terminated or result.truncated):
        actions.append(env.unwrapped.oracle_action())
        result = env.step(actions[-1])
        observations.append(result.observation)
    assert result.reward == 1.0
    return observations, actions


@pytest.mark.browser
def test_relabelled_demonstrations_are_what_chromium_shows_for_the_renamed_task(warm_browser: BrowserHost) -> None:
    """``relabel_ids`` (``sft.demo_variants``): an episode with a mistake, a slip and the oracle's recovery,
    rewritten, is exactly the episode Chromium shows when the same actions (renamed) are played on the task whose
    ids are renamed by the same permutation; numbers that are not ids are left alone."""
    import copy
    import random

    from rlvr_gym import Task

    env = rlvr_gym.make(widgets.ENV_ID)
    try:
        for task in widgets.generate_tasks(widgets.ENV_ID, "train", 4):  # one per layout
            observations, actions = _mistake_slip_and_recovery(env, task, slip=2)
            new_observations, new_actions = widgets.relabel_ids(observations, actions, random.Random(5))
            ids = [str(i) for i in range(*widgets.ID_RANGE)]
            renamed = dict(zip(ids, random.Random(5).sample(ids, len(ids))))
            data = copy.deepcopy(task.data)
            data["state"]["ids"] = {key: int(renamed[str(value)]) for key, value in data["state"]["ids"].items()}
            obs, _ = env.reset(options={"task": Task(id=task.id, env_id=task.env_id, data=data)})
            replayed = [obs] + [env.step(action).observation for action in new_actions]
            assert replayed == new_observations and new_observations != observations, task.id
            assert new_actions[1].startswith("click(") or '("' not in new_actions[1]  # the slip kept its shape
        kept = ['Invalid action: no element with id \'9\' on the page', 'write e.g. click("12")', "value='4620'"]
        assert widgets.relabel_ids(kept, ['click("9")'], random.Random(0)) == (kept, ['click("9")'])
    finally:
        env.close()


@pytest.mark.browser
def test_renamed_demonstrations_are_what_chromium_shows_for_the_renamed_task(warm_browser: BrowserHost) -> None:
    """``relabel_task`` (``sft.demo_variants``): an episode by name (``name_targets``) with a mistake, a slip and
    the oracle's recovery, rewritten, is exactly the episode Chromium shows when the renamed actions are played on
    the task whose record names, text values and ids are renamed by the same permutations; its reward is 1 again."""
    import copy
    import random
    import re

    from rlvr_gym import Task

    rng = random.Random(5)  # the draws relabel_task makes from random.Random(5): names and values, then ids
    names = widgets._renaming(rng)
    ids = [str(i) for i in range(*widgets.ID_RANGE)]
    renamed_ids = dict(zip(ids, rng.sample(ids, len(ids))))
    env, changed = rlvr_gym.make(widgets.ENV_ID, name_targets=True), 0
    try:
        for task in widgets.generate_tasks(widgets.ENV_ID, "train", 8):
            observations, actions = _mistake_slip_and_recovery(env, task, slip=0)
            new_observations, new_actions = widgets.relabel_task(observations, actions, random.Random(5))
            data = copy.deepcopy(task.data)
            text_keys = {field["key"] for field in data["state"]["fields"] if field["type"] == "text"}
            for record in data["state"]["records"] + data["expect"]["records"]:
                record["name"] = names[record["name"]]
                record["values"].update({k: names[v] for k, v in record["values"].items() if k in text_keys})
            data["expect"]["target"] = names[data["expect"]["target"]]
            data["instruction"] = re.sub(r"\b\w+\b", lambda m: names.get(m.group(0), m.group(0)), data["instruction"])
            data["state"]["ids"] = {key: int(renamed_ids[str(value)]) for key, value in data["state"]["ids"].items()}
            obs, _ = env.reset(options={"task": Task(id=task.id, env_id=task.env_id, data=data)})
            replayed = [obs]
            for action in new_actions:
                result = env.step(action)
                replayed.append(result.observation)
            assert replayed == new_observations and new_observations != observations, task.id
            assert result.reward == 1.0
            changed += any(a != b for a, b in zip(actions, new_actions))
        assert changed >= 6  # the actions name the renamed records and values (a name may map to itself)
    finally:
        env.close()


@pytest.mark.browser
def test_an_env_per_episode_takes_the_page_the_last_one_parked(warm_browser: BrowserHost) -> None:
    """With ``reuse_page`` a closed env parks its context and page in the browser host and the next env's reset
    takes them (the trainer makes an env per episode); a page that was closed meanwhile is skipped, and the
    host keeps at most MAX_PARKED_PAGES. New pages open in the host's one shared context (not a context each); a
    page beyond the limit is closed, not the shared context; an env without ``reuse_page`` gets its own context."""
    from rlvr_gym_web import browser
    from rlvr_gym_web.desktop.env import DesktopEnv

    task = widgets.generate_tasks(widgets.ENV_ID, "train", 1)[0]
    first = rlvr_gym.make(widgets.ENV_ID)
    first.reset(options={"task": task})
    page = first.unwrapped.page
    first.close()
    second = rlvr_gym.make(widgets.ENV_ID)
    try:
        obs, _ = second.reset(options={"task": task})
        assert second.unwrapped.page is page and obs.startswith("Goal: Edit")
    finally:
        second.close()
    page.close()  # parked again by second.close(); closed behind the host's back
    third = rlvr_gym.make(widgets.ENV_ID)
    try:
        third.reset(options={"task": task})
        assert third.unwrapped.page is not page and not third.unwrapped.page.is_closed()
    finally:
        third.close()
    envs = [rlvr_gym.make(widgets.ENV_ID) for _ in range(3)]
    for env in envs:
        env.reset(options={"task": task})
    shared = envs[-1].unwrapped._context
    assert shared is warm_browser._shared and len({id(env.unwrapped.page) for env in envs}) == 3
    original = browser.MAX_PARKED_PAGES
    try:
        browser.MAX_PARKED_PAGES = len(warm_browser._parked) + 1
        for env in envs:
            env.close()
        assert len(warm_browser._parked) == browser.MAX_PARKED_PAGES
        assert [env.unwrapped.page for env in envs] == [None] * 3 and shared.pages  # the shared context stays open
    finally:
        browser.MAX_PARKED_PAGES = original
    own = DesktopEnv(app="widgets", page_header=False)
    try:
        own.reset(options={"task": task})
        assert own._context is not shared and own._context.pages == [own.page]
    finally:
        own.close()
    kept, failing = rlvr_gym.make(widgets.ENV_ID), rlvr_gym.make(widgets.ENV_ID)
    kept.reset(options={"task": task})
    parked, warm_browser._parked = warm_browser._parked, []
    original_new_page = shared.new_page
    try:  # a page that fails to open leaves the shared context (and the other envs' pages) open
        shared.new_page = lambda: (_ for _ in ()).throw(RuntimeError("no page"))
        with pytest.raises(RuntimeError, match="no page"):
            failing.reset(options={"task": task})
        failing.close()
        assert not kept.unwrapped.page.is_closed() and kept.step("noop()").observation.startswith("Goal:")
    finally:
        shared.new_page = original_new_page
        warm_browser._parked = parked
        kept.close()
    shared.close()  # closed from outside: the next env gets a new shared context
    after = rlvr_gym.make(widgets.ENV_ID)
    try:
        warm_browser._parked.clear()
        obs, _ = after.reset(options={"task": task})
        assert after.unwrapped._context is not shared and obs.startswith("Goal: Edit")
    finally:
        after.close()


@pytest.mark.browser
def test_an_action_may_name_its_element_and_a_bad_name_is_an_observation(warm_browser: BrowserHost) -> None:
    """A name stands for an id (the same pages follow); a name on no element, or on several, is an
    ``invalid_action`` observation that says so and changes nothing; a name the last observation showed on one
    element is that element, though the page has grown a namesake since; ``name_targets`` is only for widgets."""
    by_id, by_name = rlvr_gym.make(widgets.ENV_ID), rlvr_gym.make(widgets.ENV_ID, name_targets=True)
    try:
        task = widgets.generate_tasks(widgets.ENV_ID, "train", 1)[0]  # a dialog
        pages = []
        for env in (by_id, by_name):
            env.reset(options={"task": task})
            pages.append([env.step(env.oracle_action()).observation for _ in range(2)])
        assert pages[0] == pages[1]
        obs, _ = by_name.reset(options={"task": task})
        result = by_name.step('fill("Nope \\" x", "1")')  # quotes in a name reach no CSS selector unescaped
        assert result.info["failure"].kind == FailureKind.INVALID_ACTION
        assert "no element with id or name" in result.observation and result.observation.endswith(obs.split("Page:")[1])
        name = widgets.next_action(task.data, obs, by_name=True).split('"')[1]
        clone = ("(name) => document.body.append(Object.assign([...document.querySelectorAll('button')]"
                 ".find((b) => b.innerText.trim() === name).cloneNode(true), {onclick: null}))")
        by_name.unwrapped.page.evaluate(clone, name)  # unseen: the agent's name is still the one button it saw
        result = by_name.step(f'click("{name}")')
        assert "failure" not in result.info and f"dialog '{name}'" in result.observation
        by_name.reset(options={"task": task})
        by_name.unwrapped.page.evaluate(clone, name)
        assert f"'{name}'" in by_name.step("noop()").observation.split(f"'{name}'", 1)[1]  # now seen twice
        result = by_name.step(f'click("{name}")')
        assert result.info["failure"].kind == FailureKind.INVALID_ACTION and f"2 elements are named '{name}'" in \
            result.observation and "use an id" in result.observation
    finally:
        by_id.close(), by_name.close()
    with pytest.raises(ValueError, match="name_targets"):
        rlvr_gym.make("web/FileManager-v0", name_targets=True)


@pytest.mark.browser
def test_a_drop_down_list_refuses_a_click_on_its_option_or_an_option_it_lacks_at_once(
    warm_browser: BrowserHost,
) -> None:
    """Playwright cannot click an ``<option>`` of a ``<select>``, nor select an option the list lacks, and would
    wait out its timeout (a ``timeout`` failure, 3 s): the env refuses both at once as an ``invalid_action`` that
    names the ``select_option`` call to use or the options there are; the call it names works."""
    env = rlvr_gym.make(widgets.ENV_ID)
    try:
        for task in widgets.generate_tasks(widgets.ENV_ID, "train", 40):
            obs, _ = env.reset(options={"task": task})
            for _ in range(4):
                nodes = parse_tree(obs)
                lists = [i for i, n in enumerate(nodes) if n.role == "combobox"]
                if lists:
                    break
                obs = env.step(env.oracle_action()).observation
            if lists:
                break
        combobox = nodes[lists[0]]
        option = next(n for n in nodes if n.role == "option" and n.parent == lists[0] and "selected" not in n.props)
        hint = f'use select_option("{combobox.bid}", "{option.name}")'
        for action in (f'click("{option.bid}")', f'fill("{option.bid}", "x")', f'click("{option.name}")'):
            result = env.step(action)
            assert result.info["failure"].kind == FailureKind.INVALID_ACTION, action
            assert "option of a drop-down list" in result.observation and hint in result.observation
        result = env.step(f'select_option("{combobox.bid}", "Nobody")')  # Playwright would wait for it to appear
        assert result.info["failure"].kind == FailureKind.INVALID_ACTION
        assert f"'Nobody' is not an option of '{combobox.bid}'; its options: " in result.observation
        assert f"'{option.name}'" in result.observation.split("Page:")[0]
        result = env.step(f'select_option("{combobox.bid}", ["Nobody", " {option.name}  "])')  # as Playwright:
        assert "failure" not in result.info  # a single-choice list takes the first string it offers, spaces collapsed
        env.step(f'select_option("{combobox.bid}", "{nodes[lists[0] + 1].name}")')  # back to the first option
        after = parse_tree(env.step(hint.removeprefix("use ")).observation)
        assert "selected" in next(n for n in after if n.bid == option.bid).props
    finally:
        env.close()
