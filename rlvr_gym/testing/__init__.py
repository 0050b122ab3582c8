"""Test doubles and the conformance checker, for rlvr_gym and for environment authors."""

from rlvr_gym.registry import register
from rlvr_gym.testing.toy import EchoEnv, echo_tasks, verify_echo

register(
    "testing/Echo-v0",
    "rlvr_gym.testing.toy:EchoEnv",
    description="Toy env with a known optimum: say the word you are shown.",
    max_turns=3,
)

__all__ = ["EchoEnv", "echo_tasks", "verify_echo"]
