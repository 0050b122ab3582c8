"""Sandbox overhead per run: each back-end against a bare ``subprocess.run`` of the same command.

Commands: ``true`` (pure launch cost) and ``python3 -I -S -c pass`` (what the code judge starts). Runs
alternate between the bare baseline and each back-end so all see the same machine load; the table gives the
median milliseconds per run, the overhead over bare (ms) and the ratio.

Usage: ``.venv/bin/python benchmarks/sandbox_overhead.py [--runs 30] [--backends bwrap,subprocess]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import warnings

from rlvr_gym.sandbox import SandboxLimits, SandboxUnavailableError, get_sandbox

COMMANDS = {"true": ["/usr/bin/true"], "python3 -c pass": ["/usr/bin/python3", "-I", "-S", "-c", "pass"]}


def time_bare(argv: list[str]) -> float:
    """Seconds for one ``subprocess.run`` of ``argv`` with output captured."""
    start = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=False)
    return time.perf_counter() - start


def time_sandboxed(box: object, argv: list[str]) -> float:
    """Seconds for one ``box.run(argv)`` (fresh work dir, limits, output capture, clean-up)."""
    start = time.perf_counter()
    box.run(argv, limits=SandboxLimits(timeout_s=10))  # type: ignore[attr-defined]
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--backends", default="bwrap,subprocess")
    args = parser.parse_args()
    boxes = {}
    for name in args.backends.split(","):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                boxes[name] = get_sandbox(name)
        except SandboxUnavailableError as error:
            print(f"skipping {name}: {error}")
    print(f"{args.runs} runs each, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"{'command':<18} {'back-end':<11} {'bare ms':>8} {'sandboxed ms':>13} {'overhead ms':>12} {'ratio':>6}")
    for label, argv in COMMANDS.items():
        for name, box in boxes.items():
            bare, boxed = [], []
            for _ in range(args.runs):
                bare.append(time_bare(argv))
                boxed.append(time_sandboxed(box, argv))
            b, s = 1000 * statistics.median(bare), 1000 * statistics.median(boxed)
            print(f"{label:<18} {name:<11} {b:>8.1f} {s:>13.1f} {s - b:>12.1f} {s / b:>6.1f}")


if __name__ == "__main__":
    main()
