"""Formal equivalence of a candidate design with the reference, by yosys's SAT solver, bounded.

A testbench checks a design for as long as it runs; a design that agrees with it that long and misbehaves
afterwards (a counter that flips an output after the last checked cycle), or only on inputs the testbench
never applies, passes simulation. This check compares the two designs on *every* input sequence:

``miter -equiv`` builds a circuit whose ``trigger`` output is 1 when the reference's and the candidate's
outputs differ (an X in the reference's output matches anything, as in the testbench; that needs ``sat
-enable_undef``, without which yosys 0.23 proves a design with a trigger input "equivalent"; inputs are
kept defined, ``-set-def-inputs``); ``sat -tempinduct``
then runs bounded model checking from the all-zero initial state (both designs' registers, as after
``-set-init-zero``) and k-induction, lengthening both up to ``max_steps`` cycles:

* ``equivalent``: induction proved ``trigger`` is never 1 (for every input sequence, at every depth);
* ``not_equivalent``: the base case found an input sequence of at most ``max_steps`` cycles after which the
  outputs differ; the counterexample (inputs and both outputs per cycle) is kept;
* ``unknown``: neither within ``max_steps`` steps or ``timeout_s`` seconds, or yosys could not read the
  design (yosys 0.23's SystemVerilog front end is narrower than Icarus's). A difference deeper than
  ``max_steps`` cycles ends here too: only a proof rules it out (``strict`` mode in the judge).

k-induction cannot prove designs whose outputs agree for any number of cycles from *unreachable* pairs of
states (two sequence detectors whose hidden counters differ, while the input avoids the pattern). When it
leaves a design undecided, the same miter (two-valued: an X on either side becomes a free input, so a proof
holds for every resolution of it) goes to ABC's PDR (``yosys-abc``, part of Debian's yosys), which finds an
inductive invariant itself; its proofs are taken, its counterexamples are not (the testbench ignores the
reference's X, PDR does not).

Registers start at zero on both sides (``-set-init-zero``), where simulation starts them at X until the
testbench's reset; designs that differ only before their first reset can therefore be told apart here.
Asynchronous resets are modelled as synchronous (``async2sync``). yosys runs in the RTL judge's sandbox.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

from rlvr_gym.sandbox import Sandbox, SandboxLimits, SandboxResult
from rlvr_gym.verifier import RewardResult
from rlvr_gym_rtl.lint import TOP_MODULE
from rlvr_gym_rtl.problem import REF_MODULE

EquivalenceStatus = Literal["equivalent", "not_equivalent", "unknown"]
_LOG = "eq.log"
_SCRIPT = f"""read_verilog -sv ref.sv
read_verilog -sv cand.sv
hierarchy -check
proc
flatten
memory
opt_clean
async2sync
miter -equiv -flatten -make_outputs -ignore_gold_x {REF_MODULE} {TOP_MODULE} miter
hierarchy -top miter
opt -fast
sat -tempinduct -enable_undef -set-def-inputs -prove trigger 0 -set-init-zero -seq 1 -maxsteps {{max_steps}} -show-inputs -show-outputs miter
"""
_PDR_SCRIPT = f"""read_verilog -sv ref.sv
read_verilog -sv cand.sv
hierarchy -check
proc
flatten
memory
opt_clean
async2sync
setundef -undriven -anyseq
setundef -anyseq
miter -equiv -flatten {REF_MODULE} {TOP_MODULE} miter
hierarchy -top miter
opt -fast
techmap
opt -fast
dffunmap
setundef -zero -init
aigmap
write_aiger -zinit miter.aig
"""
_PDR_LOG = "pdr.log"
_PDR_PROVEN = "Property proved."
_PROVEN = "Induction step proven: SUCCESS!"
_REFUTED = "model found for base case: FAIL!"
_INDUCTION_TIMED_OUT = 124  # the script's status when k-induction ran out of its share of the time
_CEX_ROW = re.compile(r"^\s+(\d+)\s+\\(\S+)\s+\S+\s+\S+\s+([01xz]+)\s*$")


@dataclasses.dataclass(frozen=True)
class EquivalenceResult:
    """The typed verdict of one check.

    Attributes:
        status: ``"equivalent"``, ``"not_equivalent"`` or ``"unknown"``.
        detail: one line for the agent: what was proved, the counterexample's length, or why unknown.
        counterexample: for ``not_equivalent``, ``[(cycle, signal, value in binary)...]`` with the inputs
            (``in_*``), the reference's (``gold_*``) and the candidate's (``gate_*``) outputs; else empty.
        duration_s: wall-clock seconds of the check.
    """

    status: EquivalenceStatus
    detail: str
    counterexample: tuple[tuple[int, str, str], ...] = ()
    duration_s: float = 0.0

    def describe(self, max_rows: int = 24) -> str:
        """The verdict and the counterexample's last cycles as text (for feedback)."""
        if not self.counterexample:
            return self.detail
        last = max(cycle for cycle, _, _ in self.counterexample)
        rows = [f"  cycle {c}: {name} = {value}" for c, name, value in self.counterexample if c >= last - 2]
        return self.detail + "\n" + "\n".join(rows[-max_rows:])


EQUIVALENCE_COLLECT = (_LOG, _PDR_LOG)
"""The files a check's run must return for :func:`equivalence_result`."""
_INDUCTION_SHARE, _PDR_SHARE = 0.5, 0.4
"""Shares of the check's time limit for k-induction and, when that leaves the design undecided, for PDR."""


def equivalence_script(timeout_s: float = 10.0) -> str:
    """The shell script of a check (run in the work dir that holds :func:`equivalence_files`).

    yosys's ``sat -tempinduct`` first (at most half of ``timeout_s``); when it neither proves nor refutes,
    the miter goes to ABC's PDR (``yosys-abc``, shipped with Debian's yosys) for the next 40%. The script
    exits with yosys's status, 124 when k-induction ran out of its time.
    """
    induction_s, pdr_s = _INDUCTION_SHARE * timeout_s, _PDR_SHARE * timeout_s
    return (f"timeout -s KILL {induction_s:.2f} yosys -s eq.ys >{_LOG} 2>&1\nstatus=$?\n"
            f"[ $status -eq 137 ] && status={_INDUCTION_TIMED_OUT}\n"
            f"grep -q -e '{_PROVEN}' -e '{_REFUTED}' {_LOG} && exit $status\n"
            f"[ $status -eq 0 ] || [ $status -eq {_INDUCTION_TIMED_OUT} ] || exit $status\n"
            f"yosys -q -s pdr.ys >{_PDR_LOG} 2>&1 && timeout -s KILL {pdr_s:.2f} "
            f"yosys-abc -c 'read_aiger miter.aig; pdr' >>{_PDR_LOG} 2>&1\nexit $status\n")


def equivalence_limits(timeout_s: float = 10.0, memory_limit_mb: int = 2048) -> SandboxLimits:
    """The sandbox limits of one check: ``timeout_s`` wall-clock seconds, ``memory_limit_mb`` MiB for yosys."""
    return SandboxLimits(timeout_s=timeout_s, cpu_time_s=max(1, int(timeout_s) + 1), memory_limit_mb=memory_limit_mb,
                         file_size_limit_mb=64, output_limit_bytes=64 * 1024)


def equivalence_files(reference: str, candidate: str, max_steps: int = 20) -> dict[str, str]:
    """The work dir of one check: both designs (as yosys reads them) and the yosys script."""
    return {"ref.sv": _for_yosys(reference), "cand.sv": _for_yosys(candidate),
            "eq.ys": _SCRIPT.format(max_steps=int(max_steps)), "pdr.ys": _PDR_SCRIPT}


def equivalence_result(run: SandboxResult, max_steps: int = 20) -> EquivalenceResult:
    """The verdict of a finished check's run (:func:`equivalence_script` with :data:`EQUIVALENCE_COLLECT`)."""
    log = run.files.get(_LOG, b"").decode("utf-8", "replace")
    pdr_log = run.files.get(_PDR_LOG, b"").decode("utf-8", "replace")
    timed_out = run.timed_out or run.killed_by == "cpu_time" or run.exit_code == _INDUCTION_TIMED_OUT
    return parse_log(log, timed_out, run.exit_code, max_steps, run.duration_s, pdr_log)


def check_equivalence(
    sandbox: Sandbox, reference: str, candidate: str, *, max_steps: int = 20, timeout_s: float = 10.0,
    memory_limit_mb: int = 2048,
) -> EquivalenceResult:
    """Checks ``candidate`` (defining ``TopModule``) against ``reference`` (defining ``RefModule``).

    Args:
        sandbox: where yosys runs (it must be able to run ``yosys``).
        reference: the reference's source.
        candidate: the candidate's source (already linted: no testbench names, no system tasks that matter).
        max_steps: the longest input sequence (in clock cycles) the base case tries, and the longest
            induction; more finds deeper differences and proves more, at a cost growing faster than linearly.
        timeout_s: wall-clock limit of the check, in seconds (past it: ``unknown``).
        memory_limit_mb: address-space limit of yosys, in MiB.

    Returns:
        The :class:`EquivalenceResult`; never raises on a bad design (that is ``unknown``).
    """
    run = sandbox.run(["sh", "-c", equivalence_script(timeout_s)], files=equivalence_files(reference, candidate, max_steps),
                      limits=equivalence_limits(timeout_s, memory_limit_mb), collect=EQUIVALENCE_COLLECT)
    return equivalence_result(run, max_steps)


_ALWAYS_COMB = re.compile(r"\balways_comb\b")


def _for_yosys(source: str) -> str:
    """``always_comb`` as ``always @*``: yosys 0.23 refuses an ``always_comb`` in which it infers a latch
    (it cannot see that an enum's ``case`` is complete), where Icarus and the testbench are content; the
    latch, if any, is then modelled (as a multiplexer after ``async2sync``) like any other."""
    return _ALWAYS_COMB.sub("always @*", source)


def parse_log(log: str, timed_out: bool, exit_code: int | None, max_steps: int, duration_s: float = 0.0,
              pdr_log: str = "") -> EquivalenceResult:
    """The verdict from yosys's log and, when k-induction left it open, ABC's PDR log (pure; see
    :func:`check_equivalence`). PDR is trusted for proofs only: its model is two-valued (an X on either side
    is any value, so a proof holds for every resolution of it), while the testbench ignores the reference's
    X; a refutation there may be no refutation in simulation."""
    if _REFUTED in log:
        table = log.split(_REFUTED, 1)[1].split("Time Signal Name", 1)[-1]  # the base case's model follows
        rows = tuple((int(m.group(1)), m.group(2), m.group(3)) for m in map(_CEX_ROW.match, table.splitlines()) if m)
        length = max((cycle for cycle, _, _ in rows), default=0)
        return EquivalenceResult("not_equivalent", f"not equivalent to the reference: the outputs differ after "
                                 f"{length} cycle(s) from the all-zero state on this input sequence", rows,
                                 duration_s)
    if _PROVEN in log:
        return EquivalenceResult("equivalent", "proved equivalent to the reference (k-induction)",
                                 duration_s=duration_s)
    if _PDR_PROVEN in pdr_log:
        return EquivalenceResult("equivalent", "proved equivalent to the reference (PDR)", duration_s=duration_s)
    if timed_out:
        return EquivalenceResult("unknown", "the equivalence check ran out of time", duration_s=duration_s)
    if exit_code != 0:
        errors = [line for line in log.splitlines() if "ERROR" in line or "error" in line.lower()]
        return EquivalenceResult("unknown", "yosys could not check this design: "
                                 + (errors[-1].strip()[:300] if errors else f"exit status {exit_code}"),
                                 duration_s=duration_s)
    return EquivalenceResult("unknown", f"neither proved nor refuted within {max_steps} cycles",
                             duration_s=duration_s)


EQUIVALENCE_MODES = ("off", "refute", "strict")
"""How the judge uses the check: not at all; a counterexample fails a design that passed simulation; or,
``strict``, only a proof lets it pass (``unknown`` fails too: no difference at any depth is possible)."""


def apply_equivalence(result: RewardResult, check: EquivalenceResult, mode: str) -> RewardResult:
    """The reward of a design that passed simulation, once the equivalence check is in (pure).

    Adds the component ``equivalence`` (1.0 proved, 0.5 unknown, 0.0 refuted); the value drops to 0.0 when
    the check refuted the design, or in ``strict`` mode could not prove it.
    """
    score = {"equivalent": 1.0, "unknown": 0.5, "not_equivalent": 0.0}[check.status]
    components = {**result.components, "equivalence": score}
    fails = check.status == "not_equivalent" or (mode == "strict" and check.status == "unknown")
    if not fails:
        return RewardResult(result.value, components, f"{result.reason}; {check.detail}".strip("; "))
    components["pass"] = 0.0
    return RewardResult(0.0, components, f"passes the testbench, but {check.describe()}")
