"""rlvr_gym environment family: code execution with verified rewards (registers its ids when imported).

Ids:

* ``code/HumanEval-v0``: write a function from its docstring; hidden HumanEval tests (single turn).
* ``code/HumanEval-Refine-v0``: the same with retries; the failing test is the next observation.
* ``code/CodeIO-v0``: implement ``main_solution`` from a natural-language spec (reasoning-gym's CodeIO data);
  verified by differential tests against the reference on generated inputs.
* ``code/Shell-v0``: multi-turn shell jobs in a sandboxed work dir, verified on the final file system.
* ``code/Synth-v0``: small generated functions (one to four lines, from a seeded grammar) with the failing
  test as feedback between turns; held-out frame-and-primitive combinations in ``code/synth-test``. The code
  task family a ~1M-parameter model can learn (:mod:`rlvr_gym_code.synth`, :mod:`rlvr_gym_code.synth_env`).

SFT hooks of ``code/Synth-v0``: :func:`malformed_programs` (``sft.invalid_actions``) and
``rlvr_gym_code.synth:generate_tasks`` (``sft.demo_tasks``).

Candidate code only ever runs in :mod:`rlvr_gym.sandbox`; hidden tests stay outside it
(:mod:`rlvr_gym_code.judge`).
"""

from rlvr_gym import register
from rlvr_gym_code.synth_env import malformed_programs

__all__ = ["malformed_programs"]

register(
    "code/HumanEval-v0", "rlvr_gym_code.humaneval:HumanEvalEnv", max_turns=1, default_suite="code/humaneval",
    description="HumanEval: write the function; reward 1 iff all hidden tests pass (sandboxed)",
)
register(
    "code/HumanEval-Refine-v0", "rlvr_gym_code.humaneval:HumanEvalRefineEnv", max_turns=4,
    default_suite="code/humaneval_refine",
    description="HumanEval with retries: the failing test is the next observation (MURPHY-style)",
)
register(
    "code/CodeIO-v0", "rlvr_gym_code.codeio:CodeIOEnv", max_turns=1, default_suite="code/codeio",
    description="CodeIO: implement main_solution from its spec; differential tests vs the reference",
)
register(
    "code/Shell-v0", "rlvr_gym_code.shell:ShellEnv", max_turns=12, default_suite="code/shell",
    description="Shell jobs in a sandboxed work dir; verified on the final file-system state",
)
register(
    "code/Synth-v0", "rlvr_gym_code.synth_env:SynthEnv", max_turns=3, default_suite="code/synth-test",
    description="Generated 1-4 line Python functions; the failing test is the next observation (3 turns)",
)
