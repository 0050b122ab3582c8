"""The judge's script runner: a spare sandbox started ahead of time serves exactly one run."""

from __future__ import annotations

import os
import pickle
import threading
import time
from collections.abc import Iterator

import psutil
import pytest
from rlvr_gym_rtl.judge import RtlJudge
from rlvr_gym_rtl.problem import RtlProblem, gold_action
from rlvr_gym_rtl.runner import ScriptRunner
from rlvr_gym_rtl.verdict import verdict

from rlvr_gym.sandbox import SandboxLimits, SandboxUnavailableError, get_sandbox

SCRIPTS = {
    "show": "cat in.txt; ls; echo state > left_behind.txt",
    "slow": "sleep 1.5; echo done",
    "loud": "head -c 5000 /dev/zero | tr '\\0' x; echo",
}


@pytest.fixture
def runner() -> Iterator[ScriptRunner]:
    try:
        box = get_sandbox("bwrap")
    except SandboxUnavailableError as error:
        pytest.skip(str(error))
    made = ScriptRunner(box, SandboxLimits(timeout_s=3.0, output_limit_bytes=1000), SCRIPTS)
    yield made
    made.close()


def _children() -> set[int]:
    return {p.pid for p in psutil.Process(os.getpid()).children(recursive=True)}


def test_each_run_gets_a_fresh_sandbox(runner: ScriptRunner) -> None:
    first = runner.finish(runner.start("show", {"in.txt": "one\n"}))
    second = runner.finish(runner.start("show", {"in.txt": "two\n"}))
    assert first.ok and first.stdout == "one\nin.txt\n"
    assert second.ok and second.stdout == "two\nin.txt\n"  # nothing left behind by the first run


def test_wall_clock_limit_counts_from_the_go_ahead(runner: ScriptRunner) -> None:
    runner.finish(runner.start("show", {"in.txt": "x"}))  # leaves a spare waiting
    time.sleep(2.0)  # longer than the 3 s limit minus the run's 1.5 s
    result = runner.finish(runner.start("slow", {}))
    assert result.ok and result.stdout == "done\n" and not result.timed_out


def test_output_limit(runner: ScriptRunner) -> None:
    result = runner.finish(runner.start("loud", {}))
    assert result.killed_by == "output" and result.exit_code is None and len(result.stdout) == 1000


def test_cancel_and_close_leave_no_process(runner: ScriptRunner) -> None:
    before = _children()
    runner.cancel(runner.start("slow", {}))
    runner.close()
    deadline = time.monotonic() + 5
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not (_children() - before)
    assert runner.finish(runner.start("show", {"in.txt": "again\n"})).stdout.startswith("again\n")


def test_a_dead_spare_is_replaced(runner: ScriptRunner) -> None:
    runner.finish(runner.start("show", {"in.txt": "x"}))
    _owner, _launcher, spare = runner._slot[0]
    os.killpg(spare.proc.pid, 9)
    spare.proc.wait()
    assert runner.finish(runner.start("show", {"in.txt": "still\n"})).stdout == "still\nin.txt\n"


def test_a_spare_whose_launching_thread_ended_is_not_used(runner: ScriptRunner) -> None:
    worker = threading.Thread(target=lambda: runner.finish(runner.start("show", {"in.txt": "x"})))
    worker.start()
    worker.join()  # its spare dies with it (bubblewrap --die-with-parent), now or at any moment
    _owner, launcher, orphan = runner._slot[0]
    assert launcher is worker
    run = runner.start("show", {"in.txt": "main\n"})
    assert run.session is not orphan and orphan.proc.poll() is not None  # closed, not used
    assert runner.finish(run).stdout == "main\nin.txt\n"


def test_long_lines_and_back_to_back_runs(runner: ScriptRunner) -> None:
    for _ in range(10):  # the spare launched during one run serves the next
        assert runner.finish(runner.start("loud", {})).killed_by == "output"
        assert runner.finish(runner.start("show", {"in.txt": "y\n"})).stdout == "y\nin.txt\n"


def test_a_forked_child_never_uses_its_parents_spare(runner: ScriptRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    runner.finish(runner.start("show", {"in.txt": "x"}))
    _owner, _launcher, parents = runner._slot[0]
    monkeypatch.setattr(os, "getpid", lambda: -1)  # as seen from a forked child
    run = runner.start("show", {"in.txt": "child\n"})
    assert run.session is not parents and parents.proc.poll() is None
    assert runner.finish(run).stdout == "child\nin.txt\n"
    parents.close()


def test_pickled_copy_starts_its_own_spare(runner: ScriptRunner) -> None:
    runner.finish(runner.start("show", {"in.txt": "x"}))
    copy = pickle.loads(pickle.dumps(runner))
    assert copy._slot == [] and copy.finish(copy.start("show", {"in.txt": "copy\n"})).stdout == "copy\nin.txt\n"
    copy.close()


def test_unknown_script_and_bad_names(runner: ScriptRunner) -> None:
    with pytest.raises(KeyError, match="unknown script"):
        runner.start("rm -rf /", {})
    with pytest.raises(ValueError, match="script names"):
        ScriptRunner(runner.sandbox, runner.limits, {"a;b": "true"})


def test_lint_rejection_wins_over_a_passing_simulation(judge: RtlJudge, counter: RtlProblem) -> None:
    passing_but_forbidden = counter.reference_solution().replace(
        "endmodule", "  initial $display(\"hello\");\nendmodule", 1)
    facts = judge.problem_facts(counter)
    simulated, _run = judge._simulate(counter, passing_but_forbidden, facts.expected_samples)
    assert verdict(simulated).value == 1.0  # the simulation alone would pass it
    judgement = judge.judge(counter, gold_action(passing_but_forbidden))
    assert judgement.outcome.stage == "lint" and judgement.result.value == 0.0
    cold = RtlJudge(timeout_s=10.0, warm_sandbox=False)
    assert cold.judge(counter, gold_action(passing_but_forbidden)).outcome.stage == "lint"
    assert cold.judge(counter, gold_action(counter.reference_solution())).result.success
