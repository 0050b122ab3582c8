"""The verdict: a pure function from what the judge observed to a reward.

Nothing here runs a tool. :func:`parse_sim_output` reads a VerilogEval-style testbench's output;
:func:`verdict` turns a :class:`JudgeOutcome` into a :class:`rlvr_gym.RewardResult`; :func:`feedback`
writes the text a multi-turn agent sees. The pass rule (VerilogEval's, hardened):

    pass  <=>  lint clean  and  both compiles succeed  and  the simulation exited normally (exit 0,
               no timeout, no limit hit)  and  the verdict line carries this run's nonce  and
               mismatches == 0  and  samples == the reference's own sample count

A timeout or a non-zero exit fails whatever was printed: ``vvp`` still runs ``final`` blocks when it is
terminated, which can print a clean-looking verdict.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Literal

from rlvr_gym.verifier import RewardResult

Stage = Literal["extract", "lint", "compile_alone", "compile", "simulate"]
"""How far a candidate got: the stage that failed, or ``"simulate"`` when it was simulated."""

_HINT_OUTPUT = re.compile(r"Hint: Output '([^']+)' has (\d+) mismatches\. First mismatch occurred at time (\d+)\.")
_SAMPLES = re.compile(r"Mismatches: (\d+) in (\d+) samples")


@dataclasses.dataclass(frozen=True)
class SimSummary:
    """What a VerilogEval-style testbench printed.

    Attributes:
        mismatches: mismatching samples (the verdict line's N), or None when no verdict line was found.
        samples: samples compared (the verdict line's M), or None.
        verdict_lines: how many nonce-tagged verdict lines were found (exactly 1 in a valid run).
        output_mismatches: per output port, ``(mismatch count, time of the first mismatch in ps)``.
        timeout_printed: the testbench printed its own ``TIMEOUT`` guard line.
        hints: the testbench's other ``Hint:`` lines (e.g. "Your reset doesn't seem to be working.").
    """

    mismatches: int | None
    samples: int | None
    verdict_lines: int = 0
    output_mismatches: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    timeout_printed: bool = False
    hints: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class JudgeOutcome:
    """Everything the judge observed about one candidate; the input of :func:`verdict`.

    Attributes:
        stage: the stage that failed, or ``"simulate"`` when the candidate was simulated.
        problems: lint problems, or the reason extraction failed.
        compile_log: compiler messages of the stage that failed (trimmed), else "".
        exit_code: the simulator's exit status (None when it did not finish).
        timed_out: the sandbox's wall-clock (or CPU-time) limit ended the run.
        killed_by: another sandbox limit that ended the run (``"memory"``, ``"output"``, ...), or None.
        sim: the parsed testbench output (None before simulation).
        expected_samples: the reference's own sample count on this testbench.
        synthesizable: yosys synthesised the design (None when not checked).
    """

    stage: Stage
    problems: tuple[str, ...] = ()
    compile_log: str = ""
    exit_code: int | None = None
    timed_out: bool = False
    killed_by: str | None = None
    sim: SimSummary | None = None
    expected_samples: int | None = None
    synthesizable: bool | None = None


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """How a verdict becomes a reward.

    Attributes:
        partial_credit: when True, a simulated design that is not fully correct earns the fraction of
            matching samples, ``1 - mismatches / samples`` (only when every sample was compared), scaled by
            ``partial_scale`` so it stays below a pass; when False the reward is binary.
        partial_scale: the most a failing design can earn with ``partial_credit``, in [0, 1).
        require_synthesis: a pass also requires yosys to synthesise the design.
    """

    partial_credit: bool = False
    partial_scale: float = 0.5
    require_synthesis: bool = False

    def __post_init__(self) -> None:
        if not 0.0 <= self.partial_scale < 1.0:
            raise ValueError(f"partial_scale must be in [0, 1), got {self.partial_scale}")


def parse_sim_output(stdout: str, nonce: str) -> SimSummary:
    """Parses a testbench's output; only verdict lines starting with ``nonce`` count.

    Args:
        stdout: the simulator's standard output.
        nonce: the random tag the judge put in front of the testbench's verdict line for this run.
    """
    verdicts = [m for line in stdout.splitlines() if line.startswith(nonce + " ")
                for m in [_SAMPLES.search(line)] if m]
    per_output = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _HINT_OUTPUT.finditer(stdout)}
    lines = stdout.splitlines()
    timeout = any(line.strip() == "TIMEOUT" for line in lines)
    hints = tuple(dict.fromkeys(line.strip() for line in lines if line.startswith("Hint: ")
                                and not line.startswith(("Hint: Output '", "Hint: Total mismatched"))))
    if len(verdicts) != 1:
        return SimSummary(None, None, len(verdicts), per_output, timeout, hints)
    return SimSummary(int(verdicts[0].group(1)), int(verdicts[0].group(2)), 1, per_output, timeout, hints)


def verdict(outcome: JudgeOutcome, config: RewardConfig = RewardConfig()) -> RewardResult:
    """The reward of one candidate (see the module docstring for the pass rule).

    Components (always present): ``lint`` (1 if the lint passed), ``compiled`` (1 if both compiles
    succeeded), ``sim_completed`` (1 if the simulation exited normally with a valid verdict line),
    ``match_fraction`` (matching samples / samples, 0 unless every expected sample was compared),
    ``pass``; plus ``synthesizable`` when it was checked.
    """
    components = {
        "lint": float(outcome.stage not in ("extract", "lint")),
        "compiled": float(outcome.stage == "simulate"),
        "sim_completed": 0.0,
        "match_fraction": 0.0,
        "pass": 0.0,
    }
    if outcome.synthesizable is not None:
        components["synthesizable"] = float(outcome.synthesizable)
    reason = _failure_reason(outcome)
    if reason is None:
        sim = outcome.sim
        assert sim is not None and sim.samples is not None and sim.mismatches is not None
        components["sim_completed"] = 1.0
        # clamped: a verdict line claiming more mismatches than samples must not make the reward negative
        components["match_fraction"] = max(0.0, 1.0 - sim.mismatches / sim.samples) if sim.samples else 0.0
        if sim.mismatches == 0:
            if config.require_synthesis and not outcome.synthesizable:
                reason = "simulation passed but yosys could not synthesise the design"
            else:
                components["pass"] = 1.0
                return RewardResult(1.0, components, f"pass: 0 mismatches in {sim.samples} samples")
        else:
            reason = f"{sim.mismatches} mismatches in {sim.samples} samples"
    value = config.partial_scale * components["match_fraction"] if config.partial_credit else 0.0
    return RewardResult(value, components, reason)


def _failure_reason(outcome: JudgeOutcome) -> str | None:
    """Why the run cannot count as a completed simulation, or None when it can."""
    if outcome.stage != "simulate":
        log_lines = outcome.compile_log.strip().splitlines()
        detail = outcome.problems[0] if outcome.problems else (log_lines[0] if log_lines else "")
        return f"failed at {outcome.stage}" + (f": {detail}" if detail else "")
    if outcome.timed_out:
        return "simulation timed out"
    if outcome.killed_by is not None:
        return f"simulation killed by the {outcome.killed_by} limit"
    if outcome.exit_code != 0:
        return f"simulation exited with status {outcome.exit_code}"
    sim = outcome.sim
    if sim is None or sim.samples is None or sim.mismatches is None:
        count = 0 if sim is None else sim.verdict_lines
        return f"no valid verdict line from the testbench ({count} found)"
    if outcome.expected_samples is None or sim.samples != outcome.expected_samples:
        return (f"the testbench compared {sim.samples} samples but the reference run compares "
                f"{outcome.expected_samples}: the simulation ended early or ran too long")
    return None


def feedback(outcome: JudgeOutcome, result: RewardResult, max_chars: int = 2000) -> str:
    """The observation a multi-turn agent gets after a submission: what failed and where.

    Lint problems and compiler messages are listed; after a simulation, the outputs that mismatched with
    their mismatch counts and the time of the first mismatch (ps).
    """
    if result.success:
        return f"PASS: {result.reason}."
    lines = [f"FAIL: {result.reason}."]
    if outcome.stage in ("extract", "lint"):
        lines += [f"- {p}" for p in outcome.problems]
    elif outcome.stage in ("compile_alone", "compile"):
        lines += ["Compiler output:", outcome.compile_log.strip()]
    elif outcome.sim is not None and outcome.sim.output_mismatches:
        ranked = sorted(outcome.sim.output_mismatches.items(), key=lambda kv: kv[1][1])
        lines.append("Mismatching outputs (first mismatch first):")
        lines += [f"- output '{name}': {count} mismatches, first at time {time} ps" for name, (count, time) in ranked]
        lines += list(outcome.sim.hints[:5])
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[: max_chars - 15] + "\n[... trimmed]"
