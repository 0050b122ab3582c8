"""rlvr_gym environment family: web. Real Chromium via Playwright; registers its ids when imported.

Ids:
    ``web/MiniWoB-v0``: MiniWoB++ pages from the ``miniwob`` wheel, rewarded by the page's success signal.
    ``web/FileManager-v0``, ``web/Mail-v0``, ``web/Planner-v0``, ``web/Sheet-v0``, ``web/Settings-v0``: desktop-like
    apps written for rlvr_gym (``rlvr_gym_web/apps``), with GUI and API actions and state-checked rewards.
    ``web/Widgets-v0``: generated one-record edits on a small page (a dialog, tabs, a search box or a two-step
    wizard; 2-4 actions, pages of ~60-150 tokens, held-out layout-and-change combinations in
    ``web/widgets-test``): the web tasks a ~1M-parameter model can learn (:mod:`rlvr_gym_web.desktop.widgets`).
"""

from rlvr_gym.registry import register

register(
    "web/MiniWoB-v0",
    "rlvr_gym_web.miniwob:MiniWoBEnv",
    description="MiniWoB++ pages in Chromium (file://), rewarded by the page's own success signal.",
    max_turns=10,
    default_suite="web/miniwob",
)

DESKTOP_APPS = {
    "FileManager": ("files", "a file manager (move, delete, rename, create folders)"),
    "Mail": ("mail", "a mail client (star, archive, send, count unread)"),
    "Planner": ("todo", "a to-do list with a calendar"),
    "Sheet": ("sheet", "a spreadsheet-like table of values"),
    "Settings": ("settings", "a settings panel with switches, choices and numbers"),
}
for _name, (_app, _what) in DESKTOP_APPS.items():
    register(
        f"web/{_name}-v0",
        "rlvr_gym_web.desktop.env:DesktopEnv",
        description=f"Desktop-like app in Chromium: {_what}; GUI and API actions, state-checked reward.",
        kwargs={"app": _app},
        max_turns=30,
        default_suite=f"web/{_app}",
    )

register(
    "web/Widgets-v0",
    "rlvr_gym_web.desktop.env:DesktopEnv",
    description="Generated one-record edits (dialog, tabs, search, wizard) on a small page; the commit ends "
                "the episode; state-checked reward.",
    kwargs={"app": "widgets", "page_header": False, "reuse_page": True},
    max_turns=8,
    default_suite="web/widgets-test",
)
