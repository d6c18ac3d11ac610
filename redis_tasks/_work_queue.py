"""``WorkQueue``: the one thing a :class:`Worker` talks to, besides the contract.

A worker needs more than the task manager's contract: it reads work entries
under a consumer name, claims them (fence, attempt, lease deadline), renews
leases, hands tasks back, and cleans up after crashed peers. Before this
boundary the worker did those with Redis stream commands of its own, reaching
into the manager's client and key naming; now each backend implements this
protocol (the Redis one with its scripts and stream commands, the in-memory one
with the same semantics in a dict), the worker imports nothing from ``redis``,
and the worker suite runs on both.

Every method raises only this library's errors: :class:`BackendError` for a
backend that could not be reached in time, and the contract's errors
(:class:`LeaseLostError`, :class:`TaskNotFoundError`, :class:`TaskTerminalError`)
where a lease operation is refused. A work group that went missing (a flushed
server) is recreated by the queue itself.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Protocol, runtime_checkable

from ._events import TaskEventPublisher
from ._ids import task_ref
from ._lease import Claim
from ._manager import TaskManager

__all__ = ["QueueDepth", "WorkEntry", "WorkQueue", "WorkReader", "WorkerBackend"]


@dataclass(frozen=True, slots=True)
class WorkEntry:
    """One entry of a partition's work queue, delivered to a consumer.

    ``task_id`` is ``None`` when the entry names no valid task ID: a *doorbell*
    (``doorbell``: rung by a busy worker's batch claim so that a blocked worker
    wakes and claims the tasks waiting in the tenant queues itself), or nothing
    this library wrote. Either is dropped, or it would be delivered forever.
    """

    partition: int
    entry_id: str
    task_id: str | None
    doorbell: bool = False

    def __repr__(self) -> str:
        # The task by its reference: the ID is a capability.
        task = None if self.task_id is None else task_ref(self.task_id)
        return (
            f"WorkEntry(partition={self.partition}, entry_id={self.entry_id!r}, task={task!r},"
            f" doorbell={self.doorbell})"
        )


@dataclass(frozen=True, slots=True)
class QueueDepth:
    """How much work one partition holds: its entries, those delivered to a consumer,
    and the tasks waiting in its tenant queues.

    ``entries`` counts every entry in the partition's queue (``XLEN``): waiting
    for a worker, or delivered and not yet finished; a task a batch claim took
    with no entry (its lease in the partition's lease set) counts as one
    delivered, in both. ``pending`` counts the delivered ones (the group's pending
    list, which may still name an entry deleted since). ``queued`` counts the
    tasks waiting in the tenant queues (not yet dispatched), and ``tenants`` the
    tenants they belong to (ring and parked), so ``backlog`` is what no worker has
    read yet.
    ``waiting_for_input`` counts the partition's parked tasks: waiting for their
    client's input, held by no worker (in no count above).
    """

    entries: int
    pending: int
    queued: int = 0
    tenants: int = 0
    waiting_for_input: int = 0

    @property
    def backlog(self) -> int:
        """Tasks no worker has read yet (never below zero)."""
        return max(self.entries - self.pending, 0) + self.queued


class WorkReader(Protocol):
    """A consumer's blocking reader of one partition's new entries."""

    async def read(self, count: int) -> list[WorkEntry]:
        """Up to ``count`` new entries, delivered to this consumer (pending with it
        until claimed, requeued or dropped); waits up to the reader's block time for
        the first and returns ``[]`` when none came."""
        ...

    async def close(self) -> None:
        """Release what the reader holds (its connection)."""
        ...


@runtime_checkable
class WorkQueue(Protocol):
    """The work entries of every partition, their consumers and the leases on tasks."""

    @property
    def timeout(self) -> float:
        """Seconds one call may take; a worker bounds its own waits by it."""
        ...

    @property
    def signals(self) -> TaskEventPublisher:
        """Signals (:mod:`redis_tasks._signals`): task IDs of the changes a running
        task's worker must see (a cancellation asked, answers accepted, an outcome
        written by another caller), and newcomers' tasks, marked. Workers subscribe
        here instead of to every change (:attr:`TaskManager.event_publisher`), so a
        worker reads nothing of the creates and outcomes that make up a drain."""
        ...

    def reader(self, partition: int, consumer: str, block: timedelta) -> WorkReader:
        """A reader of ``partition``'s new entries for ``consumer``, blocking up to ``block``."""
        ...

    async def ensure_groups(self, partitions: Iterable[int]) -> None:
        """Make sure each partition's queue exists and can be read by consumers."""
        ...

    async def claim(
        self, entry: WorkEntry, *, consumer: str, lease: timedelta, max_attempts: int
    ) -> Claim:
        """Claim the task of a delivered ``entry``: on :attr:`ClaimOutcome.RUN` the
        caller holds a lease of ``lease`` and the returned fence; every other outcome
        settled the task (and dropped the entry) or left it alone."""
        ...

    async def claim_next(
        self,
        partition: int,
        *,
        consumer: str,
        count: int,
        lease: timedelta,
        max_attempts: int,
        wake: bool = False,
        first: str | None = None,
    ) -> list[tuple[WorkEntry, Claim]]:
        """Read up to ``count`` new entries of ``partition`` for ``consumer`` and claim
        each, in one step; when the queue runs out of entries, the rest of the batch
        comes from the tenant queues in weighted round-robin. An entry that names no
        task was dropped (its claim EXPIRED). ``wake`` (the caller has no free slot
        left) rings the doorbell if tasks still wait: a blocked worker wakes.
        ``first``: a newcomer's queued task (a signal named it), started ahead of the
        round-robin when it is still first in its tenant's queue and that tenant
        near the head of the order; otherwise it waits its turn."""
        ...

    async def reclaim(
        self, partition: int, *, consumer: str, idle: timedelta, cursor: str, count: int
    ) -> tuple[str, list[WorkEntry]]:
        """Take over up to ``count`` entries pending with any consumer for at least
        ``idle``, scanning from ``cursor``; the cursor to continue from and the entries
        (whose tasks are then claimed like new ones)."""
        ...

    async def renew(self, task_id: str, *, fence: int, consumer: str, lease: timedelta) -> bool:
        """Extend the lease ``fence`` holds by ``lease``; whether cancellation was requested."""
        ...

    async def release(self, task_id: str, *, fence: int) -> None:
        """Hand the task back (lease ended, entry pending for anyone at once)."""
        ...

    async def park(self, task_id: str, *, fence: int) -> bool:
        """Give back a task whose handler waits for its client's input: its lease
        ends (the fence moves on), it holds no slot of its tenant's cap, and the
        answer that completes its round queues it again. ``False`` (nothing changed)
        when no request is outstanding (answered meanwhile) or cancellation was asked."""
        ...

    async def requeue(self, entry: WorkEntry) -> None:
        """Put a delivered, unclaimed entry back at the tail for other consumers."""
        ...

    async def drop(self, entry: WorkEntry) -> None:
        """Acknowledge and delete an entry that will never run."""
        ...

    async def hand_back_unclaimed(self, partition: int, consumer: str) -> int:
        """Requeue every entry pending with ``consumer`` in ``partition`` (delivered to a
        read a stopping worker cancelled, never claimed): how many. Called by a worker
        whose runs are over."""
        ...

    async def forget_consumer(self, partition: int, consumer: str) -> None:
        """Remove ``consumer`` from ``partition``'s group if nothing is pending with it,
        with anything kept to answer a retry of its claims (it claims no more)."""
        ...

    async def remove_stale_consumers(self, partition: int, *, keep: str, idle: timedelta) -> None:
        """Remove consumers (other than ``keep``) with nothing pending, idle for ``idle``."""
        ...

    async def depth(self, partition: int) -> QueueDepth:
        """How many entries ``partition`` holds, how many of them are delivered, how
        many tasks wait in its tenant queues and for how many tenants: counters the
        backend keeps anyway (no scan), for the backlog gauges."""
        ...

    async def mark_busy(self, partitions: Iterable[int], ttl: timedelta) -> None:
        """Say, for ``ttl``, that a worker serving ``partitions`` has every handler slot
        taken: a task created straight into one of their streams meanwhile is signalled
        as a newcomer's (see :mod:`redis_tasks._worker.busy`)."""
        ...


@runtime_checkable
class WorkerBackend(TaskManager, Protocol):
    """A task manager that can run workers: the contract plus its work queue."""

    @property
    def partitions(self) -> int:
        """How many partitions tasks are spread over."""
        ...

    @property
    def work_queue(self) -> WorkQueue:
        """The manager's work queue (same instance for its lifetime)."""
        ...

    @property
    def whole_task_ids(self) -> bool:
        """Whether logs and spans name tasks by their whole ID rather than their
        reference (:func:`redis_tasks._ids.task_ref`)."""
        ...
