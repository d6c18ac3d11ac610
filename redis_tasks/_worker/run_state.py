"""The state of one claimed task this worker runs (its slot, state, lease), how it
ended, and the worker's settings."""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import time
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum

from redis_tasks._execution import TaskExecution
from redis_tasks._ids import task_ref
from redis_tasks._telemetry.traces import RunSpan

from .slots import SlotLease

__all__ = ["Run", "RunOutcome", "RunState", "Settings", "StopReason"]


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
    #: Logs and spans name tasks by their whole ID, not their reference.
    whole_task_ids: bool = False
    #: Slots beyond ``concurrency`` that only newcomers' tasks may take, when every
    #: other slot is busy (see :mod:`.intake`).
    newcomer_slots: int = 0
    #: Seconds a handler waits for its client's input before its task is parked
    #: (``None``: never; see :class:`~redis_tasks.TaskExecution`).
    park_after: float | None = 1.0

    @staticmethod
    def default_name() -> str:
        """``host-pid-random``: unique per process, readable in the consumer list."""
        return f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"

    def ref(self, task_id: str | None) -> str | None:
        """How this worker's logs and spans name ``task_id`` (:func:`task_ref`)."""
        return None if task_id is None else task_ref(task_id, whole=self.whole_task_ids)

    @property
    def lease_s(self) -> float:
        """The lease in seconds."""
        return self.lease.total_seconds()

    @property
    def block(self) -> timedelta:
        """How long an idle read blocks: half a call's deadline, 1 ms to 1 s."""
        return timedelta(milliseconds=max(1, min(1000, int(self.timeout * 500))))


class RunOutcome(Enum):
    """How a handler ended, i.e. which terminal transition the worker writes."""

    COMPLETED = "complete"  #: it returned a result
    FAILED = "fail"  #: it raised (TaskFailed, or anything: a generic internal error)
    CANCELLED = "cancel"  #: it raised CancelledError after cancellation was requested

    @property
    def ended(self) -> str:
        """The terminal status it writes: completed, failed or cancelled."""
        return _ENDED[self]


_ENDED = {
    RunOutcome.COMPLETED: "completed",
    RunOutcome.FAILED: "failed",
    RunOutcome.CANCELLED: "cancelled",
}


class StopReason(Enum):
    """Why the worker stopped a run (:meth:`Run.abandon`): what its stop then does."""

    #: The worker stops: the task is handed back for another worker to run at once.
    SHUTDOWN = "shutdown"
    #: Its lease was lost or ran out: another claim owns the task; nothing is written.
    LEASE = "lease"


class RunState(Enum):
    """Where a run is; the one fact every path of :class:`~.runs.Runs` reads.

    ::

        STARTING --> HANDLING --> FINISHING ----------> ENDED
            |            |                               ^
            +------------+--> STOPPING --> HANDING_BACK -+

    Each state carries what it means, so the paths that ask read one fact: whether
    the run holds its handler slot (given back on leaving those states, once),
    whether its lease still needs renewing, and whether it is in its handler (for
    the gauge of handlers running). ``ENDED`` is reached from any state through
    :meth:`~.runs.Runs.let_go` alone, which also forgets the run; every other move
    goes along the arrows (:meth:`Run.move` refuses the rest). (Plain attributes,
    not sets of members: an Enum member hashes in Python, and these are read twice
    a task.)
    """

    #: admitted, its handler not entered yet
    STARTING = "starting", True, True, False
    #: in its handler: a stop cancels it
    HANDLING = "handling", True, True, True
    #: the handler is done, its outcome is being written
    FINISHING = "finishing", False, False, False
    #: the worker stopped it (:meth:`Run.abandon`); no outcome is written
    STOPPING = "stopping", True, False, True
    #: stopped, its slot given back (and its task, at shutdown)
    HANDING_BACK = "handing_back", False, False, False
    #: let go: no longer one of the worker's runs
    ENDED = "ended", False, False, False

    def __init__(self, label: str, holds_slot: bool, renewable: bool, in_handler: bool) -> None:
        self.label = label
        #: The run still holds its handler slot.
        self.holds_slot = holds_slot
        #: The run's lease still needs renewing.
        self.renewable = renewable
        #: The run is (or may still be) inside its handler.
        self.in_handler = in_handler


#: Where each state may move (see the diagram); ENDED from anywhere, by let_go.
_MOVES: dict[RunState, frozenset[RunState]] = {
    RunState.STARTING: frozenset({RunState.HANDLING, RunState.STOPPING, RunState.ENDED}),
    RunState.HANDLING: frozenset({RunState.FINISHING, RunState.STOPPING, RunState.ENDED}),
    RunState.FINISHING: frozenset({RunState.ENDED}),
    RunState.STOPPING: frozenset({RunState.HANDING_BACK, RunState.ENDED}),
    RunState.HANDING_BACK: frozenset({RunState.ENDED}),
    RunState.ENDED: frozenset(),
}


@dataclass(eq=False)
class Run:
    """A claimed task this worker is running."""

    execution: TaskExecution
    #: How logs and spans name the task (:meth:`Settings.ref`), never its ID otherwise.
    task: str
    partition: int
    lease_until: float  # monotonic time the lease is known to last until
    # Its handler slot, held until the handler is done (see RunState).
    slot: SlotLease
    #: The run's one asyncio task: its handler, then its outcome or its hand-back.
    runner: asyncio.Future[None] | None = None
    state: RunState = RunState.STARTING
    #: Why the worker stopped it (set with the move to STOPPING).
    stop_reason: StopReason | None = None
    renewing: bool = False  # a renewal is in flight (hints must not stack more)
    entry_id: str = "0-0"  # the work entry claimed: its ms part is when it was enqueued
    reclaimed: bool = False  # the entry was taken over from another consumer
    started: float = 0.0  # monotonic time the handler started
    span: RunSpan | None = None  # the run's span, when a tracer is configured

    def enqueued_ago(self) -> float:
        """Seconds since the run's entry was enqueued: this worker's wall clock
        against the server's (the entry ID's ms part), so clock skew between the
        two hosts shifts the figure; never below zero."""
        ms = self.entry_id.partition("-")[0]
        # A direct claim (no entry: "0-1") was taken from its queue by the very call
        # that claimed it, as a dispatched entry was added by it: no wait to count.
        if not ms.isdigit() or ms == "0":
            return 0.0
        return max(time.time() - int(ms) / 1000, 0.0)

    @property
    def renewable(self) -> bool:
        """Whether the lease still needs renewing: until the outcome is being written
        or the worker stopped the run."""
        return self.state.renewable

    @property
    def handling(self) -> bool:
        """Whether the run is in its handler, and nothing stopped it."""
        return self.state is RunState.HANDLING

    @property
    def holds_slot(self) -> bool:
        """Whether the run still holds its handler slot."""
        return self.state.holds_slot

    def move(self, to: RunState) -> None:
        """Enter state ``to``, giving the slot back when it leaves the holding states
        (once: no state holds it again). A move off the arrows is a bug: refused."""
        if to not in _MOVES[self.state]:
            raise RuntimeError(f"a run cannot move from {self.state.label} to {to.label}")
        held = self.state.holds_slot
        self.state = to
        if held and not to.holds_slot:
            self.slot.give_back()

    def abandon(self, reason: StopReason) -> None:
        """Stop the run: its outcome will not be written. A run not yet in its
        handler never enters it; one in it is cancelled there; one writing its
        outcome already (or stopped already) is left alone."""
        if self.renewable:
            in_handler = self.state is RunState.HANDLING
            self.stop_reason = reason
            self.move(RunState.STOPPING)
            if in_handler and self.runner is not None:
                self.runner.cancel()
