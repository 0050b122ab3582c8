"""``web/MiniWoB-v0``: the MiniWoB++ tasks shipped in the ``miniwob`` wheel, in a real Chromium, over ``file://``.

A task names a MiniWoB page (``task.data["page"] = "click-button"``) and a seed. Reset loads the page, seeds
``Math.seedrandom`` with the episode seed, removes the per-episode time limit and starts the episode (as
BrowserGym's MiniWoB tasks do). The reward is the page's own success signal, made binary like BrowserGym's:
1.0 when ``WOB_RAW_REWARD_GLOBAL > 0`` once ``WOB_DONE_GLOBAL`` is set, else 0.0 (:func:`verify_miniwob`).
``done()`` or ``answer(...)`` end the episode and score the page as it is.

Nondeterminism: the clock is fixed (``Date`` at the base env's ``FIXED_TIME``) and ``Math.random`` seeded, so
most pages are deterministic; those that still are not (animations, real-time play, timing-dependent
delays; MiniWoB-plusplus issue #119) are listed in :data:`NONDETERMINISTIC_PAGES` and marked in task
metadata. MiniWoB++ is MIT-licensed (Copyright 2016 OpenAI; Farama Foundation).

Version History:
    v0: first version.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlvr_gym.verifier import RewardResult
from rlvr_gym_web.actions import Action
from rlvr_gym_web.base import BrowserEnv

# Pages whose episode depends on wall-clock timing or animation even with a fixed clock and seed.
NONDETERMINISTIC_PAGES = frozenset({
    "chase-circle", "moving-items", "simon-says", "button-delay", "hot-cold", "drag-box", "drag-circle",
    "drag-cube", "drag-items", "drag-items-grid", "drag-shapes", "drag-shapes-2", "drag-single-shape",
    "drag-sort-numbers", "draw-circle", "draw-line", "highlight-text", "highlight-text-2", "use-colorwheel",
    "use-colorwheel-2", "use-slider", "use-slider-2", "resize-textarea", "copy-paste", "copy-paste-2",
    "stock-market",
})
EPISODE_TIME_MS = 3_600_000
_HIDE_HUD_CSS = "#reward-display, #sync-task-cover { display: none !important; }"
_START_JS = """
async ({seed, maxTime, css, waitMs}) => {
  const style = document.createElement('style');
  style.textContent = css;
  document.head.appendChild(style);
  Math.seedrandom(seed);
  core.EPISODE_MAX_TIME = maxTime;
  core.startEpisodeReal();
  for (let waited = 0; WOB_TASK_READY !== true; waited += 20) {
    if (waited > waitMs) throw new Error('the MiniWoB task did not become ready');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return core.getUtterance();
}
"""


def miniwob_dir() -> Path:
    """The folder of MiniWoB++ task pages inside the installed ``miniwob`` wheel.

    Raises:
        ModuleNotFoundError: when the ``miniwob`` package is not installed.
    """
    try:
        import miniwob
    except ModuleNotFoundError:
        raise ModuleNotFoundError("web/MiniWoB-v0 needs the `miniwob` wheel for its pages: pip install miniwob") from None
    return Path(miniwob.__file__).parent / "html" / "miniwob"


def miniwob_pages() -> list[str]:
    """The names of every MiniWoB++ page (``"click-button"``, ...), sorted."""
    return sorted(path.stem for path in miniwob_dir().glob("*.html"))


def verify_miniwob(done: bool, raw_reward: float, reason: str | None = None) -> RewardResult:
    """Binary reward from MiniWoB's globals: 1.0 if the page ended the episode with a positive raw reward.

    Args:
        done: ``WOB_DONE_GLOBAL``.
        raw_reward: ``WOB_RAW_REWARD_GLOBAL`` in [-1, 1] (the page's score before its time discount).
        reason: ``WOB_REWARD_REASON``, passed into the result's reason.
    """
    success = bool(done) and raw_reward > 0
    why = f"page {'finished' if done else 'not finished'}, raw reward {raw_reward:g}" + (f" ({reason})" if reason else "")
    return RewardResult(1.0 if success else 0.0, {"raw_reward": float(raw_reward), "done": float(bool(done))}, why)


class MiniWoBEnv(BrowserEnv):
    """MiniWoB++ pages in Chromium, rewarded by the page's own success signal. See the module docstring.

    Version History:
        v0: first version.
    """

    max_turns = 10
    strict_by_default = True  # third-party pages; some move elements from JavaScript (NONDETERMINISTIC_PAGES)

    def _open(self, task: Any) -> str:
        if task is None or "page" not in task.data:
            raise ValueError("web/MiniWoB-v0 needs a task with data['page'], e.g. {'page': 'click-button'}")
        page_name = str(task.data["page"])
        path = miniwob_dir() / f"{page_name}.html"
        if not path.is_file():
            raise ValueError(f"no MiniWoB page {page_name!r}; see rlvr_gym_web.miniwob.miniwob_pages()")
        self.page.goto(path.as_uri())
        seed = int(self.np_random.integers(0, 2**31 - 1))
        # One round trip: hide the reward display, seed, start the episode, wait until the task is ready.
        return str(self.page.evaluate(_START_JS, {"seed": seed, "maxTime": EPISODE_TIME_MS, "css": _HIDE_HUD_CSS,
                                                   "waitMs": int(self.action_timeout_s * 1000)}))

    def _allowed_origins(self) -> tuple[str, ...]:
        return (miniwob_dir().as_uri() + "/",)

    def _verdict(self, action: Action | None) -> RewardResult | None:
        done, raw, reason = self.page.evaluate("() => [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON]")
        ended_by_agent = action is not None and not action.is_api and action.name in ("done", "answer")
        if not done and not ended_by_agent:
            return None
        return verify_miniwob(bool(done), float(raw), reason)
