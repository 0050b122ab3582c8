"""Web envs in a real Chromium: gold and wrong solutions, observations, typed failures, crashes, clean-up."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from rlvr_gym_web import DESKTOP_APPS
from rlvr_gym_web.browser import BrowserHost, marked_browsers

import rlvr_gym
from rlvr_gym import FailureKind, Task, load_suite

pytestmark = pytest.mark.browser
ENV_OF_APP = {app: f"web/{name}-v0" for name, (app, _) in DESKTOP_APPS.items()}


def play(env: rlvr_gym.Env, task: Task, actions: list[str]) -> rlvr_gym.StepResult:
    env.reset(options={"task": task})
    for action in actions:
        result = env.step(action)
        if result.terminated or result.truncated:
            return result
    return result


def test_miniwob_gold_solves_one_task_per_page_and_wrong_does_not(warm_browser: BrowserHost) -> None:
    suite = load_suite("web/miniwob").filter(split="train")
    assert len(suite) == 14
    env = rlvr_gym.make("web/MiniWoB-v0")
    try:
        for task in suite:
            last = play(env, task, task.gold or [])
            assert last.terminated and last.reward == 1.0 and last.info["success"], task.id
            assert last.info["reward_details"]["components"]["raw_reward"] > 0
        wrong = play(env, suite[0], suite[0].wrong or [])
        assert wrong.terminated and wrong.reward == 0.0 and not wrong.info["success"]
    finally:
        env.close()


@pytest.mark.parametrize("app", list(ENV_OF_APP))
def test_desktop_gui_gold_api_gold_and_wrong(app: str, warm_browser: BrowserHost) -> None:
    suite = load_suite(f"web/{app}")
    env = rlvr_gym.make(ENV_OF_APP[app])
    try:
        for task in suite:
            gold = play(env, task, task.gold or [])
            assert gold.reward == 1.0 and gold.info["success"], (task.id, gold.info["reward_details"])
            if task.split == "test":
                continue  # API gold and wrong solutions on the train half keep the tier short
            api = play(env, task, task.metadata["api_gold"])
            assert api.reward == 1.0, (task.id, api.info["reward_details"])
            wrong = play(env, task, task.wrong or [])
            assert wrong.reward == 0.0 and not wrong.info["success"], task.id
    finally:
        env.close()


def test_observation_tools_and_typed_failures(warm_browser: BrowserHost, tmp_path: Path) -> None:
    task = load_suite("web/files")[0]
    env = rlvr_gym.make("web/FileManager-v0", screenshot_dir=str(tmp_path))
    try:
        obs, info = env.reset(options={"task": task})
        assert obs.startswith(f"Goal: {task.data['instruction']}\nURL: file://") and "\nPage:\n" in obs
        assert {t["function"]["name"] for t in info["tools"]} >= {"move_file", "delete_file"}
        assert Path(info["screenshot_path"]).stat().st_size > 1000
        cases = {
            'click("9999")': (FailureKind.INVALID_ACTION, "no element with id '9999'"),
            "click(": (FailureKind.PARSE_ERROR, "Invalid action"),
            'goto("https://example.com")': (FailureKind.INVALID_ACTION, "outside the allowed sites"),
            "api.delete_file(path='/nope.txt')": (FailureKind.TOOL_ERROR, "no file /nope.txt"),
        }
        for action, (kind, text) in cases.items():
            result = env.step(action)
            assert result.info["failure"].kind is kind and text in result.observation, action
            assert not result.terminated and result.reward == 0.0
        listing = env.step("api.list_folder(folder='/Downloads')")
        assert "Tool result: [" in listing.observation and "failure" not in listing.info
    finally:
        env.close()


def test_api_and_gui_change_the_same_state(warm_browser: BrowserHost) -> None:
    task = load_suite("web/files")[0]
    env = rlvr_gym.make("web/FileManager-v0")
    try:
        env.reset(options={"task": task})
        first = task.data["state"]["files"][0]["path"]
        folder, name = first.rsplit("/", 1)
        env.step(f"api.delete_file(path={first!r})")
        assert first not in [f["path"] for f in env.app_state()["files"]]  # type: ignore[attr-defined]
        obs = env.step(f'click("{_bid(env.last_observation, "button", folder)}")').observation
        assert f"cell '{name}'" not in obs
    finally:
        env.close()


def _bid(obs: str, role: str, name: str) -> str:
    from rlvr_gym_web.observation import bid_of, parse_tree

    return bid_of(parse_tree(obs), role, name)


def test_same_seed_same_page_and_math_random_is_seeded(warm_browser: BrowserHost) -> None:
    task = load_suite("web/miniwob")[4]
    env = rlvr_gym.make("web/MiniWoB-v0")
    try:
        first = env.reset(options={"task": task})[0]
        draws = env.page.evaluate("() => [Math.random(), Math.random()]")  # type: ignore[attr-defined]
        assert env.reset(options={"task": task})[0] == first
        assert env.page.evaluate("() => [Math.random(), Math.random()]") == draws  # type: ignore[attr-defined]
        assert env.page.evaluate("() => new Date().toISOString()").startswith("2024-03-15T10:00")  # type: ignore[attr-defined]
    finally:
        env.close()


def test_killed_browser_is_env_crash_and_next_reset_relaunches(warm_browser: BrowserHost) -> None:
    task = load_suite("web/miniwob")[0]
    env = rlvr_gym.make("web/MiniWoB-v0")
    try:
        env.reset(options={"task": task})
        mine = [pid for pid, owner in marked_browsers().items() if owner == os.getpid()]
        assert len(mine) == 1
        os.killpg(os.getpgid(mine[0]), signal.SIGKILL)
        time.sleep(0.5)
        crashed = env.step('click("5")')
        assert crashed.terminated and crashed.info["failure"].kind is FailureKind.ENV_CRASH
        env.reset(options={"task": task})
        assert play(env, task, task.gold or []).reward == 1.0
    finally:
        env.close()


@pytest.mark.parametrize("action", ['click("5"', "\x00", 'fill("1", "\\ud800")', 'click("5")'])
def test_after_a_browser_kill_any_next_action_is_env_crash(action: str, warm_browser: BrowserHost) -> None:
    task = load_suite("web/miniwob")[0]
    env = rlvr_gym.make("web/MiniWoB-v0")
    try:
        env.reset(options={"task": task})
        mine = [pid for pid, owner in marked_browsers().items() if owner == os.getpid()]
        os.killpg(os.getpgid(mine[0]), signal.SIGKILL)
        time.sleep(0.5)
        crashed = env.step(action)  # malformed actions too: their observation needs the page
        assert crashed.terminated and crashed.info["failure"].kind is FailureKind.ENV_CRASH
        env.reset(options={"task": task})
        assert play(env, task, task.gold or []).reward == 1.0
    finally:
        env.close()


@pytest.mark.parametrize("app", ["settings", "mail"])
def test_seed_only_tasks_are_generated_and_the_oracle_solves_them(app: str, warm_browser: BrowserHost) -> None:
    env = rlvr_gym.make(ENV_OF_APP[app])
    try:
        for seed in (11, 12):
            env.reset(options={"task": Task(id=f"gen-{seed}", env_id=ENV_OF_APP[app], options={"seed": seed})})
            for _ in range(20):
                result = env.step(env.oracle_action())  # type: ignore[attr-defined]
                if result.terminated:
                    break
            assert result.reward == 1.0, result.info.get("reward_details")
    finally:
        env.close()


PREFLIGHT_PAGE = """<style>@keyframes spin { to { transform: rotate(360deg); } } .spin { animation: spin 1s infinite; }</style>
<button data-bid="1">Plain</button>
<button data-bid="2" disabled>Off</button>
<div style="position: relative; display: inline-block">
  <button data-bid="3">Covered</button><div style="position: absolute; inset: 0; background: white"></div>
</div>
<button data-bid="4" style="visibility: hidden">Hidden</button>
<input data-bid="6" readonly value="x">
<select data-bid="7"><option data-bid="8" value="r">Red</option><option data-bid="9">  Dark   blue </option></select>
<select data-bid="12" size="3"><option data-bid="13">One</option></select>
<span data-bid="10"><b data-bid="11">inner</b></span>
<label data-bid="14" for="off">Code</label><input id="off" data-bid="15" disabled>
<button data-bid="16" aria-disabled="TRUE">Aria</button>
<div style="display: inline-block; width: 60px; height: 20px; overflow: hidden">
  <button data-bid="17" style="width: 120px">Clipped</button>
</div>
<button data-bid="18"><span data-bid="19">In</span></button>
<div style="width: 80px"><a data-bid="20" href="#">a link that wraps over lines</a></div>
<form><button data-bid="21">Send</button></form>
<div style="height: 2000px"></div><button data-bid="5">Below</button>"""


def test_preflight_says_clear_only_where_playwright_would_not_wait(warm_browser: BrowserHost) -> None:
    """An element action skips Playwright's actionability checks (``force``) only where the page shows the element
    visible, enabled, editable, still, wholly in view and on top at its centre, and is not one Playwright
    retargets; every other case keeps Playwright's waiting. MiniWoB's third-party pages keep it always."""
    from rlvr_gym_web.base import _PREFLIGHT_JS, _bid_selector

    context = warm_browser.new_context()
    try:
        page = context.new_page()
        page.set_content(PREFLIGHT_PAGE)
        facts = {bid: page.evaluate(_PREFLIGHT_JS, _bid_selector(bid)) for bid in map(str, range(1, 22))}
        clear = {bid for bid, fact in facts.items() if fact["clear"]}
        assert clear == {"1", "7", "10", "11", "12", "13", "18", "21"}
        # a link or a form's submit button may load a page: Playwright's click (it waits for that), not the mouse
        assert {bid for bid, fact in facts.items() if fact["navigates"]} == {"20", "21"}  # a list box's option too; not: disabled, covered,
        # hidden, below the fold, read-only, a closed drop-down's options, a label (Playwright acts on its control),
        # aria-disabled in capitals, clipped by its parent, inside a button (Playwright acts on the button), wrapped
        assert page.evaluate(_PREFLIGHT_JS, _bid_selector("99")) is None
        assert facts["7"]["list"] == {"multiple": False, "options": [["r", "Red"], ["Dark blue", "Dark blue"]]}
        assert facts["8"]["optionOf"] == ["7", "Red"] and facts["13"]["optionOf"] is None  # a list box's is clickable
        assert facts["1"]["list"] is None and facts["1"]["optionOf"] is None
        box = page.locator('[data-bid="1"]').bounding_box()  # a forced click goes to the box's centre (the mouse)
        assert facts["1"]["clear"] == pytest.approx([box["x"] + box["width"] / 2, box["y"] + box["height"] / 2])
        page.eval_on_selector('[data-bid="1"]', "el => el.classList.add('spin')")
        assert not page.evaluate(_PREFLIGHT_JS, _bid_selector("10"))["clear"]  # anything moving: wait as Playwright
    finally:
        context.close()
    miniwob, widgets = rlvr_gym.make("web/MiniWoB-v0"), rlvr_gym.make("web/Widgets-v0")
    assert miniwob.unwrapped.strict_actionability and not widgets.unwrapped.strict_actionability
    miniwob.close(), widgets.close()


def test_a_covered_element_keeps_playwrights_check_and_fails_as_it_did(warm_browser: BrowserHost) -> None:
    """A click on an element another one covers is not forced through to the cover: Playwright waits for it and
    the step records its timeout (forced, the click would land on the cover and fail silently)."""
    env = rlvr_gym.make("web/Widgets-v0", name_targets=True, action_timeout_s=0.3)
    try:
        env.reset(seed=0)
        name = env.unwrapped.oracle_action().split('"')[1]
        env.unwrapped.page.evaluate("""() => { const cover = document.createElement('div');
            cover.style.cssText = 'position: fixed; inset: 0; background: white; z-index: 9';
            document.body.appendChild(cover); }""")
        result = env.step(f'click("{name}")')
        assert result.info["failure"].kind is FailureKind.TIMEOUT and "Timeout 300ms" in result.observation
        cover_removed = env.unwrapped.page.evaluate("() => { document.body.lastElementChild.remove(); return 1; }")
        assert cover_removed and "failure" not in env.step(f'click("{name}")').info
    finally:
        env.close()
    strict = rlvr_gym.make("web/Widgets-v0", name_targets=True, strict_actionability=True)
    try:  # Playwright's checks on every action: the oracle still solves the task
        strict.reset(seed=0)
        for _ in range(8):
            result = strict.step(strict.unwrapped.oracle_action())
            if result.terminated:
                break
        assert result.reward == 1.0
    finally:
        strict.close()


def test_a_desktop_app_left_by_go_back_is_a_page_not_a_crash(warm_browser: BrowserHost) -> None:
    """The app's state comes with each observation (``page_state_js``): on a page without the app (``go_back()`` to
    the blank page before it) the episode goes on, and ``done()`` there ends it as a crash that says why."""
    env = rlvr_gym.make("web/FileManager-v0")
    try:
        env.reset(seed=0)
        result = env.step("go_back()")
        assert not result.terminated and "failure" not in result.info and env.unwrapped.page_state is None
        result = env.step("done()")
        assert result.terminated and result.info["failure"].kind is FailureKind.ENV_CRASH
        assert "app is not on the page" in result.observation
    finally:
        env.close()
