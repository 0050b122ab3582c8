"""rlvr_gym environment family: code execution with verified rewards (registers its ids when imported).

Ids:

* ``code/HumanEval-v0``: write a function from its docstring; hidden HumanEval tests (single turn).
* ``code/HumanEval-Refine-v0``: the same with retries; the failing test is the next observation.
* ``code/CodeIO-v0``: implement ``main_solution`` from a natural-language spec (reasoning-gym's CodeIO data);
  verified by differential tests against the reference on generated inputs.
* ``code/Shell-v0``: multi-turn shell jobs in a sandboxed work dir, verified on the final file system.

Candidate code only ever runs in :mod:`rlvr_gym.sandbox`; hidden tests stay outside it
(:mod:`rlvr_gym_code.judge`).
"""

from rlvr_gym import register

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
