"""One claimed task this worker runs: its settings, state and how it ended."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum
from typing import Any

from redis_tasks._execution import TaskExecution

__all__ = ["Phase", "Run", "RunOutcome", "Settings"]


@dataclass(frozen=True, slots=True)
class Settings:
    """A worker's settings, checked once."""

    name: str
    concurrency: int
    lease: timedelta
    max_attempts: int
    read_batch: int
    input_poll: float
    timeout: float  # seconds one backend call may take

    @staticmethod
    def default_name() -> str:
        """``host-pid-random``: unique per process, readable in the consumer list."""
        return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"

    @property
    def lease_s(self) -> float:
        """The lease in seconds."""
        return self.lease.total_seconds()


class RunOutcome(Enum):
    """How a handler ended, i.e. which terminal transition the worker writes."""

    COMPLETED = "complete"  #: it returned a result
    FAILED = "fail"  #: it raised (TaskFailed, or anything: a generic internal error)
    CANCELLED = "cancel"  #: it raised CancelledError after cancellation was requested


class Phase(Enum):
    """Where a run is: running its handler, writing its outcome, or abandoned."""

    RUNNING = "running"
    FINISHING = "finishing"  #: the outcome is being written: no more renewals
    ABANDONED = "abandoned"  #: the worker stopped the handler (see Run.abandoned)


@dataclass(eq=False)
class Run:
    """A claimed task this worker is running."""

    execution: TaskExecution
    partition: int
    lease_until: float  # monotonic time the lease is known to last until
    handler: asyncio.Future[dict[str, Any]] | None = None
    supervisor: asyncio.Future[Any] | None = None
    phase: Phase = Phase.RUNNING
    abandoned: str | None = None  # why the worker stopped the handler: "shutdown", "lease"
    # Resolved when the handler ends or the worker abandons it, whichever is first.
    wake: asyncio.Future[None] | None = None
    renewing: bool = False  # a renewal is in flight (hints must not stack more)
    holds_slot: bool = True  # until the handler is done (see Runs.release_slot)

    @property
    def renewable(self) -> bool:
        """Whether the lease still needs renewing."""
        return self.phase is Phase.RUNNING

    def abandon(self, reason: str) -> None:
        """Stop the handler: its outcome will not be written."""
        if self.phase is Phase.RUNNING:
            self.phase, self.abandoned = Phase.ABANDONED, reason
            if self.wake is not None and not self.wake.done():
                self.wake.set_result(None)
