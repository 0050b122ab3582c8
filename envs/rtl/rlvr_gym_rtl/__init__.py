"""rlvr_gym environment family ``rtl``: spec-to-RTL Verilog tasks judged by a sandboxed simulator.

Ids (registered on import):

* ``rtl/VerilogEval-v0``: VerilogEval v2 spec-to-RTL problems (104 bundled, MIT), one submission.
* ``rtl/VerilogEval-Refine-v0``: the same, up to 3 submissions with compiler/simulator feedback.
* ``rtl/Generated-v0``: seeded parametric problems (muxes, adders, comparators, encoders, counters, shift
  registers, edge detectors, sequence-detector FSMs), one submission.
* ``rtl/Generated-Refine-v0``: the same, up to 3 submissions with feedback.
* ``rtl/GeneratedEasy-Refine-v0``: combinational kinds only (adders, comparators, decoders, muxes,
  reductions), up to 3 submissions, partial credit (0.5 x fraction of matching samples below a pass): a
  denser reward for small policies.

Needs ``iverilog`` (Icarus Verilog 11+) and a sandbox (bubblewrap or Docker); see :mod:`rlvr_gym_rtl.judge`.
"""

from rlvr_gym.registry import register
from rlvr_gym_rtl.env import VerilogEnv, malformed_designs
from rlvr_gym_rtl.generated import EASY_KINDS
from rlvr_gym_rtl.judge import Judgement, RtlJudge
from rlvr_gym_rtl.problem import RtlProblem
from rlvr_gym_rtl.verdict import RewardConfig, verdict

_ENTRY = "rlvr_gym_rtl.env:VerilogEnv"
register("rtl/VerilogEval-v0", _ENTRY, max_turns=1, default_suite="rtl/verilogeval",
         description="VerilogEval spec-to-RTL (104 problems): write TopModule, judged by iverilog, one shot")
register("rtl/VerilogEval-Refine-v0", _ENTRY, max_turns=3, default_suite="rtl/verilogeval-refine",
         description="VerilogEval spec-to-RTL with up to 3 submissions and simulator feedback")
register("rtl/Generated-v0", _ENTRY, max_turns=1, kwargs={"source": "generated"},
         default_suite="rtl/generated-dev",
         description="Generated spec-to-RTL problems from seeds (combinational and sequential), one shot")
register("rtl/Generated-Refine-v0", _ENTRY, max_turns=3, kwargs={"source": "generated"},
         default_suite="rtl/generated-refine-dev",
         description="Generated spec-to-RTL problems with up to 3 submissions and simulator feedback")

register("rtl/GeneratedEasy-Refine-v0", _ENTRY, max_turns=3,
         kwargs={"source": "generated", "kinds": list(EASY_KINDS), "partial_credit": True},
         default_suite="rtl/generated-easy-dev",
         description="Generated combinational RTL problems, 3 submissions with feedback, partial credit")

__all__ = ["Judgement", "RewardConfig", "RtlJudge", "RtlProblem", "VerilogEnv", "malformed_designs", "verdict"]
