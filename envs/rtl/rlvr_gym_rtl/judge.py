"""The RTL judge: extract, lint, compile, simulate in a sandbox, and score.

Pipeline for one candidate (stages named as in :data:`rlvr_gym_rtl.verdict.Stage`):

1. ``extract``: the design from the action (:func:`rlvr_gym_rtl.lint.extract_code`).
2. ``lint``: pyslang rejects what a design has no business containing (:mod:`rlvr_gym_rtl.lint`) and
   checks ``TopModule``'s interface against the reference's.
3. ``compile_alone``: ``iverilog -g2012 -s TopModule -t null`` (elaboration only) on the candidate alone
   (no testbench in scope, so hierarchical names into it cannot resolve, and the reference cannot be
   instantiated). With ``standalone_elaboration="auto"`` (the default) Icarus does this only for candidates
   that contain a dotted (hierarchical) name: the lint has already elaborated every candidate alone with
   pyslang (``TopModule`` as the only top, unresolved names rejected), and the only names on which two
   elaborators could disagree about *where* they resolve are dotted ones; simple names, instantiations,
   calls and package imports resolve inside the candidate or are rejected. ``"always"`` runs it for all.
4. ``compile``: ``iverilog -Wall -Winfloop -Wno-timescale -g2012 -s tb`` on testbench, reference and
   candidate, *in that order* (the candidate's compiler directives cannot reach the files before it).
5. ``simulate``: ``vvp -n``; the testbench's verdict line is tagged with a fresh random nonce. The
   simulation has its own time limit, a multiple of the reference's own run on the problem with a floor
   (``sim_time_factor``, ``min_sim_timeout_s``), so a hung design is killed (SIGKILL) in seconds, as a
   typed ``timeout``, instead of holding the sandbox for the run's whole ``timeout_s``.

Stages 3-5 run as one script in one :mod:`rlvr_gym.sandbox` run under a wall-clock limit, in a sandbox
started ahead of time (:mod:`rlvr_gym_rtl.runner`); the two compiles run side by side when the machine has
an idle core. A design the lint rejects never reaches the sandbox (running the lint while the sandbox
compiles was measured: it saves ~0.3 ms on a passing design and costs a sandbox start and a kill on a
rejected one). The reference runs through the same pipeline once per problem to learn its sample count
(cached per process by :attr:`RtlProblem.key`). The verdict itself is the pure :func:`rlvr_gym_rtl.verdict.verdict`.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import threading
from typing import Any, ClassVar

from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym.sandbox import Sandbox, SandboxLimits, SandboxResult, get_sandbox
from rlvr_gym.verifier import RewardResult
from rlvr_gym_rtl.equivalence import (
    EQUIVALENCE_COLLECT,
    EQUIVALENCE_MODES,
    EquivalenceResult,
    apply_equivalence,
    equivalence_files,
    equivalence_limits,
    equivalence_result,
    equivalence_script,
)
from rlvr_gym_rtl.lint import (
    TOP_MODULE,
    HarnessNames,
    Port,
    extract_code,
    harness_names,
    has_dotted_names,
    lint_candidate,
    module_ports,
)
from rlvr_gym_rtl.problem import REF_MODULE, RtlProblem
from rlvr_gym_rtl.runner import ScriptRunner, StartedRun
from rlvr_gym_rtl.verdict import JudgeOutcome, RewardConfig, SimSummary, feedback, parse_sim_output, verdict

IVERILOG_FLAGS = ("-Wall", "-Winfloop", "-Wno-timescale", "-g2012")
"""The VerilogEval harness's compile flags (its Makefile), minus nothing."""
_EXIT_ALONE, _EXIT_BUILD, _EXIT_SIM_TIMEOUT = 90, 91, 92
_ALONE = f"iverilog -g2012 -s {TOP_MODULE} -t null cand.sv >alone.log 2>&1"  # `-t null`: elaborate only
_BUILD = f"iverilog {' '.join(IVERILOG_FLAGS)} -s tb -o sim.vvp test.sv ref.sv cand.sv >build.log 2>&1"
_SIM_LIMIT_FILE = "sim.limit"
# The simulation alone runs under its own limit (seconds in sim.limit; 0 or no file: none but the run's).
# SIGKILL, not timeout's default SIGTERM: vvp runs `final` blocks on SIGTERM and can print a clean summary.
_SIMULATE = (f"timeout -s KILL \"$(cat {_SIM_LIMIT_FILE} 2>/dev/null || echo 0)\" vvp -n sim.vvp\n"
             f"status=$?\n[ $status -eq 137 ] && exit {_EXIT_SIM_TIMEOUT}\nexit $status\n")
_SCRIPT_SEQUENTIAL = f"{_ALONE} || exit {_EXIT_ALONE}\n{_BUILD} || exit {_EXIT_BUILD}\n{_SIMULATE}"
_SCRIPT_PARALLEL = (
    f"{_ALONE} & alone=$!\n{_BUILD}; build=$?\nwait $alone || exit {_EXIT_ALONE}\n"
    f"[ $build -eq 0 ] || exit {_EXIT_BUILD}\n{_SIMULATE}"
)
"""The two compiles run side by side when a core is idle, else one after the other (same verdicts)."""
_SCRIPT_BUILD_ONLY = f"{_BUILD} || exit {_EXIT_BUILD}\n{_SIMULATE}"
_SCRIPTS = {"alone_parallel": _SCRIPT_PARALLEL, "alone_sequential": _SCRIPT_SEQUENTIAL, "build_only": _SCRIPT_BUILD_ONLY}
_COLLECT = ("alone.log", "build.log")
_SYNTH_SCRIPT = f"yosys -q -p 'read_verilog -sv cand.sv; synth -top {TOP_MODULE}' >synth.log 2>&1"
_LOG_CHARS = 1500
RTL_IMAGE = "rlvr-gym/rtl:latest"
"""The Docker back-end's image (``docker build -t rlvr-gym/rtl:latest docker/rtl``); env ``RLVR_GYM_RTL_IMAGE``."""
NO_CODE_MESSAGE = (f"no Verilog module found; answer with the complete design in a ```verilog block defining "
                   f"`module {TOP_MODULE}`")


class ReferenceFailedError(RuntimeError):
    """The problem's own reference does not pass its testbench here (e.g. an iverilog 11 limitation)."""


@dataclasses.dataclass(frozen=True)
class Judgement:
    """The judge's answer for one candidate.

    Attributes:
        result: the reward (``RewardResult``: value, components, reason).
        outcome: what the judge observed (input of the pure verdict).
        code: the extracted design, or None.
        failure: a typed failure when the action or the run went wrong (parse error, forbidden construct,
            timeout, sandbox or verifier error), else None. A design that compiles but is wrong is not a
            failure, just a low reward.
        equivalence: the formal check's verdict when it ran (the judge's ``equivalence`` mode is on and the
            design passed simulation), else None.
    """

    result: RewardResult
    outcome: JudgeOutcome
    code: str | None
    failure: Failure | None = None
    equivalence: EquivalenceResult | None = None

    @property
    def feedback(self) -> str:
        """What a multi-turn agent is told (see :func:`rlvr_gym_rtl.verdict.feedback`)."""
        if self.failure is not None and self.failure.kind == FailureKind.VERIFIER_ERROR:
            return f"The judge could not score this problem: {self.failure.message}"
        if self.equivalence is not None and not self.result.success:
            return f"The design {self.result.reason}"
        return feedback(self.outcome, self.result)


@dataclasses.dataclass(frozen=True)
class _ProblemFacts:
    ports: list[Port]
    names: HarnessNames
    expected_samples: int
    reference_s: float = 0.0
    """Wall-clock seconds of the reference's own run (compiles and simulation) when the facts were learnt."""


class RtlJudge:
    """Scores Verilog designs against a problem's reference with Icarus Verilog, in a sandbox.

    Args:
        config: how the verdict becomes a reward (default ``RewardConfig()``: binary).
        timeout_s: wall-clock limit of one compile+simulate run, in seconds (VerilogEval's harness: 30).
        sim_time_factor: a candidate's simulation may take this many times the reference's whole run
            (compiles included, measured once per problem), ...
        min_sim_timeout_s: ... but at least this many seconds (and at most ``timeout_s``); past it the
            simulator is killed and the verdict is a ``timeout``. A hung design thus holds the sandbox for
            seconds, not ``timeout_s``.
        equivalence: the formal check of a design that passed simulation against the reference
            (:mod:`rlvr_gym_rtl.equivalence`): ``"off"``; ``"refute"`` (a counterexample fails it); ``"strict"``
            (only a proof lets it pass).
        equivalence_steps: cycles of bounded model checking and k-induction the check tries.
        equivalence_timeout_s: wall-clock limit of the check, in seconds (past it: ``unknown``).
        memory_limit_mb: address-space limit per process in the sandbox, in MiB.
        sandbox: a sandbox back-end name for :func:`rlvr_gym.sandbox.get_sandbox`, or a sandbox object.
        standalone_elaboration: ``"auto"`` (Icarus elaborates the candidate alone when it has a dotted name)
            or ``"always"``.
        warm_sandbox: keep one sandbox started ahead of time for the next judgement (see
            :mod:`rlvr_gym_rtl.runner`; it holds a few idle processes until :meth:`close`).

    Raises:
        rlvr_gym.sandbox.SandboxUnavailableError: when no sandbox can run here.
    """

    _facts_cache: ClassVar[dict[str, _ProblemFacts]] = {}
    _broken_cache: ClassVar[dict[str, str]] = {}  # references that cannot compile here (deterministic)
    _cache_lock: ClassVar[threading.Lock] = threading.Lock()

    def __init__(
        self,
        config: RewardConfig | None = None,
        timeout_s: float = 30.0,
        memory_limit_mb: int = 2048,
        sandbox: str | Sandbox = "auto",
        standalone_elaboration: str = "auto",
        warm_sandbox: bool = True,
        sim_time_factor: float = 10.0,
        min_sim_timeout_s: float = 2.0,
        equivalence: str = "off",
        equivalence_steps: int = 20,
        equivalence_timeout_s: float = 10.0,
    ) -> None:
        if equivalence not in EQUIVALENCE_MODES:
            raise ValueError(f"equivalence must be one of {EQUIVALENCE_MODES}, got {equivalence!r}")
        self.equivalence, self.equivalence_steps = equivalence, equivalence_steps
        self.equivalence_timeout_s = equivalence_timeout_s
        if timeout_s <= 0 or sim_time_factor <= 0 or min_sim_timeout_s <= 0:
            raise ValueError(f"timeout_s, sim_time_factor and min_sim_timeout_s must be > 0, got {timeout_s}, "
                             f"{sim_time_factor}, {min_sim_timeout_s}")
        self.sim_time_factor, self.min_sim_timeout_s = sim_time_factor, min_sim_timeout_s
        if standalone_elaboration not in ("auto", "always"):
            raise ValueError(f"standalone_elaboration must be 'auto' or 'always', got {standalone_elaboration!r}")
        self.standalone_elaboration = standalone_elaboration
        self.config = config or RewardConfig()
        self.limits = SandboxLimits(
            timeout_s=timeout_s, cpu_time_s=max(1, int(timeout_s) + 1), memory_limit_mb=memory_limit_mb,
            file_size_limit_mb=64, output_limit_bytes=256 * 1024,
        )
        self.sandbox = _rtl_sandbox(sandbox) if isinstance(sandbox, str) else sandbox
        self.runner = ScriptRunner(self.sandbox, self.limits, _SCRIPTS, warm=warm_sandbox)
        self.equivalence_runner = None if equivalence == "off" else ScriptRunner(
            self.sandbox, equivalence_limits(equivalence_timeout_s, memory_limit_mb),
            {"equivalence": equivalence_script(equivalence_timeout_s)}, warm=warm_sandbox)

    def close(self) -> None:
        """Stops the sandboxes kept warm for the next judgement (a later judgement starts others)."""
        self.runner.close()
        if self.equivalence_runner is not None:
            self.equivalence_runner.close()

    def __deepcopy__(self, memo: dict[int, Any]) -> RtlJudge:
        return self  # stateless apart from the shared cache and the sandbox handle; forks share it

    def judge(self, problem: RtlProblem, action: str) -> Judgement:
        """Scores the design in ``action`` (an agent's answer, fenced or raw) on ``problem``."""
        code = extract_code(action)
        if code is None:
            outcome = JudgeOutcome("extract", (NO_CODE_MESSAGE,))
            failure = Failure(FailureKind.PARSE_ERROR, outcome.problems[0])
            return Judgement(verdict(outcome, self.config), outcome, None, failure)
        try:
            facts = self.problem_facts(problem)
        except ReferenceFailedError as error:
            outcome = JudgeOutcome("simulate", ("reference failed",))
            return Judgement(RewardResult(0.0, {"pass": 0.0}, str(error)), outcome, code,
                             Failure(FailureKind.VERIFIER_ERROR, str(error)))
        return self.judge_code(problem, code, facts)

    def judge_code(self, problem: RtlProblem, code: str, facts: _ProblemFacts | None = None) -> Judgement:
        """Scores an already extracted design (lint, compile, simulate, verdict)."""
        facts = facts or self.problem_facts(problem)
        problems = lint_candidate(code, facts.ports, facts.names)
        if problems:
            outcome = JudgeOutcome("lint", tuple(problems))
            rejected = Failure(FailureKind.INVALID_ACTION, "; ".join(problems)[:500], {"problems": problems})
            return Judgement(verdict(outcome, self.config), outcome, code, rejected)
        standalone = self.standalone_elaboration == "always" or has_dotted_names(code)
        sim_limit_s = self.sim_limit_s(facts)
        # The formal check runs beside the simulation when a core is idle (cancelled if the design fails
        # it), else only after the design passed it.
        concurrent = self.equivalence_runner is not None and _core_idle()
        check_run = self._start_equivalence(problem, code) if concurrent else None
        try:
            outcome, run = self._simulate(problem, code, facts.expected_samples, standalone, sim_limit_s)
            if self.config.require_synthesis and outcome.stage == "simulate":
                outcome = dataclasses.replace(outcome, synthesizable=self._synthesizes(code))
            failure: Failure | None = run.failure() if outcome.stage == "simulate" else None
            if failure is None and outcome.timed_out:
                failure = Failure(FailureKind.TIMEOUT, f"the simulation ran past its {sim_limit_s:.1f} s limit "
                                  f"({self.sim_time_factor:g}x the reference's run, at least "
                                  f"{self.min_sim_timeout_s:g} s): does the design hang (a combinational loop)?",
                                  {"sim_limit_s": sim_limit_s, "reference_s": facts.reference_s})
            result, check = verdict(outcome, self.config), None
            if self.equivalence_runner is not None and result.success:
                started, check_run = check_run or self._start_equivalence(problem, code), None
                check = equivalence_result(self.equivalence_runner.finish(started, EQUIVALENCE_COLLECT),
                                           self.equivalence_steps)
                result = apply_equivalence(result, check, self.equivalence)
        finally:
            if check_run is not None:
                self.equivalence_runner.cancel(check_run)  # type: ignore[union-attr]
        return Judgement(result, outcome, code, failure, check)

    def _start_equivalence(self, problem: RtlProblem, code: str) -> StartedRun:
        """Starts the formal check of ``code`` against the reference (the check must be on)."""
        assert self.equivalence_runner is not None, "the equivalence check is off"
        files = equivalence_files(problem.reference, code, self.equivalence_steps)
        return self.equivalence_runner.start("equivalence", files)

    def sim_limit_s(self, facts: _ProblemFacts) -> float:
        """The candidate's simulation time limit on a problem, in seconds (see the class's arguments)."""
        scaled = max(self.min_sim_timeout_s, self.sim_time_factor * facts.reference_s)
        return min(self.limits.timeout_s, scaled)

    def problem_facts(self, problem: RtlProblem) -> _ProblemFacts:
        """The reference's ports, the harness's names and the reference's sample count (cached).

        Raises:
            ReferenceFailedError: when the reference itself does not compile or pass here.
        """
        with self._cache_lock:
            cached, broken = self._facts_cache.get(problem.key), self._broken_cache.get(problem.key)
        if cached is not None:
            return cached
        if broken is not None:
            raise ReferenceFailedError(broken)
        ports = module_ports(problem.reference, REF_MODULE)
        if ports is None:
            raise ReferenceFailedError(f"{problem.name}: the reference defines no `{REF_MODULE}`")
        outcome, run = self._simulate(problem, problem.reference_solution(), None, standalone=False)
        sim = outcome.sim
        if outcome.stage != "simulate" or not run.ok or sim is None or sim.mismatches != 0 or not sim.samples:
            detail = outcome.compile_log.strip()[:300] or run.stderr[-300:] or f"{sim}"
            message = (f"{problem.name}: the reference does not pass its own testbench with this simulator "
                       f"({outcome.stage}): {detail}")
            if outcome.stage in ("compile_alone", "compile"):
                with self._cache_lock:
                    self._broken_cache[problem.key] = message
            raise ReferenceFailedError(message)
        facts = _ProblemFacts(ports, harness_names(problem.testbench, problem.reference), sim.samples,
                              run.duration_s)
        with self._cache_lock:
            self._facts_cache[problem.key] = facts
        return facts

    def _simulate(
        self, problem: RtlProblem, code: str, expected: int | None, standalone: bool = True,
        sim_limit_s: float | None = None,
    ) -> tuple[JudgeOutcome, SandboxResult]:
        """Stages 3-5 on ``code`` in one sandbox run; the simulation alone under ``sim_limit_s`` seconds (None:
        only the run's ``timeout_s``)."""
        nonce = "RLVR-" + secrets.token_hex(8)
        files = {"test.sv": problem.prepared_testbench(nonce), "ref.sv": problem.reference, "cand.sv": code}
        if sim_limit_s is not None:
            files[_SIM_LIMIT_FILE] = f"{sim_limit_s:.3f}"
        started = self.runner.start(_script_for_load() if standalone else "build_only", files)
        run = self.runner.finish(started, _COLLECT)
        return _outcome(run, nonce, expected), run

    def _synthesizes(self, code: str) -> bool:
        run = self.sandbox.run(["sh", "-c", _SYNTH_SCRIPT], files={"cand.sv": code}, limits=self.limits)
        return run.ok


def _rtl_sandbox(backend: str) -> Sandbox:
    """The sandbox back-end; a Docker one runs the RTL image (:data:`RTL_IMAGE`), which holds iverilog."""
    sandbox = get_sandbox(backend)
    if sandbox.name == "docker":
        from rlvr_gym.sandbox.container import DockerSandbox

        return DockerSandbox(image=os.environ.get("RLVR_GYM_RTL_IMAGE", RTL_IMAGE),
                             client=getattr(sandbox, "client", None))
    return sandbox


def _outcome(run: SandboxResult, nonce: str, expected: int | None) -> JudgeOutcome:
    """What stages 3-5 observed, from the script's exit status, logs and output."""
    logs = {name: data.decode("utf-8", "replace") for name, data in run.files.items()}
    if run.sandbox_error is None and run.exit_code == _EXIT_ALONE:
        return JudgeOutcome("compile_alone", compile_log=_trim(logs.get("alone.log", "")))
    if run.sandbox_error is None and run.exit_code == _EXIT_BUILD:
        return JudgeOutcome("compile", compile_log=_trim(_candidate_lines(logs.get("build.log", ""))))
    sim_timed_out = run.sandbox_error is None and run.exit_code == _EXIT_SIM_TIMEOUT
    return JudgeOutcome("simulate", exit_code=run.exit_code, timed_out=run.timed_out or sim_timed_out,
                        killed_by=run.killed_by or (f"sandbox: {run.sandbox_error}" if run.sandbox_error else None),
                        sim=parse_sim_output(run.stdout, nonce), expected_samples=expected)


def _core_idle() -> bool:
    """Whether the 1-minute load average leaves a core idle (False where it cannot be read)."""
    try:
        return os.getloadavg()[0] < (os.cpu_count() or 1) - 1
    except OSError:  # getloadavg is unavailable on some platforms
        return False


def _script_for_load() -> str:
    """The parallel script when a core is idle, else the sequential one."""
    return "alone_parallel" if _core_idle() else "alone_sequential"


def _candidate_lines(log: str) -> str:
    """Compiler messages about the candidate first (the testbench's own warnings are noise to the agent)."""
    lines = log.splitlines()
    mine = [line for line in lines if line.startswith("cand.sv")]
    return "\n".join(mine or lines)


def _trim(text: str) -> str:
    return text if len(text) <= _LOG_CHARS else text[:_LOG_CHARS] + "\n[... trimmed]"


__all__ = ["Judgement", "ReferenceFailedError", "RtlJudge", "SimSummary"]
