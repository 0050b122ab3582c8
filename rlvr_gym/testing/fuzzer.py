"""Fuzzing an env's ``step`` with malformed actions: it must answer each with an observation, never raise.

The inputs are what a policy (or a broken decoder) really sends: truncated JSON, unbalanced brackets, two
calls in one turn, unknown tools, wrong argument types, megabyte strings, NULs and other control
characters, lone surrogates (raw, and as ``\\ud800`` escapes that only become surrogates once JSON or a
Python literal is decoded), plus mutations of the task's own gold action (truncated, doubled, with a NUL or
a surrogate inserted), so the input reaches the env's later stages too. :func:`fuzz_env` plays them and
records every exception; :func:`action_strategy` draws more of them for ``hypothesis``.

Usage (a test)::

    report = fuzz_env("tools/Math-v0", extra_actions=[...])
    assert not report.errors, report.errors
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import traceback
from collections.abc import Iterable, Sequence
from typing import Any

from rlvr_gym.core import Env
from rlvr_gym.failures import Failure
from rlvr_gym.registry import spec
from rlvr_gym.tasks import Task, load_suite

MEGABYTE = 1_000_000

_CALL = '<tool_call>{{"name": "{name}", "arguments": {args}}}</tool_call>'
FIXED_ACTIONS: tuple[str, ...] = (
    "", " ", "\n", "\x00", "\x00" * 64, "".join(chr(c) for c in range(32)) + "\x7f", "\x1b[2J\x1b[31mred",
    "\ud800", "\udfff", "a\ud800b", "\udc80" * 10, "```python\n\ud800\n```", "```verilog\nmodule \ud800\n```",
    _CALL.format(name="python", args='{"code": "\\ud800"}'),
    _CALL.format(name="search", args='{"query": "\\udfff"}'),
    '<answer>\\ud800</answer>', "<answer>\ud800</answer>", "<answer>\x00</answer>",
    'python(code="\\ud800")', 'calculator(expression="1+\\udc00")', 'click("\\ud800")', 'fill("1", "\\udc80")',
    'answer("\\ud800")', 'search(query="\x00")',
    '<tool_call>{"name": "search", "argu', '<tool_call>{"name": "python", "arguments": {"code": "print(1)"',
    "{{{{{{", "}}}}}}", "((((((", "))))))", "[" * 10_000, "(" * 50_000, '"' * 1001,
    _CALL.format(name="search", args='{"query": "a"}') + _CALL.format(name="python", args='{"code": "1"}'),
    'click("1")\nclick("2")', 'click("1"); type("2", "x")',
    _CALL.format(name="rm_rf", args="{}"), _CALL.format(name="python", args='{"code": 123}'),
    _CALL.format(name="python", args='"not an object"'), '<tool_call>{"name": 5, "arguments": []}</tool_call>',
    "<tool_call></tool_call>", "<tool_call>null</tool_call>", "<answer>", "</answer><answer>",
    "x" * MEGABYTE, "\x00" * MEGABYTE, "𝔘" * (MEGABYTE // 4), "\n" * MEGABYTE, "(" * MEGABYTE,
    "\u202e\ufeff\u200b", "\r\n" * 1000, "<|im_end|><|endoftext|>",
    "module top(input a, output b); assign b = a; endmodule", "module m(\x00); endmodule", "endmodule",
    "goto(\"file:///etc/passwd\")", "go to \x00", "take \ud83d from desk 1", "examine " + "x" * 100_000,
    "rm -rf / 2>/dev/null; echo done", "cat /proc/1/cmdline", "printf '\\x00\\xff\\xfe'",
    "1e999999", "-0", "NaN", "None", "True", "__import__('os')",
)
"""Family-agnostic malformed actions (68 texts; five of them a megabyte of UTF-8 each)."""


def gold_mutations(gold: str) -> list[str]:
    """Malformed variants of a valid action: truncated, doubled, with a NUL or a surrogate inserted, with a
    ``\\ud800`` escape spliced into its first string literal."""
    half = gold[: len(gold) // 2]
    quote = gold.find('"')
    escaped = gold[: quote + 1] + "\\ud800" + gold[quote + 1:] if quote >= 0 else gold + '"\\ud800"'
    return [half, gold + gold, gold + "\n" + gold, gold + "\ud800", "\ud800" + gold, gold.replace(" ", "\x00", 1),
            gold + "\x00", escaped, gold[:-1], gold.upper(), gold + "\x1b[0m" * 100]


@dataclasses.dataclass
class FuzzReport:
    """What one fuzz run saw.

    Attributes:
        env_id: the env.
        num_actions: actions sent (steps taken).
        errors: ``"action repr -> exception"`` per step, reset or close that raised, or that broke the
            contract (a non-str observation, a non-finite reward, an untyped failure).
        failure_kinds: how many steps reported each failure kind.
    """

    env_id: str
    num_actions: int = 0
    errors: list[str] = dataclasses.field(default_factory=list)
    failure_kinds: dict[str, int] = dataclasses.field(default_factory=dict)


class EnvFuzzer:
    """Plays actions on one env, resetting on the env's tasks whenever an episode ends.

    Args:
        env_id: the registered id.
        tasks: tasks to reset on (default: the first 3 of the env's default suite, gold ones first).
        make_kwargs: passed to the env's constructor.
    """

    def __init__(self, env_id: str, tasks: Sequence[Task] | None = None, **make_kwargs: Any) -> None:
        self.report = FuzzReport(env_id)
        self.tasks = list(tasks) if tasks is not None else default_tasks(env_id)
        self.env: Env = spec(env_id).make(**make_kwargs)
        self._episode = 0
        self._live = False

    def play(self, action: str) -> None:
        """Sends one action (resetting first when no episode is running); records what went wrong."""
        if not self._live and not self._reset():
            return
        self.report.num_actions += 1
        try:
            observation, reward, terminated, truncated, info = self.env.step(action)
        except Exception as error:  # noqa: BLE001  (what the fuzz is looking for)
            self._record(action, error)
            self._live = False
            return
        failure = info.get("failure")
        if failure is not None:
            if not isinstance(failure, Failure):
                self.report.errors.append(f"{_short(action)} -> info['failure'] is a {type(failure).__name__}")
            else:
                kinds = self.report.failure_kinds
                kinds[failure.kind.value] = kinds.get(failure.kind.value, 0) + 1
        if not isinstance(observation, str) or not math.isfinite(float(reward)):
            self.report.errors.append(f"{_short(action)} -> observation {type(observation).__name__}, reward {reward}")
        self._live = not (terminated or truncated)

    def play_all(self, actions: Iterable[str]) -> None:
        """Plays every action in turn."""
        for action in actions:
            self.play(action)

    def new_episode(self) -> None:
        """Makes the next :meth:`play` start from a reset."""
        self._live = False

    def close(self) -> FuzzReport:
        """Closes the env (twice: it must be idempotent) and returns the report."""
        for _ in range(2):
            try:
                self.env.close()
            except Exception as error:  # noqa: BLE001
                self._record("<close>", error)
        return self.report

    def _reset(self) -> bool:
        task = self.tasks[self._episode % len(self.tasks)] if self.tasks else None
        self._episode += 1
        try:
            self.env.reset(seed=self._episode, options={"task": task} if task is not None else None)
        except Exception as error:  # noqa: BLE001
            self._record("<reset>", error)
            return False
        self._live = True
        return True

    def _record(self, action: str, error: BaseException) -> None:
        where = traceback.extract_tb(error.__traceback__)[-1]
        self.report.errors.append(f"{_short(action)} -> {type(error).__name__}: {str(error)[:200]} "
                                  f"(at {os.path.basename(where.filename)}:{where.lineno})")


def default_tasks(env_id: str, count: int = 3) -> list[Task]:
    """The first ``count`` tasks of the env's default suite for this env id, gold ones first (none: [])."""
    suite = spec(env_id).default_suite
    if suite is None:
        return []
    mine = [t for t in load_suite(suite).tasks if t.env_id == env_id]
    return ([t for t in mine if t.gold] + [t for t in mine if not t.gold])[:count]


def gold_actions(tasks: Sequence[Task]) -> list[str]:
    """Every gold action of ``tasks``, in order."""
    return [action for task in tasks for action in (task.gold or [])]


def fuzz_env(env_id: str, extra_actions: Iterable[str] = (), num_tasks: int = 3, **make_kwargs: Any) -> FuzzReport:
    """Plays :data:`FIXED_ACTIONS`, the gold mutations of the env's first tasks and ``extra_actions`` on a
    fresh env of ``env_id`` (on its first ``num_tasks`` default tasks), then closes it. Every fixed action
    starts an episode of its own; gold mutations are played after the gold prefix that precedes them, so they
    reach later turns."""
    fuzzer = EnvFuzzer(env_id, default_tasks(env_id, num_tasks), **make_kwargs)
    try:
        for action in FIXED_ACTIONS:
            fuzzer.new_episode()
            fuzzer.play(action)
        for task in fuzzer.tasks:
            gold = list(task.gold or [])
            for turn, action in enumerate(gold[:3]):
                for mutant in gold_mutations(action):
                    fuzzer.new_episode()
                    fuzzer.play_all(gold[:turn])
                    fuzzer.play(mutant)
        fuzzer.play_all(extra_actions)
    finally:
        report = fuzzer.close()
    return report


_FRAGMENTS = ("<tool_call>", "</tool_call>", "<answer>", "</answer>", "{", "}", "[", "]", "(", ")", '"', "'", ":",
              ",", "=", '"name": ', '"arguments": ', "```", "```python\n", "```verilog\n", "module ", "endmodule",
              "click(", "fill(", "go to ", "take ", "\\ud800", "\\u0000", "\\", "\x00", "\n", "\t", "1e999",
              "NaN", "None", "lambda", "api.", "search", "python", "calculator")


def action_strategy(max_size: int = 400) -> Any:
    """A ``hypothesis`` strategy of malformed actions: arbitrary text including lone surrogates and control
    characters, and random concatenations of call-syntax fragments (:data:`FIXED_ACTIONS` holds the huge
    ones; drawing megabytes is slow)."""
    from hypothesis import strategies as st

    characters = st.characters(categories=["L", "N", "P", "S", "Z", "Cc", "Cs"])
    fragments = st.lists(st.sampled_from(_FRAGMENTS) | st.text(characters, max_size=3), max_size=40).map("".join)
    return st.one_of(st.text(characters, max_size=max_size), fragments,
                     st.builds(str.__add__, fragments, st.text(st.characters(categories=["Cs"]), min_size=1)))


def child_processes() -> set[int]:
    """Pids of this process's living, non-zombie descendants."""
    import psutil

    alive = set()
    for child in psutil.Process(os.getpid()).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if child.status() != psutil.STATUS_ZOMBIE:
                alive.add(child.pid)
    return alive


def _short(action: str, limit: int = 60) -> str:
    text = repr(action[:limit])
    return text + (f"...({len(action)} chars)" if len(action) > limit else "")
