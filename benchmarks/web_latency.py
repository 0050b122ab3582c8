"""Reset and step latency of ``web/MiniWoB-v0`` against a baseline on the same Chromium.

Run: ``.venv/bin/python benchmarks/web_latency.py [--episodes 10] [--browsergym-python /tmp/bgvenv/bin/python]``

Ours: one browser kept for the whole run, a new context per episode (in-process, and through the Ray pool).

Baseline, in order of preference:

1. BrowserGym's own MiniWoB env (``browsergym/miniwob.<page>``), when ``--browsergym-python`` names a Python
   with ``browsergym-miniwob`` installed (keep it in a throw-away venv: it pins its own Playwright). Its
   Chromium is pointed at Debian's through a ``PLAYWRIGHT_BROWSERS_PATH`` folder of symlinks.
2. Otherwise plain Playwright doing what BrowserGym's reset does: launch Chromium for every reset, load the
   page, start the episode; each step clicks and reads the DOM back (``page.content()``), without
   BrowserGym's ``slow_mo`` and 0.5 s pre-observation delay, so this baseline is *faster* than BrowserGym.

Both run the same tasks (the train split of ``tasks/web/miniwob.jsonl``) and the same gold actions. The
report prints medians and 90th percentiles in milliseconds and ours/baseline ratios (target: <= 0.2).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BROWSERGYM_SCRIPT = r"""
import json, sys, time, gymnasium as gym, browsergym.miniwob  # noqa: F401
pages, episodes = json.loads(sys.argv[1]), int(sys.argv[2])
resets, steps = [], []
for i in range(episodes):
    page = pages[i % len(pages)]
    env = gym.make(f"browsergym/miniwob.{page}")
    t = time.perf_counter(); obs, info = env.reset(seed=i); resets.append(time.perf_counter() - t)
    t = time.perf_counter(); env.step("noop()"); steps.append(time.perf_counter() - t)
    env.close()
print(json.dumps({"reset": resets, "step": steps}))
"""


def summary(values: list[float]) -> tuple[float, float]:
    """(median, 90th percentile) in milliseconds."""
    ordered = sorted(values)
    return 1000 * statistics.median(ordered), 1000 * ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def measure_ours(episodes: int, use_pool: bool) -> dict[str, list[float]]:
    """Reset and step times of web/MiniWoB-v0 replaying gold actions."""
    from rlvr_gym_web.browser import keep_browser_warm

    import rlvr_gym
    from rlvr_gym import load_suite
    from rlvr_gym.workers import EnvPool

    tasks = list(load_suite("web/miniwob").filter(split="train"))
    times: dict[str, list[float]] = {"reset": [], "step": []}
    pool = EnvPool(num_workers=1) if use_pool else None
    with keep_browser_warm():
        env = pool.make("web/MiniWoB-v0") if pool else rlvr_gym.make("web/MiniWoB-v0")
        env.reset(options={"task": tasks[0]})  # warm-up: the browser launch is paid once per worker
        for i in range(episodes):
            task = tasks[i % len(tasks)]
            start = time.perf_counter()
            env.reset(options={"task": task})
            times["reset"].append(time.perf_counter() - start)
            for action in ["noop()", *(task.gold or [])]:
                start = time.perf_counter()
                result = env.step(action)
                times["step"].append(time.perf_counter() - start)
                if result.terminated:
                    break
        env.close()
    if pool:
        pool.close()
    return times


def measure_relaunch_baseline(episodes: int) -> dict[str, list[float]]:
    """Plain Playwright, relaunching Chromium for each reset (BrowserGym's reset pattern)."""
    from playwright.sync_api import sync_playwright
    from rlvr_gym_web.browser import CHROMIUM_ARGS, chromium_path
    from rlvr_gym_web.miniwob import miniwob_dir

    from rlvr_gym import load_suite

    tasks = list(load_suite("web/miniwob").filter(split="train"))
    times: dict[str, list[float]] = {"reset": [], "step": []}
    with sync_playwright() as playwright:
        for i in range(episodes):
            page_name = tasks[i % len(tasks)].data["page"]
            start = time.perf_counter()
            browser = playwright.chromium.launch(executable_path=chromium_path(), args=list(CHROMIUM_ARGS))
            context = browser.new_context(viewport={"width": 332, "height": 214}, locale="en-US", timezone_id="UTC")
            page = context.new_page()
            page.goto((miniwob_dir() / f"{page_name}.html").as_uri())
            page.evaluate(f"() => {{ Math.seedrandom({i}); core.startEpisodeReal(); }}")
            page.content()
            times["reset"].append(time.perf_counter() - start)
            for _ in range(2):
                start = time.perf_counter()
                page.mouse.click(5, 5)
                page.content()
                times["step"].append(time.perf_counter() - start)
            browser.close()
    return times


def browsers_path_for(python: str) -> str:
    """A PLAYWRIGHT_BROWSERS_PATH whose Chromium entry is a symlink to Debian's Chromium."""
    from rlvr_gym_web.browser import chromium_path

    package = subprocess.run([python, "-c", "import playwright, os; print(os.path.dirname(playwright.__file__))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    browsers = json.loads((Path(package) / "driver" / "package" / "browsers.json").read_text())["browsers"]
    folder = Path(tempfile.mkdtemp(prefix="pwbrowsers-"))
    for entry in browsers:
        if entry["name"] in ("chromium", "chromium-headless-shell"):
            for sub, exe in (("chrome-linux", "chrome"), ("chrome-linux", "headless_shell"),
                             ("chrome-headless-shell-linux64", "chrome-headless-shell")):
                target = folder / f"{entry['name'].replace('-', '_')}-{entry['revision']}" / sub / exe
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists():
                    target.symlink_to(os.path.realpath(chromium_path()))
    return str(folder)


def measure_browsergym(python: str, episodes: int) -> dict[str, list[float]]:
    """BrowserGym's MiniWoB env, run in another Python (its own venv)."""
    from rlvr_gym_web.miniwob import miniwob_dir

    from rlvr_gym import load_suite

    pages = sorted({t.data["page"] for t in load_suite("web/miniwob").filter(split="train")})
    env = {**os.environ, "MINIWOB_URL": miniwob_dir().as_uri() + "/", "PLAYWRIGHT_BROWSERS_PATH": browsers_path_for(python)}
    done = subprocess.run([python, "-c", BROWSERGYM_SCRIPT, json.dumps(pages), str(episodes)], check=False,
                          capture_output=True,
                          text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"BrowserGym run failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--browsergym-python", default=None, help="a Python with browsergym-miniwob installed")
    parser.add_argument("--no-pool", action="store_true", help="skip the Ray pool measurement")
    args = parser.parse_args()
    rows = {"ours (in-process)": measure_ours(args.episodes, use_pool=False)}
    if not args.no_pool:
        rows["ours (Ray pool)"] = measure_ours(args.episodes, use_pool=True)
    if args.browsergym_python:
        baseline_name, baseline = "BrowserGym miniwob", measure_browsergym(args.browsergym_python, args.episodes)
    else:
        print("no --browsergym-python: baseline is plain Playwright relaunching Chromium per reset")
        baseline_name, baseline = "relaunch baseline", measure_relaunch_baseline(args.episodes)
    rows[baseline_name] = baseline
    print(f"{'':22} {'reset p50':>10} {'reset p90':>10} {'step p50':>10} {'step p90':>10}   (ms)")
    for name, times in rows.items():
        (r50, r90), (s50, s90) = summary(times["reset"]), summary(times["step"])
        print(f"{name:22} {r50:10.0f} {r90:10.0f} {s50:10.0f} {s90:10.0f}")
    base_reset, base_step = summary(baseline["reset"])[0], summary(baseline["step"])[0]
    for name, times in rows.items():
        if name != baseline_name:
            print(f"{name}: reset {summary(times['reset'])[0] / base_reset:.2f}x, "
                  f"step {summary(times['step'])[0] / base_step:.2f}x of {baseline_name} (median)")


if __name__ == "__main__":
    sys.exit(main())
