"""Task statuses and the terminal set, shared by Python and the Lua scripts."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["TERMINAL_STATUSES", "TaskStatus"]


class TaskStatus(StrEnum):
    """The five statuses of SEP-2663.

    Legal moves: ``working <-> input_required``, and either of those to one of
    the terminal statuses, which are final.
    """

    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        """Whether no further transition is possible from this status."""
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES: frozenset[TaskStatus] = frozenset(
    {TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
)
