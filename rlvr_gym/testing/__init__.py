"""Test doubles and the conformance checker, for rlvr_gym and for environment authors.

- :func:`check_env`: the conformance checker (:mod:`rlvr_gym.testing.checker`).
- :class:`GoldAgent`, :class:`RandomAgent` (a baseline in each env's grammar), :class:`ScriptedAgent`: test agents.
- :mod:`rlvr_gym.testing.fuzz`: plausible-but-wrong actions (mutated admissible actions, gold actions and tool
  calls; lone surrogates) and schema-typed random tool calls.
- ``testing/Echo-v0`` (:class:`EchoEnv`): a toy env with a known optimum; :func:`echo_tasks` makes tasks;
  :class:`SlowEchoEnv` (not registered) the same with slow steps, for concurrency tests and benchmarks.
- :func:`temporary_env`: register an env for the duration of a test.
- :mod:`rlvr_gym.testing.fuzzer`: a fuzzer of ``step`` (malformed, huge and invalid-Unicode actions) for any
  registered env, with a ``hypothesis`` strategy; ``tests/test_fuzz_envs.py`` runs it over every env.
"""

from rlvr_gym.registry import register
from rlvr_gym.testing.agents import GoldAgent, RandomAgent, ScriptedAgent
from rlvr_gym.testing.checker import CheckError, CheckReport, CheckResult, check_env
from rlvr_gym.testing.registration import temporary_env
from rlvr_gym.testing.toy import EchoEnv, SlowEchoEnv, echo_tasks, verify_echo

register(
    "testing/Echo-v0",
    "rlvr_gym.testing.toy:EchoEnv",
    description="Toy env with a known optimum: say the word you are shown.",
    max_turns=3,
    default_suite="testing/echo",
)

__all__ = [
    "CheckError",
    "CheckReport",
    "CheckResult",
    "EchoEnv",
    "GoldAgent",
    "RandomAgent",
    "ScriptedAgent",
    "SlowEchoEnv",
    "check_env",
    "echo_tasks",
    "temporary_env",
    "verify_echo",
]
