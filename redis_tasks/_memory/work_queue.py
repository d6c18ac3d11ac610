"""``InMemoryWorkQueue``: the :class:`WorkQueue` of :class:`InMemoryTaskManager`.

It keeps, per partition, what the Redis backend keeps in the partition's work
stream and its ``workers`` consumer group (:mod:`.stream`), with the semantics the
worker relies on (as Redis 7.0 behaves, checked against a real server):

- an ordered entry log, IDs ``<ms>-<seq>`` generated like ``XADD *`` (above the
  last ID even when the clock steps back);
- the group's pending-entries list: entry -> consumer, delivery time, delivery
  count, in ID order (entries are delivered in ID order, so insertion order is);
- consumers with the time they last received or took over an entry (the
  ``idle`` of ``XINFO CONSUMERS``; a read that returns nothing leaves it alone,
  as Redis 7.0 does).

The task records are the manager's, reached through the
:class:`~.records.TaskRecords` it passes in: the claim (:mod:`.claim`), renewal
and hand-back methods follow ``lua/claim.lua``, ``renew.lua``, ``release.lua``
and ``requeue.lua`` step for step on those records, under their one lock and on
their clock, so the fence a claim writes is the one the contract's operations
check. Each partition's tenant queues (:class:`~.tenants.Tenants`) are filled by
the manager's create and dispatched by :meth:`InMemoryWorkQueue.claim_next`
(:mod:`.dispatch`), as ``enqueue`` and ``dispatch`` (``lua/includes/tenants.lua``)
do.

A reader waiting for new entries waits on an :class:`asyncio.Event` of its own
that an append sets: no polling. Like the manager, the queue is meant for one
event loop.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Final

from redis_tasks._errors import BackendError, TaskNotFoundError
from redis_tasks._events import TaskEventPublisher
from redis_tasks._ids import parse_task_id
from redis_tasks._lease import INTERNAL_ERROR, Claim
from redis_tasks._record import (
    FIELD_ATTEMPTS,
    FIELD_CANCEL_REQUESTED,
    FIELD_FENCE,
    FIELD_LEASE_DEADLINE,
    FIELD_LEASE_OWNER,
    FIELD_STATUS,
    FIELD_TENANT,
    FIELD_TENANT_CAP,
    FIELD_WORK_ENTRY,
    Encoder,
)
from redis_tasks._telemetry.metrics import METRICS
from redis_tasks._work_queue import QueueDepth, WorkEntry

from .claim import claim_entry
from .claim_next import ClaimBatch
from .dispatch import enqueue
from .records import TERMINAL, Record, TaskRecords
from .stream import Partition, Reader, id_text, parse_id, work_entry
from .tenants import Tenants
from .terminal import terminate
from .waiting import park
from .work import Doorbell, add_work

__all__ = ["InMemoryWorkQueue"]

#: Seconds one call may take: nothing here waits on I/O, so any bound would do.
_TIMEOUT: Final = 5.0
_MS: Final = timedelta(milliseconds=1)


def _lease_ms(lease: timedelta) -> int:
    ms = lease // _MS
    if ms < 1:
        raise ValueError("a lease must be at least one millisecond")
    return ms


class InMemoryWorkQueue:
    """The work queue of an :class:`InMemoryTaskManager` (see the module).

    ``records`` are the manager's task records (with their lock and clock);
    ``encoder`` is the manager's, which encodes fences and the poison error.
    """

    def __init__(self, records: TaskRecords, encoder: Encoder) -> None:
        self._records = records
        self._encoder = encoder
        self._partitions: dict[int, Partition] = {}
        self._poison_error = encoder.error(INTERNAL_ERROR)

    @property
    def signals(self) -> TaskEventPublisher:
        """See :attr:`~redis_tasks._work_queue.WorkQueue.signals`."""
        return self._records.signals

    @property
    def lock(self) -> threading.Lock:
        """The records' lock, which guards the records and the streams together."""
        return self._records.lock

    @property
    def timeout(self) -> float:
        """Seconds one call may take."""
        return _TIMEOUT

    # -- the streams (:class:`~.stream.Streams`; callers hold the lock) ----------------

    def partition(self, partition: int) -> Partition:
        """The partition's stream and group, created on first use (like ``MKSTREAM``)."""
        state = self._partitions.get(partition)
        if state is None:
            state = self._partitions[partition] = Partition(partition, Tenants(partition))
        return state

    def append(self, partition: int, task_id: str) -> str:
        """``XADD`` on the partition's stream (see :meth:`.stream.Partition.append`)."""
        state = self.partition(partition)
        return state.append(task_id, self._records.now())

    def drop_entry(self, partition: int, entry: str) -> None:
        """``XACK`` and ``XDEL``: the entry is neither pending nor in the stream."""
        entry_id = parse_id(entry)
        state = self._partitions.get(partition)
        if entry_id is None or state is None:
            return
        state.drop(entry_id)

    def deliver(self, partition: int, consumer: str, count: int) -> list[WorkEntry]:
        """``XREADGROUP GROUP workers <consumer> COUNT <count> ... >`` (not blocking)."""
        state = self.partition(partition)
        return state.deliver(consumer, count, self._records.now())

    # -- what the manager's operations do to the streams (callers hold the lock) --------

    def enqueue(
        self,
        partition: int,
        tenant: str,
        settings: str,
        task_id: str,
        expire_at: int | None,
        fields: dict[str, bytes],
        *,
        fair: bool,
    ) -> bool:
        """A new task's work: see :func:`.dispatch.enqueue` (``expire_at`` ``None``:
        never; ``fields``: the new record's)."""
        now = self._records.now()
        return enqueue(
            self, partition, tenant, settings, task_id, expire_at or 0, now, fields, fair=fair
        )

    def terminate(
        self,
        record: Record,
        task_id: str,
        entry: str | None,
        status: bytes,
        message: bytes | None,
        outcome_field: str,
        outcome: bytes,
    ) -> None:
        """The one terminal write of an operation that ends one task (a finish, a
        cancellation): see :func:`.terminal.terminate`; the doorbell it asks for rung."""
        doorbell = Doorbell()
        terminate(
            self._records,
            self,
            record,
            task_id,
            entry,
            status,
            message,
            outcome_field,
            outcome,
            doorbell,
        )
        partition = parse_task_id(task_id)
        assert partition is not None  # the record was found by this ID
        doorbell.ring(self, partition)

    def _claim(
        self,
        task_id: str,
        entry_id: str,
        consumer: str,
        lease_ms: int,
        max_attempts: int,
        doorbell: Doorbell,
    ) -> Claim:
        """See :func:`.claim.claim_entry` (callers hold the lock)."""
        return claim_entry(
            self._records,
            self,
            self._poison_error,
            task_id,
            entry_id,
            consumer,
            lease_ms,
            max_attempts,
            doorbell,
        )

    # -- the WorkQueue protocol ---------------------------------------------------------

    def reader(self, partition: int, consumer: str, block: timedelta) -> Reader:
        """A blocking reader of ``partition``'s new entries for ``consumer``."""
        return Reader(self, partition, consumer, block)

    async def ensure_groups(self, partitions: Iterable[int]) -> None:
        """Create each partition's stream and group if missing (they never go away)."""
        with self.lock:
            for partition in partitions:
                self.partition(partition)

    async def claim(
        self, entry: WorkEntry, *, consumer: str, lease: timedelta, max_attempts: int
    ) -> Claim:
        """Mirror of ``claim.lua`` for an entry a worker read or reclaimed."""
        lease_ms = _lease_ms(lease)
        # Like the Redis queue, which cannot name the task's keys without its ID.
        if entry.task_id is None or parse_task_id(entry.task_id) is None:
            raise TaskNotFoundError()
        with self.lock:
            doorbell = Doorbell()
            claim = self._claim(
                entry.task_id, entry.entry_id, consumer, lease_ms, max_attempts, doorbell
            )
            doorbell.ring(self, entry.partition)
            backlog = bool(self.partition(entry.partition).tenants.ring)
        return replace(claim, backlog=backlog)

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
        """Mirror of ``claim_next.lua``: start ``first`` first (a newcomer's queued
        task), read up to ``count`` new entries and claim each, then dispatch the
        rest of the batch from the tenant queues."""
        lease_ms = _lease_ms(lease)
        with self.lock:
            batch = ClaimBatch(self._records, self, self._poison_error, partition, consumer)
            return batch.run(count, lease_ms, max_attempts, wake=wake, first=first)

    async def reclaim(
        self, partition: int, *, consumer: str, idle: timedelta, cursor: str, count: int
    ) -> tuple[str, list[WorkEntry]]:
        """``XAUTOCLAIM <work> workers <consumer> <idle> <cursor> COUNT <count>``: the
        next cursor (``0-0`` once the scan reached the end) and the entries taken over."""
        start = parse_id(cursor)
        if start is None:
            # Counted as every BackendError is (the Redis backend's comes from the
            # server's own refusal, mapped at its error boundary).
            METRICS.redis_error()
            raise BackendError("invalid stream ID")
        with self.lock:
            next_cursor, taken = self.partition(partition).autoclaim(
                consumer, idle // _MS, start, count, self._records.now()
            )
        return id_text(next_cursor), taken

    async def renew(self, task_id: str, *, fence: int, consumer: str, lease: timedelta) -> bool:
        """Mirror of ``renew.lua``; whether cancellation was requested."""
        lease_ms = _lease_ms(lease)
        encoded = self._encoder.fence(fence)
        with self.lock:
            record = self._records.guarded(task_id, encoded)
            now = self._records.now()
            fields = record.fields
            fields[FIELD_LEASE_DEADLINE] = str(now + lease_ms).encode()
            fields[FIELD_LEASE_OWNER] = consumer.encode()
            entry = fields.get(FIELD_WORK_ENTRY)
            partition = parse_task_id(task_id)
            assert partition is not None  # guarded() found the record by this ID
            state = self.partition(partition)
            if entry is not None:
                state.take_over(entry.decode(), consumer, now)
            tenant = fields.get(FIELD_TENANT)
            if tenant is not None and FIELD_TENANT_CAP in fields:
                state.tenants.hold_slot(tenant.decode(), task_id, now + lease_ms, now)
            return fields.get(FIELD_CANCEL_REQUESTED) == b"1"

    async def release(self, task_id: str, *, fence: int) -> None:
        """Mirror of ``release.lua``: a fresh entry, the fence bumped, the attempt undone."""
        encoded = self._encoder.fence(fence)
        with self.lock:
            record = self._records.guarded(task_id, encoded)
            partition = parse_task_id(task_id)
            assert partition is not None  # guarded() found the record by this ID
            fields = record.fields
            entry = fields.get(FIELD_WORK_ENTRY)
            if entry is not None:
                self.drop_entry(partition, entry.decode())
            add_work(self, partition, task_id, fields)
            attempts = max(int(fields.get(FIELD_ATTEMPTS, b"1")) - 1, 0)
            fields[FIELD_FENCE] = str(int(fields[FIELD_FENCE]) + 1).encode()
            fields[FIELD_ATTEMPTS] = str(attempts).encode()
            fields[FIELD_LEASE_DEADLINE] = b"0"
            fields.pop(FIELD_LEASE_OWNER, None)
            tenant = fields.get(FIELD_TENANT)
            doorbell = Doorbell()
            if tenant is not None and FIELD_TENANT_CAP in fields:
                released = self.partition(partition).tenants.release_slot(tenant.decode(), task_id)
                doorbell.due = released
            doorbell.ring(self, partition)

    async def park(self, task_id: str, *, fence: int) -> bool:
        """Mirror of ``park.lua``: whether the task is parked now."""
        encoded = self._encoder.fence(fence)
        with self.lock:
            record = self._records.guarded(task_id, encoded)
            return park(self._records, self, record, task_id)

    async def requeue(self, entry: WorkEntry) -> None:
        """Mirror of ``requeue.lua``: a delivered, unclaimed entry goes to the tail."""
        if entry.task_id is None:
            await self.drop(entry)
            return
        task_id = entry.task_id
        partition = parse_task_id(task_id)
        if partition is None:
            raise TaskNotFoundError()
        with self.lock:
            record = self._records.live(task_id)
            self.drop_entry(partition, entry.entry_id)
            if (
                record is None
                or record.fields[FIELD_STATUS] in TERMINAL
                or record.fields.get(FIELD_WORK_ENTRY) != entry.entry_id.encode()
            ):
                return
            add_work(self, partition, task_id, record.fields)

    async def drop(self, entry: WorkEntry) -> None:
        """Acknowledge and delete an entry that will never run."""
        with self.lock:
            self.drop_entry(entry.partition, entry.entry_id)

    async def hand_back_unclaimed(self, partition: int, consumer: str) -> int:
        """Requeue each entry pending with ``consumer`` in ``partition`` (see the Redis
        queue's): how many."""
        with self.lock:
            stream = self.partition(partition)
            mine = [
                work_entry(partition, entry_id, stream.entries.get(entry_id, ""))
                for entry_id, pending in stream.pending.items()
                if pending.consumer == consumer
            ]
        for entry in mine:
            await self.requeue(entry)
        return len(mine)

    async def forget_consumer(self, partition: int, consumer: str) -> None:
        """``XGROUP DELCONSUMER`` of ``consumer`` if nothing is pending with it."""
        with self.lock:
            self.partition(partition).forget_idle(lambda name, _seen: name == consumer)

    async def remove_stale_consumers(self, partition: int, *, keep: str, idle: timedelta) -> None:
        """Remove consumers other than ``keep`` with nothing pending, idle for ``idle``."""
        idle_ms = idle // _MS
        with self.lock:
            now = self._records.now()
            self.partition(partition).forget_idle(
                lambda name, seen: name != keep and now - seen > idle_ms
            )

    async def mark_busy(self, partitions: Iterable[int], ttl: timedelta) -> None:
        """Mirror of the Redis queue's ``SET <busy> 1 PX <ttl>`` per partition."""
        with self.lock:
            until = self._records.now() + ttl // _MS
            for partition in partitions:
                self.partition(partition).busy_until = until

    async def depth(self, partition: int) -> QueueDepth:
        """``XLEN``, the ``XPENDING`` summary's count, ``queued``, the tenants waiting
        and the parked tasks."""
        with self.lock:
            state = self.partition(partition)
            tenants = state.tenants
            return QueueDepth(
                len(state.entries),
                len(state.pending),
                tenants.queued,
                len(tenants.ring) + len(tenants.parked),
                tenants.waiting_count(None, self._records.now()),
            )
