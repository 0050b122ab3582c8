"""The warm-start stage: demonstrations (:mod:`.demonstrations`), behaviour cloning (:mod:`.sft`) and the tiny model
and tokenizer builder (:mod:`.tiny`)."""

from rlvr_gym_agents.warmstart.sft import sft_demonstrations, warm_start
from rlvr_gym_agents.warmstart.tiny import build_tiny_policy

__all__ = ["build_tiny_policy", "sft_demonstrations", "warm_start"]
