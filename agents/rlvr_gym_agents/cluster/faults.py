"""How a Ray actor's process ended, from the report Python's :mod:`faulthandler` wrote for it.

A learner rank (:class:`~rlvr_gym_agents.cluster.learner.LearnerRank`) points :func:`faulthandler.enable` at a file
of its group; when Ray says the rank died, :func:`describe_death` turns that file (and Ray's error) into the clause
the group's :class:`~rlvr_gym_agents.train.TrainingError` gives.
"""

from __future__ import annotations

import os
import re


def describe_death(report_path: str | None, error: Exception) -> str:
    """``its process ended: <fault_summary>; every thread's stack: <report_path>`` when the report names a fatal
    error; otherwise a clause that says no report was written (a signal faulthandler does not catch, such as the
    out-of-memory killer's SIGKILL, an exit or ``Py_FatalError``) with Ray's exit type from ``error``'s text.
    ``report_path``: None or a missing file (a process on another node, or one that never started) reads as empty."""
    summary = None
    if report_path is not None and os.path.exists(report_path):
        with open(report_path, encoding="utf-8", errors="replace") as report:
            summary = fault_summary(report.read())
    if summary is not None:
        return f"its process ended: {summary}; every thread's stack: {report_path}"
    exit_type = re.search(r"Worker exit type: (\w+)", str(error))
    ray_says = f"; Ray: {exit_type.group(1)}" if exit_type else ""
    return ("its process ended with no fault report: a signal the fault handler does not catch (SIGKILL, most "
            f"often the out-of-memory killer), an exit or a Python fatal error; see its Ray worker log{ray_says}")


def fault_summary(report: str, frames: int = 3) -> str | None:
    """One line from a report of Python's :mod:`faulthandler`: the fatal error and the innermost ``frames`` frames of
    the thread that crashed, e.g. ``Fatal Python error: Segmentation fault, in string_at (ctypes/__init__.py:519) <
    crash (test_x.py:12)``; None when the report names no fatal error (an empty file: faulthandler caught nothing;
    a SIGKILL, an exit or ``Py_FatalError`` leaves it empty)."""
    lines = report.splitlines()
    error = next((line.strip() for line in lines if line.startswith("Fatal Python error")), None)
    if error is None:
        return None
    start = next((i for i, line in enumerate(lines) if line.startswith("Current thread")), len(lines))
    where: list[str] = []
    for line in lines[start + 1:]:
        if not line.strip() or len(where) == frames:  # a blank line ends the thread's block
            break
        frame = _FRAME.fullmatch(line)
        if frame is not None:  # other lines: "  Garbage-collecting", "  <no Python frame>"
            path, number, function = frame.groups()
            short = "/".join(re.split(r"[\\/]", path)[-2:])  # POSIX or Windows separators
            where.append(f"{function} ({short}:{number})")
    return f"{error}, in {' < '.join(where)}" if where else error


_FRAME = re.compile(r'\s+File "(.*)", line (\S+) in (.*)')
"""One frame of a :mod:`faulthandler` report (the path may itself hold ``", line "``: the match is greedy)."""
