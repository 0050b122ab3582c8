"""Spec-to-RTL environments: the agent writes a Verilog ``TopModule``; a sandboxed simulator judges it.

Episode: the observation is the problem's spec (VerilogEval wording: implement ``module TopModule`` with the
listed ports). Each action is one submission: a complete design, preferably in a fenced ``verilog`` block.
The judge (:class:`rlvr_gym_rtl.judge.RtlJudge`) lints it, compiles it alone and with the testbench and the
reference, simulates it in a sandbox, and scores it (binary by default). With ``max_turns=1`` the first
submission ends the episode; with more, a failing submission returns the judge's feedback (lint problems,
compiler messages, or the mismatching outputs and the time of their first mismatch) as the next observation,
and the episode ends at the first pass or after the last allowed submission (``terminated=True``: every
submission is an answer, so running out of them ends the task rather than truncating it).

Rewards: 0.0 on intermediate turns; on the last step the verdict's value (1.0 pass / 0.0 fail, or partial
credit when configured). ``info["reward_details"]`` and ``info["success"]`` on the last step;
``info["attempt"]`` (the verdict of this submission: value, reason, components) on every step;
``info["admissible_actions"]`` on reset and on every step that leaves submissions: near misses of the reference
(:func:`rlvr_gym_rtl.problem.near_miss_designs`, for warm starts that inject mistakes; the policy never sees
``info``). ``info["failure"]``: ``parse_error`` (no design in the action), ``invalid_action`` (forbidden construct or
wrong interface), ``timeout``, ``sandbox_error``, ``verifier_error`` (the problem's reference itself fails).

Tasks: ``task.data`` embeds a problem (``name``, ``prompt``, ``reference``, ``testbench``), names one in a
VerilogEval-layout directory (``problem_dir``, absolute or relative to ``tasks/``, and ``name``), or names a
generated one (``generator_seed`` and ``kind``, see :func:`rlvr_gym_rtl.generated.generate_problem`).
Without a task, ``reset`` draws a problem with the env's random generator: from ``problems_dir`` (VerilogEval
envs) or from the generator (Generated envs, ``options["kind"]`` picks a kind).

Known iverilog 11 failures (excluded from the shipped suites): see
:data:`rlvr_gym_rtl.verilog_eval.IVERILOG11_LIMITS` (bundled: ``Prob151_review2015_fsm``).

Version History:
    v0: first version (VerilogEval-v0, VerilogEval-Refine-v0, Generated-v0, Generated-Refine-v0,
    GeneratedEasy-Refine-v0).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlvr_gym.core import Env, StepResult
from rlvr_gym.failures import FailureKind
from rlvr_gym.tasks import Task
from rlvr_gym_rtl.generated import KINDS, generate_problem
from rlvr_gym_rtl.judge import RtlJudge
from rlvr_gym_rtl.problem import ProblemError, RtlProblem, design_slips, gold_action, near_miss_designs
from rlvr_gym_rtl.verdict import RewardConfig
from rlvr_gym_rtl.verilog_eval import BUNDLED_DIR, IVERILOG11_LIMITS, load_problem, problem_names, resolve_problem_dir

TASKLESS_MIN_SEED = 10_000_000
"""Task-less generated problems use seeds from here up, disjoint from the shipped suites' (< 5,000,000)."""
ANSWER_FORMAT = ("Answer with the complete design (module TopModule with exactly these ports, plus any helper "
                 "modules it needs) in one ```verilog code block. Do not print ($display) or stop the "
                 "simulation; no testbench is needed.")


class VerilogEnv(Env):
    """Write a Verilog module from a spec; scored by Icarus Verilog against a reference in a sandbox.

    Args:
        max_turns: submissions allowed per episode (1 = single-turn).
        source: where task-less resets draw problems: ``"verilog-eval"`` or ``"generated"``.
        problems_dir: a VerilogEval-layout directory for task-less resets (default: the bundled 104).
        kinds: generated problem kinds task-less resets draw from (default: all of
            :data:`rlvr_gym_rtl.generated.KINDS`).
        partial_credit: reward a failing but simulated design with a scaled fraction of matching samples.
        require_synthesis: a pass also needs yosys to synthesise the design.
        timeout_s: wall-clock limit of one compile+simulate run, in seconds.
        sandbox: sandbox back-end name (see :func:`rlvr_gym.sandbox.get_sandbox`).
        equivalence: ``"off"`` (default), ``"refute"`` or ``"strict"``: a design that passes simulation is
            also checked formally against the reference (see :mod:`rlvr_gym_rtl.equivalence`).

    Version History:
        v0: first version.
    """

    max_turns = 1
    concurrent_steps = True  # a step waits on its sandbox (compile, simulate); the judge is thread-safe

    def __init__(
        self,
        max_turns: int | None = None,
        render_mode: str | None = None,
        source: str = "verilog-eval",
        problems_dir: str | None = None,
        kinds: Sequence[str] | None = None,
        partial_credit: bool = False,
        require_synthesis: bool = False,
        timeout_s: float = 30.0,
        sandbox: str = "auto",
        equivalence: str = "off",
    ) -> None:
        super().__init__(max_turns=max_turns, render_mode=render_mode)
        if source not in ("verilog-eval", "generated"):
            raise ValueError(f"source must be 'verilog-eval' or 'generated', got {source!r}")
        self.source = source
        unknown = sorted(set(kinds or ()) - set(KINDS))
        if unknown or (kinds is not None and not kinds):
            raise ValueError(f"kinds must be a non-empty subset of {sorted(KINDS)}, got {kinds!r}")
        self.kinds = sorted(kinds) if kinds is not None else None
        self.problems_dir = problems_dir
        config = RewardConfig(partial_credit=partial_credit, require_synthesis=require_synthesis)
        self.judge = RtlJudge(config, timeout_s=timeout_s, sandbox=sandbox, equivalence=equivalence)
        self.problem: RtlProblem | None = None
        self._near_misses: list[str] | None = None

    def _reset(self, task: Task | None) -> tuple[str, dict[str, Any]]:
        self.problem = self._problem_for(task)
        attempts = "" if self.max_turns == 1 else (
            f"\n\nYou have {self.max_turns} submissions; after a failing one you will see the simulator's feedback.")
        obs = f"{self.problem.prompt.strip()}\n\n{ANSWER_FORMAT}{attempts}"
        self._near_misses = None
        return obs, {"problem": self.problem.name, "attempts_left": self.max_turns,
                     "admissible_actions": self.near_misses()}

    def _step(self, action: str) -> StepResult:
        assert self.problem is not None, "reset() sets the problem"
        judgement = self.judge.judge(self.problem, action)
        result = judgement.result
        verifier_broken = judgement.failure is not None and judgement.failure.kind == FailureKind.VERIFIER_ERROR
        last = self.turn >= self.max_turns
        terminated = result.success or last or verifier_broken
        info: dict[str, Any] = {"attempt": result.to_dict(), "attempts_left": self.max_turns - self.turn,
                                "problem": self.problem.name}
        if judgement.failure is not None:
            info["failure"] = judgement.failure
        if terminated:
            info["reward_details"] = result.to_dict()
            info["success"] = result.success
            return StepResult(judgement.feedback, result.value, True, False, info)
        left = self.max_turns - self.turn
        info["admissible_actions"] = self.near_misses()
        obs = f"{judgement.feedback}\n\nSubmit a corrected design ({left} submission{'s' if left > 1 else ''} left)."
        return StepResult(obs, 0.0, False, False, info)

    def close(self) -> None:
        """Stops the judge's warm sandbox (forks share the judge; the next judgement starts another)."""
        self.judge.close()

    def oracle_action(self) -> str:
        """The reference design renamed to ``TopModule``, as an answer: a pass in one submission (for
        demonstrations and warm starts; see ``rlvr_gym_agents.warmstart.sft``).

        Raises:
            RuntimeError: before :meth:`reset`.
        """
        if self.problem is None:
            raise RuntimeError("oracle_action() needs a problem; call reset() first")
        return gold_action(self.problem.reference_solution())

    def near_misses(self) -> list[str]:
        """Wrong answers one edit from the reference (:func:`rlvr_gym_rtl.problem.near_miss_designs`), computed
        once per problem.

        Raises:
            RuntimeError: before :meth:`reset`.
        """
        if self.problem is None:
            raise RuntimeError("near_misses() needs a problem; call reset() first")
        if self._near_misses is None:
            self._near_misses = near_miss_designs(self.problem.reference_solution())
        return list(self._near_misses)

    def _problem_for(self, task: Task | None) -> RtlProblem:
        if task is not None and task.data:
            data = task.data
            if "problem_dir" in data:
                return load_problem(resolve_problem_dir(str(data["problem_dir"])), str(data["name"]))
            if "generator_seed" in data:
                return generate_problem(int(data["generator_seed"]), data.get("kind"))
            return RtlProblem.from_data(data)
        options = task.options if task is not None else {}
        if self.source == "generated":
            kind = options.get("kind")
            if kind is not None and kind not in KINDS:
                raise ProblemError(f"unknown generated problem kind {kind!r}; choose one of {', '.join(KINDS)}")
            if kind is None and self.kinds is not None:
                kind = self.kinds[int(self.np_random.integers(len(self.kinds)))]
            return generate_problem(int(self.np_random.integers(TASKLESS_MIN_SEED, 2**31 - 1)), kind)
        directory = resolve_problem_dir(self.problems_dir or BUNDLED_DIR)
        names = [n for n in problem_names(directory) if n not in IVERILOG11_LIMITS]
        if not names:
            raise ProblemError(f"no VerilogEval problems in {directory}")
        return load_problem(directory, names[int(self.np_random.integers(len(names)))])


def malformed_designs(env: Env) -> list[str]:
    """Slips of the reference that the judge rejects before simulating (:func:`rlvr_gym_rtl.problem.design_slips`),
    for SFT demonstrations with invalid actions (``sft.invalid_actions=rlvr_gym_rtl:malformed_designs``): the
    judge's feedback to them and the expert's recovery enter the demonstration; the slips are never imitated.

    Raises:
        TypeError: when ``env`` is not a :class:`VerilogEnv`.
        RuntimeError: before ``reset``.
    """
    if not isinstance(env, VerilogEnv):
        raise TypeError(f"malformed_designs needs a VerilogEnv, got {type(env).__name__}")
    if env.problem is None:
        raise RuntimeError("malformed_designs() needs a problem; call reset() first")
    return design_slips(env.problem.reference_solution())
