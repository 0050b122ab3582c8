"""rlvr_gym environment family: tools — function calling with verifiable answers.

Ids (registered on import):
    ``tools/MultiHopQA-v0``: multi-hop questions over a seeded synthetic knowledge base (search, lookup,
    calculator, python).
    ``tools/Math-v0``: arithmetic word problems where the calculator or python tool is the reliable path.
    ``tools/BFCL-v0``: Berkeley Function Calling Leaderboard tasks from the ``bfcl-eval`` wheel, checked by
    our own AST matcher (single-turn) or on the back-ends' final state (multi-turn).
"""

from rlvr_gym.registry import register

register(
    "tools/MultiHopQA-v0",
    "rlvr_gym_tools.multihop:MultiHopQAEnv",
    description="Multi-hop questions over a seeded fictional knowledge base, answered with search/lookup tools.",
    max_turns=16,
    default_suite="tools/multihop_test",
)
register(
    "tools/Math-v0",
    "rlvr_gym_tools.math_env:MathEnv",
    description="Arithmetic word problems with large numbers; the calculator or python tool is the reliable path.",
    max_turns=6,
    default_suite="tools/math_test",
)
