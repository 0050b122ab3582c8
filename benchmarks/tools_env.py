"""Tool-use envs: tool-call parser throughput and env step latency, each beside a baseline.

Usage::

    .venv/bin/python benchmarks/tools_env.py [--seconds 1.5] [--python]

Measured (ours vs baseline, in alternating slices so the ratios hold on a loaded machine):

- parser: :func:`rlvr_gym.toolcall.parse_action` on a fixed mix of actions (Hermes JSON calls, several calls,
  Python-style calls, answers, malformed text) vs ``json.loads`` of the JSON bodies alone (the least any
  parser must do);
- step latency of each tools env on a typical action vs a step of ``testing/Echo-v0`` (the base class's own
  overhead with a trivial ``_step``); a step that ends its episode includes the reset that follows (untimed
  resets would need a second clock per call), which is why Echo and single-turn BFCL include one each step;
- ``fork()`` (deep copy) vs ``fork_by_replay()`` mid-episode;
- with ``--python``: one ``python`` tool call (bubblewrap sandbox) vs a calculator call.
No timed assertions: numbers only.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable

import rlvr_gym
from rlvr_gym import load_suite
from rlvr_gym.testing import echo_tasks
from rlvr_gym.toolcall import ToolCall, parse_action

ACTIONS = [
    ToolCall("search", {"query": "founder of Brimcast Labs", "k": 3}).to_hermes(),
    ToolCall("lookup", {"entity": "Wyven Indel"}).to_hermes()
    + ToolCall("calculator", {"expression": "3 * 4"}).to_hermes(),
    'calculate_triangle_area(base=10, height=5, unit="units")',
    "[math.hypot(x=4, y=5), spotify.play(artist='Taylor Swift', duration=20)]",
    "I looked it up. <answer>Vimar Group</answer>",
    "I am not sure what to do here.",
    '<tool_call>{"name": "lookup", "arguments": {"entity": </tool_call>',
]


def interleaved_rates(operations: list[Callable[[], object]], seconds: float, slice_s: float = 0.05) -> list[float]:
    """Calls per second of each operation, measured in alternating slices of ``slice_s`` seconds."""
    calls, spent = [0] * len(operations), [0.0] * len(operations)
    while sum(spent) < seconds:
        for index, operation in enumerate(operations):
            started = time.perf_counter()
            while time.perf_counter() - started < slice_s:
                operation()
                calls[index] += 1
            spent[index] += time.perf_counter() - started
    return [c / s for c, s in zip(calls, spent, strict=True)]


def cycle(functions: list[Callable[[], object]]) -> Callable[[], None]:
    """One callable that runs the next function of the list on each call."""
    state = {"i": 0}

    def run() -> None:
        functions[state["i"] % len(functions)]()
        state["i"] += 1

    return run


def episode_step(env_id: str, task: rlvr_gym.Task, prefix: list[str], action: str) -> Callable[[], object]:
    """A closure stepping ``action`` after replaying ``prefix``; resets (untimed) when the episode ends."""
    env = rlvr_gym.make(env_id)

    def restart() -> None:
        env.reset(options={"task": task})
        for previous in prefix:
            env.step(previous)

    restart()

    def step() -> None:
        result = env.step(action)
        if result.terminated or result.truncated or env.turn >= env.max_turns - 1:
            restart()

    return step


def forkers(env_id: str, task: rlvr_gym.Task, num_actions: int) -> tuple[Callable[[], object], Callable[[], object]]:
    """``fork`` and ``fork_by_replay`` of an env that played the first ``num_actions`` gold actions."""
    env = rlvr_gym.make(env_id)
    env.reset(options={"task": task})
    for action in (task.gold or [])[:num_actions]:
        env.step(action)
    return env.fork, env.fork_by_replay


def report(label: str, ours: float, baseline: float, baseline_label: str) -> None:
    print(f"  {label:<34} {1e6 / ours:>9.1f} us   {baseline_label:<26} {1e6 / baseline:>9.1f} us   "
          f"ratio {baseline / ours:>6.2f}x")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=1.5, help="measuring time per comparison")
    parser.add_argument("--python", action="store_true", help="also time the sandboxed python tool")
    args = parser.parse_args()
    print(f"per-call time (lower is better); ratio = ours / baseline time; {args.seconds:.1f} s per comparison")

    bodies = [a.split("<tool_call>")[1].split("</tool_call>")[0] for a in ACTIONS if a.startswith("<tool_call>{")]
    ours, base = interleaved_rates([cycle([lambda a=a: parse_action(a) for a in ACTIONS]),
                                    cycle([lambda b=b: json.loads(b) for b in bodies[:2]])], args.seconds)  # fmt: skip
    report("parse_action (7-action mix)", ours, base, "json.loads (body only)")
    print(f"  parser throughput: {ours:,.0f} actions/s on one core")

    echo_task = echo_tasks(1)[0]
    echo = episode_step("testing/Echo-v0", echo_task, [], "say nothing")
    multihop = load_suite("tools/multihop_test")[1]
    math_task = load_suite("tools/math_test")[0]
    bfcl = load_suite("tools/bfcl_parallel_multiple")[0]
    multi = load_suite("tools/bfcl_multi_turn_base")[0]
    start = multihop.data["plan"]["chains"][0]["start"]
    cases = [
        ("MultiHopQA lookup", episode_step("tools/MultiHopQA-v0", multihop, [], multihop.gold[0])),
        (
            "MultiHopQA search (BM25, k=3)",
            episode_step("tools/MultiHopQA-v0", multihop, [], ToolCall("search", {"query": start}).to_hermes()),
        ),
        ("Math calculator", episode_step("tools/Math-v0", math_task, [], math_task.gold[0])),
        ("BFCL single-turn (AST match)", episode_step("tools/BFCL-v0", bfcl, [], bfcl.gold[0])),
        ("BFCL multi-turn call (back-end)", episode_step("tools/BFCLMultiTurn-v0", multi, [], "ls(a=True)")),
    ]
    for label, step in cases:
        ours, base = interleaved_rates([step, echo], args.seconds)
        report(f"step: {label}", ours, base, "step: testing/Echo-v0")

    for env_id, task in (("tools/MultiHopQA-v0", load_suite("tools/multihop_test")[2]),
                         ("tools/BFCLMultiTurn-v0", multi)):  # fmt: skip
        fork, replay = forkers(env_id, task, 2)
        ours, base = interleaved_rates([fork, replay], args.seconds)
        report(f"fork(): {env_id.split('/')[1]}", ours, base, "fork_by_replay()")

    if args.python:
        code = ToolCall("python", {"code": f"print({math_task.data['solution']})"}).to_hermes()
        ours, base = interleaved_rates([episode_step("tools/Math-v0", math_task, [], code),
                                        episode_step("tools/Math-v0", math_task, [], math_task.gold[0])],
                                       max(args.seconds, 5.0), slice_s=0.5)  # fmt: skip
        report("step: python tool (sandbox)", ours, base, "step: calculator tool")


if __name__ == "__main__":
    main()
