"""``InMemoryWorkQueue``: the :class:`WorkQueue` of :class:`InMemoryTaskManager`.

It keeps, per partition, what the Redis backend keeps in the partition's work
stream and its ``workers`` consumer group, with the semantics the worker relies
on (as Redis 7.0 behaves, checked against a real server):

- an ordered entry log, IDs ``<ms>-<seq>`` generated like ``XADD *`` (above the
  last ID even when the clock steps back);
- the group's pending-entries list: entry -> consumer, delivery time, delivery
  count, in ID order (entries are delivered in ID order, so insertion order is);
- consumers with the time they last received or took over an entry (the
  ``idle`` of ``XINFO CONSUMERS``; a read that returns nothing leaves it alone,
  as Redis 7.0 does).

The task records stay the manager's: the claim, renewal and hand-back methods
follow ``lua/claim.lua`` (``includes/claim.lua``), ``renew.lua``,
``release.lua`` and ``requeue.lua`` step for step on those records, under the
manager's one lock and on its clock, so the fence a claim writes is the one the
contract's operations check. Each partition's tenant queues
(:class:`~redis_tasks._memory_tenants.Tenants`) are filled by the manager's create
and dispatched by :meth:`InMemoryWorkQueue.claim_next`, as ``enqueue`` and
``dispatch`` (``lua/includes/tenants.lua``) do.

A reader waiting for new entries waits on an :class:`asyncio.Event` of its own
that an append sets: no polling. Like the manager, the queue is meant for one
event loop.
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING, Final

from ._errors import BackendError, TaskNotFoundError
from ._ids import parse_task_id
from ._lease import INTERNAL_ERROR, Claim, ClaimOutcome
from ._memory_stream import EntryId, Partition, Pending, Reader, id_text, parse_id
from ._memory_tenants import Tenants, settings_of
from ._record import decode_origin
from ._status import TERMINAL_STATUSES
from ._tenancy import stride
from ._work_queue import QueueDepth, WorkEntry

if TYPE_CHECKING:
    from ._memory import InMemoryTaskManager, _Record

__all__ = ["TERMINAL", "InMemoryWorkQueue"]

#: Stored status values that are terminal.
TERMINAL: Final = frozenset(status.value.encode() for status in TERMINAL_STATUSES)
_CANCELLED: Final = b"cancelled"
_FAILED: Final = b"failed"
#: Seconds one call may take: nothing here waits on I/O, so any bound would do.
_TIMEOUT: Final = 5.0
_MS: Final = timedelta(milliseconds=1)


def _entry(partition: int, entry_id: EntryId, task_id: str) -> WorkEntry:
    """A stored entry as a :class:`WorkEntry` (a doorbell names no task)."""
    if task_id:
        return WorkEntry(partition, id_text(entry_id), task_id)
    return WorkEntry(partition, id_text(entry_id), None, doorbell=True)


def _lease_ms(lease: timedelta) -> int:
    ms = lease // _MS
    if ms < 1:
        raise ValueError("a lease must be at least one millisecond")
    return ms


class InMemoryWorkQueue:
    """The work queue of an :class:`InMemoryTaskManager` (see the module)."""

    def __init__(self, manager: InMemoryTaskManager) -> None:
        self._manager = manager
        self._partitions: dict[int, Partition] = {}
        self._poison_error = manager._encoder.error(INTERNAL_ERROR)

    @property
    def lock(self) -> threading.Lock:
        """The manager's lock, which guards the records and the streams together."""
        return self._manager._lock

    @property
    def timeout(self) -> float:
        """Seconds one call may take."""
        return _TIMEOUT

    # -- the streams (callers hold the lock) -------------------------------------------

    def partition(self, partition: int) -> Partition:
        """The partition's stream and group, created on first use (like ``MKSTREAM``)."""
        state = self._partitions.get(partition)
        if state is None:
            state = self._partitions[partition] = Partition(Tenants(partition))
        return state

    def append(self, partition: int, task_id: str) -> str:
        """``XADD <work> * t <task_id>`` (``task_id`` "": a doorbell, ``XADD <work> * d
        1``): the new entry's ID; wakes the waiting readers."""
        state = self.partition(partition)
        ms, seq = state.last_id
        now = self._manager._now()
        entry_id = (now, 0) if now > ms else (ms, seq + 1)
        state.last_id = entry_id
        state.entries[entry_id] = task_id
        state.fresh.append(entry_id)
        for arrived in state.waiting:
            arrived.set()
        state.waiting.clear()
        return id_text(entry_id)

    def drop_entry(self, partition: int, entry: str) -> None:
        """``XACK`` and ``XDEL``: the entry is neither pending nor in the stream."""
        entry_id = parse_id(entry)
        state = self._partitions.get(partition)
        if entry_id is None or state is None:
            return
        state.pending.pop(entry_id, None)
        state.entries.pop(entry_id, None)

    def deliver(self, partition: int, consumer: str, count: int) -> list[WorkEntry]:
        """``XREADGROUP GROUP workers <consumer> COUNT <count> ... >`` (not blocking)."""
        state = self.partition(partition)
        now = self._manager._now()
        out: list[WorkEntry] = []
        while state.fresh and len(out) < count:
            entry_id = state.fresh.popleft()
            task_id = state.entries.get(entry_id)
            if task_id is None:
                continue  # deleted before anyone read it
            state.pending[entry_id] = Pending(consumer, now)
            out.append(_entry(partition, entry_id, task_id))
        if out:
            state.consumers[consumer] = now
        return out

    def _take_over(self, state: Partition, entry: str, consumer: str, now: int) -> None:
        """``XCLAIM <work> workers <consumer> 0 <entry> JUSTID``."""
        entry_id = parse_id(entry)
        pending = state.pending.get(entry_id) if entry_id is not None else None
        if entry_id is None or pending is None:
            return
        if entry_id not in state.entries:
            del state.pending[entry_id]  # Redis 7 purges a deleted entry it meets
            return
        pending.consumer, pending.delivered_ms = consumer, now
        state.consumers[consumer] = now

    # -- claims (mirrors of the scripts; callers hold the lock) --------------------------

    def _claim_entry(
        self, task_id: str, entry_id: str, consumer: str, lease_ms: int, max_attempts: int
    ) -> Claim:
        """Mirror of ``claim_entry`` in ``lua/includes/claim.lua``."""
        manager = self._manager
        partition = parse_task_id(task_id)
        assert partition is not None  # the callers checked the ID
        record = manager._live(task_id)
        if record is None:
            self.drop_entry(partition, entry_id)
            return Claim(ClaimOutcome.EXPIRED)
        fields = record.fields
        if fields["st"] in TERMINAL:
            self.drop_entry(partition, entry_id)
            return Claim(ClaimOutcome.TERMINAL)
        now = manager._now()
        deadline = fields.get("ld")
        if deadline is not None and int(deadline) > now:
            if fields.get("lo") == consumer.encode() and fields.get("wk") == entry_id.encode():
                return self._run(record, int(fields["fn"]), int(fields.get("at", b"0")))
            return Claim(ClaimOutcome.LEASE_HELD)
        entry = fields.get("wk", entry_id.encode()).decode()
        if fields.get("cx") == b"1":
            manager._terminate(record, task_id, entry, _CANCELLED, None, "", b"")
            return Claim(ClaimOutcome.CANCELLED)
        attempt = int(fields.get("at", b"0")) + 1
        if attempt > max_attempts:
            manager._terminate(record, task_id, entry, _FAILED, None, "er", self._poison_error)
            return Claim(ClaimOutcome.POISONED)
        tenant, cap = fields.get("tn"), fields.get("tc")
        tenants = self.partition(partition).tenants
        if cap is not None and tenant is not None:
            name = tenant.decode()
            mine = tenants.running.get(name, {}).get(task_id)
            if not (mine is not None and mine > now) and tenants.live_running(name, now) >= int(
                cap
            ):
                self._defer(partition, record, name, cap.decode(), task_id, entry_id, now)
                return Claim(ClaimOutcome.DEFERRED)
        # Two workers claiming in the same millisecond get different fences.
        tiebreak = 0
        for byte in consumer.encode():
            tiebreak = (tiebreak * 31 + byte) % 1024
        fence = max(int(fields["fn"]) + 1, now * 1024 + tiebreak)
        fields["fn"] = str(fence).encode()
        fields["at"] = str(attempt).encode()
        fields["lo"] = consumer.encode()
        fields["ld"] = str(now + lease_ms).encode()
        fields.setdefault("wk", entry_id.encode())
        if cap is not None and tenant is not None:
            tenants.hold_slot(tenant.decode(), task_id, now + lease_ms, now)
        return self._run(record, fence, attempt)

    def _defer(
        self,
        partition: int,
        record: _Record,
        tenant: str,
        cap: str,
        task_id: str,
        entry_id: str,
        now: int,
    ) -> None:
        """Mirror of ``defer`` in ``lua/includes/claim.lua``: back to the head of its
        tenant's queue, the tenant parked."""
        self.drop_entry(partition, entry_id)
        entry = record.fields.pop("wk", None)
        if entry is not None:
            self.drop_entry(partition, entry.decode())
        tenants = self.partition(partition).tenants
        tenants.queues.setdefault(tenant, deque()).appendleft(task_id)
        tenants.settings.setdefault(tenant, f"1 {cap}")
        tenants.park(tenant, now)
        tenants.queued += 1

    def enqueue(
        self, partition: int, tenant: str, settings: str, task_id: str, *, fair: bool
    ) -> str | None:
        """Mirror of ``enqueue`` in ``lua/includes/tenants.lua``: the entry ID when the
        task went straight into the stream, else ``None`` (it joined its tenant's queue)."""
        if not fair:
            return self.append(partition, task_id)
        state = self.partition(partition)
        tenants = state.tenants
        queue = tenants.queues.get(tenant)
        if not queue:
            if not tenants.ring and not state.undelivered():
                return self.append(partition, task_id)
            queue = tenants.queues[tenant] = deque()
            tenants.join_ring(tenant, settings_of(settings)[0])
            if not settings:
                tenants.settings.pop(tenant, None)
        queue.append(task_id)
        if settings:
            tenants.settings[tenant] = settings
        tenants.queued += 1
        return None

    def dispatch(self, partition: int, count: int, now: int) -> int:
        """Mirror of ``dispatch`` in ``lua/includes/tenants.lua``: up to ``count`` waiting
        tasks into the stream, in weighted round-robin; how many it added."""
        tenants = self.partition(partition).tenants
        due = sorted((at, name) for name, at in tenants.parked.items() if at <= now)
        for _, name in due[:count]:
            tenants.unpark(name)
        top = tenants.lowest(count + 1)
        if not top:
            return 0
        names = [name for name, _ in top]
        passes = [score for _, score in top]
        strides, rooms, capped, picks = [], [], [], [0] * len(names)
        for name in names:
            weight, cap = settings_of(tenants.settings.get(name))
            strides.append(stride(weight))
            capped.append(cap > 0)
            rooms.append(cap - tenants.live_running(name, now) if cap > 0 else count)
        for _ in range(count):
            best = None
            for i in range(len(names)):
                if picks[i] < rooms[i] and (best is None or passes[i] < passes[best]):
                    best = i
            if best is None:
                break
            picks[best] += 1
            tenants.vtime = passes[best]
            passes[best] += strides[best]
        added = 0
        for i, name in enumerate(names):
            waiting = True
            if picks[i] > 0:
                queue = tenants.queues.get(name, deque())
                got = [queue.popleft() for _ in range(min(picks[i], len(queue)))]
                for task_id in got:
                    self.append(partition, task_id)
                added += len(got)
                waiting = bool(queue)
                if not queue:
                    tenants.queues.pop(name, None)
            if not waiting:
                tenants.ring.pop(name, None)
                tenants.settings.pop(name, None)
            elif capped[i] and picks[i] >= rooms[i]:
                tenants.park(name, now)
            elif picks[i] > 0:
                tenants.ring[name] = passes[i]
        tenants.queued -= added
        return added

    @staticmethod
    def _run(record: _Record, fence: int, attempt: int) -> Claim:
        fields = record.fields
        origin = decode_origin(fields["or"])
        return Claim(
            ClaimOutcome.RUN,
            fence,
            attempt,
            origin,
            fields.get("pl", b""),
            fields.get("tp", b""),
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
            claim = self._claim_entry(
                entry.task_id, entry.entry_id, consumer, lease_ms, max_attempts
            )
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
    ) -> list[tuple[WorkEntry, Claim]]:
        """Mirror of ``claim_next.lua``: read up to ``count`` new entries and claim each,
        then dispatch the rest of the batch from the tenant queues."""
        lease_ms = _lease_ms(lease)
        out: list[tuple[WorkEntry, Claim]] = []

        def read_and_claim(wanted: int) -> tuple[int, bool]:
            entries = self.deliver(partition, consumer, wanted)
            met = 0
            for entry in entries:
                if entry.task_id is None:  # a doorbell (every entry here names a task)
                    self.drop_entry(partition, entry.entry_id)
                    continue
                claim = self._claim_entry(
                    entry.task_id, entry.entry_id, consumer, lease_ms, max_attempts
                )
                out.append((entry, claim))
                met += 1
            return met, len(entries) < wanted

        with self.lock:
            wanted, drained = count, False
            while wanted > 0 and not drained:
                met, drained = read_and_claim(wanted)
                wanted -= met
            if drained:
                if wanted > 0:
                    added = self.dispatch(partition, wanted, self._manager._now())
                    if added:
                        read_and_claim(added)
                if wake and self.partition(partition).tenants.ring:
                    self.append(partition, "")
        return out

    async def reclaim(
        self, partition: int, *, consumer: str, idle: timedelta, cursor: str, count: int
    ) -> tuple[str, list[WorkEntry]]:
        """``XAUTOCLAIM <work> workers <consumer> <idle> <cursor> COUNT <count>``: the
        next cursor (``0-0`` once the scan reached the end) and the entries taken over."""
        start = parse_id(cursor)
        if start is None:
            raise BackendError("invalid stream ID")
        idle_ms = idle // _MS
        with self.lock:
            state = self.partition(partition)
            now = self._manager._now()
            # Redis looks at no more than ten entries per one asked for.
            attempts, wanted = count * 10, count
            taken: list[WorkEntry] = []
            next_cursor: EntryId = (0, 0)
            for entry_id in [e for e in state.pending if e >= start]:
                if attempts == 0 or wanted == 0:
                    next_cursor = entry_id
                    break
                attempts -= 1
                task_id = state.entries.get(entry_id)
                if task_id is None:
                    # Deleted from the stream: the pending entry goes, and counts.
                    del state.pending[entry_id]
                    wanted -= 1
                    continue
                pending = state.pending[entry_id]
                if idle_ms and now - pending.delivered_ms < idle_ms:
                    continue
                pending.consumer, pending.delivered_ms = consumer, now
                pending.deliveries += 1
                taken.append(_entry(partition, entry_id, task_id))
                wanted -= 1
            if taken:
                state.consumers[consumer] = now
        return id_text(next_cursor), taken

    async def renew(self, task_id: str, *, fence: int, consumer: str, lease: timedelta) -> bool:
        """Mirror of ``renew.lua``; whether cancellation was requested."""
        lease_ms = _lease_ms(lease)
        manager = self._manager
        encoded = manager._encoder.fence(fence)
        with self.lock:
            record = manager._guarded(task_id, encoded)
            now = manager._now()
            fields = record.fields
            fields["ld"] = str(now + lease_ms).encode()
            fields["lo"] = consumer.encode()
            entry = fields.get("wk")
            partition = parse_task_id(task_id)
            assert partition is not None  # _guarded found the record by this ID
            state = self.partition(partition)
            if entry is not None:
                self._take_over(state, entry.decode(), consumer, now)
            tenant = fields.get("tn")
            if tenant is not None and "tc" in fields:
                state.tenants.hold_slot(tenant.decode(), task_id, now + lease_ms, now)
            return fields.get("cx") == b"1"

    async def release(self, task_id: str, *, fence: int) -> None:
        """Mirror of ``release.lua``: a fresh entry, the fence bumped, the attempt undone."""
        manager = self._manager
        encoded = manager._encoder.fence(fence)
        with self.lock:
            record = manager._guarded(task_id, encoded)
            partition = parse_task_id(task_id)
            assert partition is not None  # _guarded found the record by this ID
            fields = record.fields
            entry = fields.get("wk")
            if entry is not None:
                self.drop_entry(partition, entry.decode())
            fields["wk"] = self.append(partition, task_id).encode()
            attempts = max(int(fields.get("at", b"1")) - 1, 0)
            fields["fn"] = str(int(fields["fn"]) + 1).encode()
            fields["at"] = str(attempts).encode()
            fields["ld"] = b"0"
            fields.pop("lo", None)
            tenant = fields.get("tn")
            if (
                tenant is not None
                and "tc" in fields
                and self.partition(partition).tenants.release_slot(tenant.decode(), task_id)
            ):
                self.append(partition, "")  # the doorbell

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
            record = self._manager._live(task_id)
            self.drop_entry(partition, entry.entry_id)
            if (
                record is None
                or record.fields["st"] in TERMINAL
                or record.fields.get("wk") != entry.entry_id.encode()
            ):
                return
            record.fields["wk"] = self.append(partition, task_id).encode()

    async def drop(self, entry: WorkEntry) -> None:
        """Acknowledge and delete an entry that will never run."""
        with self.lock:
            self.drop_entry(entry.partition, entry.entry_id)

    async def forget_consumer(self, partition: int, consumer: str) -> None:
        """``XGROUP DELCONSUMER`` of ``consumer`` if nothing is pending with it."""
        with self.lock:
            state = self.partition(partition)
            if all(p.consumer != consumer for p in state.pending.values()):
                state.consumers.pop(consumer, None)

    async def remove_stale_consumers(self, partition: int, *, keep: str, idle: timedelta) -> None:
        """Remove consumers other than ``keep`` with nothing pending, idle for ``idle``."""
        idle_ms = idle // _MS
        with self.lock:
            state = self.partition(partition)
            now = self._manager._now()
            busy = Counter(p.consumer for p in state.pending.values())
            for name, seen in list(state.consumers.items()):
                if name != keep and not busy[name] and now - seen > idle_ms:
                    del state.consumers[name]

    async def depth(self, partition: int) -> QueueDepth:
        """``XLEN``, the ``XPENDING`` summary's count, ``queued`` and the tenants waiting."""
        with self.lock:
            state = self.partition(partition)
            tenants = state.tenants
            return QueueDepth(
                len(state.entries),
                len(state.pending),
                tenants.queued,
                len(tenants.ring) + len(tenants.parked),
            )
