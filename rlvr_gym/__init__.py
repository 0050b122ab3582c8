"""rlvr_gym: multi-turn text environments with verifiable rewards.

The contract both sides share: the :class:`Env` base, the text space, the registry, tasks and suites,
verifiers and typed failures. This package never imports torch.
"""

from rlvr_gym.core import Env, ForkNotSupportedError, StepResult, TextSpace
from rlvr_gym.failures import Failure, FailureKind
from rlvr_gym.registry import EnvSpec, UnknownEnvError, list_envs, make, register, spec
from rlvr_gym.tasks import (
    SuiteNotFoundError,
    Task,
    TaskFileError,
    TaskSuite,
    find_task_path,
    list_suites,
    load_suite,
    task_dirs,
    tasks_dir,
)
from rlvr_gym.verifier import RewardResult, Verifier

__all__ = [
    "Env",
    "EnvSpec",
    "Failure",
    "FailureKind",
    "ForkNotSupportedError",
    "RewardResult",
    "StepResult",
    "SuiteNotFoundError",
    "Task",
    "TaskFileError",
    "TaskSuite",
    "TextSpace",
    "UnknownEnvError",
    "Verifier",
    "find_task_path",
    "list_envs",
    "list_suites",
    "load_suite",
    "make",
    "register",
    "spec",
    "task_dirs",
    "tasks_dir",
]

__version__ = "0.1.0"
