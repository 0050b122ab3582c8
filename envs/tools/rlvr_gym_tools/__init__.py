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
register(
    "tools/BFCL-v0",
    "rlvr_gym_tools.bfcl.single_turn:BFCLEnv",
    description="Berkeley Function Calling Leaderboard single-turn tasks (bfcl-eval wheel), scored by AST match.",
    max_turns=2,
    default_suite="tools/bfcl_simple_python",
)
register(
    "tools/BFCLMultiTurn-v0",
    "rlvr_gym_tools.bfcl.multi_turn:BFCLMultiTurnEnv",
    description="BFCL multi-turn conversations on the wheel's stateful back-ends, checked on state and results.",
    max_turns=60,
    default_suite="tools/bfcl_multi_turn_base",
)
