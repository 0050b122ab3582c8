"""Typed failures: what went wrong during an episode, recorded instead of raised.

An environment never lets a bad action, a crashed sandbox or a dead browser kill a training run. It puts a
:class:`Failure` in ``info["failure"]`` of the step (or reset) where it happened, and the rollout code
copies it into the trajectory. Evaluation reports count failures by :class:`FailureKind`.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any


class FailureKind(str, enum.Enum):
    """The kind of a failure. Values are stable strings used in reports and JSON logs."""

    PARSE_ERROR = "parse_error"
    """The action could not be parsed (malformed tool call, missing code block, ...)."""
    INVALID_ACTION = "invalid_action"
    """The action parsed but is not allowed in this state (unknown object, bad element id, ...)."""
    TIMEOUT = "timeout"
    """A wall-clock or CPU-time limit ran out (sandbox run, simulator, browser page)."""
    SANDBOX_ERROR = "sandbox_error"
    """The sandbox itself failed (could not start, lost its process, an unexpected signal)."""
    MEMORY_LIMIT = "memory_limit"
    """The sandboxed program ran out of its memory limit (``MemoryError``, allocation failures)."""
    DISK_LIMIT = "disk_limit"
    """The sandboxed program hit a disk limit: the file-size limit, a full ``/tmp``, the work dir's disk
    limit, or a write to the read-only sandbox root."""
    OUTPUT_LIMIT = "output_limit"
    """The sandboxed program printed more than its output limit."""
    PROCESS_LIMIT = "process_limit"
    """The sandboxed program could not start more processes or threads (the process-count limit)."""
    CONTEXT_OVERFLOW = "context_overflow"
    """The policy's context window is full; the episode is truncated."""
    TURN_LIMIT = "turn_limit"
    """The episode reached its turn limit; the episode is truncated."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """A per-episode budget other than turns ran out (tool calls, wall clock)."""
    ENV_CRASH = "env_crash"
    """The environment raised or its back-end process died; the episode ends."""
    TOOL_ERROR = "tool_error"
    """A tool ran but reported an error (bad arguments for its semantics, runtime error)."""
    VERIFIER_ERROR = "verifier_error"
    """The verifier could not score the episode (reward is 0)."""


@dataclasses.dataclass(frozen=True)
class Failure:
    """One typed failure.

    Attributes:
        kind: what kind of failure it is.
        message: a human-readable explanation, written so that an agent (or a person) can act on it.
        details: JSON-serialisable extra data (exit codes, stderr tail, limits that were hit, ...).
    """

    kind: FailureKind
    message: str
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Returns a JSON-serialisable dict: ``{"kind": str, "message": str, "details": dict}``."""
        return {"kind": self.kind.value, "message": self.message, "details": dict(self.details)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Failure:
        """Inverse of :meth:`to_dict`. Raises ``ValueError`` on an unknown kind."""
        return cls(FailureKind(data["kind"]), str(data["message"]), dict(data.get("details", {})))
