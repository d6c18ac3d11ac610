"""The ``WorkQueue`` contract: what a worker may rely on, whatever the backend.

Each test runs against every backend in :data:`QUEUE_BACKENDS` through the
``subject`` fixture: a manager with one partition (so every task lands in
partition 0), its work queue, a few read-only looks at the queue's state
(pending entries, consumers, the entries in the stream) and one operator's
action (deleting an entry from the stream), which each backend does its own
way. Only those are backend-specific; every step goes through
:class:`WorkQueue` and the contract. The Redis backend is the reference: its
behaviour (Redis 7.0's stream commands and the Lua scripts) is what the
in-memory queue must match.

Time is real (the Redis server's clock cannot be moved): leases and idle times
in these tests are a few hundred milliseconds, and a test sleeps past them.

The managers here dispatch first come, first served (``fair_dispatch=False``):
every task's entry goes straight into the stream, whose mechanics these tests
are about. Fair dispatch from the tenant queues has its own suite
(``tests/contract/test_tenants.py``).
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from redis_tasks import (
    ClaimOutcome,
    InMemoryTaskManager,
    LeaseLostError,
    RedisTaskManager,
    TaskNotFoundError,
    TaskRequestContext,
    TaskStatus,
    TaskTerminalError,
)
from redis_tasks._lease import INTERNAL_ERROR, Claim
from redis_tasks._redis.keys import WORK_GROUP
from redis_tasks._work_queue import QueueDepth, WorkEntry, WorkerBackend, WorkQueue
from tests.support.backends import server_url
from tests.support.helpers import ALICE, ORIGIN

#: The backends the suite runs on: the in-memory queue, the demo's embedded Redis
#: (fakeredis served on a socket: the worker's blocking reads need one), a standalone
#: redis-server and a cluster.
QUEUE_BACKENDS = ("memory", "embedded", "redis", "cluster")

LONG = timedelta(seconds=30)  # a lease that outlives the test
SHORT = timedelta(milliseconds=200)  # a lease a test waits out
PAST_SHORT = 0.35  # seconds: well past SHORT
BLOCK = timedelta(milliseconds=200)
START = "0-0"


class Subject(ABC):
    """A backend under test: its manager, its queue and read-only looks at the queue."""

    name: str
    manager: WorkerBackend

    @property
    def queue(self) -> WorkQueue:
        return self.manager.work_queue

    @abstractmethod
    async def pending(self) -> dict[str, str]:
        """Partition 0's pending entries: entry ID -> consumer."""

    @abstractmethod
    async def consumers(self) -> set[str]:
        """Partition 0's consumer names."""

    @abstractmethod
    async def entries(self) -> list[str]:
        """The IDs of the entries in partition 0's stream."""

    @abstractmethod
    async def delete_entry(self, entry_id: str) -> None:
        """Delete an entry from the stream but not from the pending list (an operator's
        ``XDEL``)."""


class MemorySubject(Subject):
    """Looks at partition 0's state inside the in-memory queue."""

    name = "memory"

    def __init__(self, manager: InMemoryTaskManager) -> None:
        self.manager = manager
        self._queue: Any = manager.work_queue

    async def pending(self) -> dict[str, str]:
        state = self._queue.partition(0)
        return {f"{e[0]}-{e[1]}": p.consumer for e, p in state.pending.items()}

    async def consumers(self) -> set[str]:
        return set(self._queue.partition(0).consumers)

    async def entries(self) -> list[str]:
        return [f"{e[0]}-{e[1]}" for e in self._queue.partition(0).entries]

    async def delete_entry(self, entry_id: str) -> None:
        ms, seq = entry_id.split("-")
        del self._queue.partition(0).entries[(int(ms), int(seq))]


class RedisSubject(Subject):
    """Looks at partition 0's stream and group with the stream commands themselves."""

    def __init__(self, name: str, manager: RedisTaskManager) -> None:
        self.name = name
        self.manager = manager
        self._client = manager.client
        self._stream = manager.keyspace.work(0)

    async def pending(self) -> dict[str, str]:
        rows = await self._client.xpending_range(self._stream, WORK_GROUP, "-", "+", 1000)
        return {_text(r["message_id"]): _text(r["consumer"]) for r in rows}

    async def consumers(self) -> set[str]:
        rows = await self._client.xinfo_consumers(self._stream, WORK_GROUP)
        return {_text(r["name"]) for r in rows}

    async def entries(self) -> list[str]:
        rows = await self._client.xrange(self._stream) or []
        return [_text(entry_id) for entry_id, _ in rows]

    async def delete_entry(self, entry_id: str) -> None:
        await self._client.xdel(self._stream, entry_id)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@pytest.fixture(params=QUEUE_BACKENDS)
async def subject(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[Subject]:
    """A one-partition manager of each backend, entered."""
    if request.param == "memory":
        memory = InMemoryTaskManager(partitions=1, fair_dispatch=False)
        async with memory:
            yield MemorySubject(memory)
        return
    url = server_url(request, request.param)
    redis = RedisTaskManager.from_url(url, prefix=prefix, partitions=1, fair_dispatch=False)
    async with redis:
        yield RedisSubject(request.param, redis)


async def new_task(subject: Subject, payload: bytes = b"", **options: Any) -> str:
    task = await subject.manager.create_task(ALICE, ORIGIN, payload=payload, **options)
    return task.task_id


async def status_of(subject: Subject, task_id: str) -> TaskStatus | None:
    task = await subject.manager.find_task(TaskRequestContext(ALICE, task_id))
    return None if task is None else task.status


async def read_one(subject: Subject, consumer: str) -> WorkEntry:
    """The one new entry ``consumer`` reads (the test made sure there is one)."""
    reader = subject.queue.reader(0, consumer, BLOCK)
    try:
        (entry,) = await reader.read(1)
    finally:
        await reader.close()
    return entry


async def read_all(subject: Subject, consumer: str, count: int = 100) -> list[WorkEntry]:
    reader = subject.queue.reader(0, consumer, BLOCK)
    try:
        return await reader.read(count)
    finally:
        await reader.close()


async def claim(
    subject: Subject,
    entry: WorkEntry,
    consumer: str = "w1",
    lease: timedelta = LONG,
    max_attempts: int = 3,
) -> Claim:
    return await subject.queue.claim(
        entry, consumer=consumer, lease=lease, max_attempts=max_attempts
    )


async def reclaim(
    subject: Subject, consumer: str, idle: timedelta = SHORT, cursor: str = START, count: int = 10
) -> tuple[str, list[WorkEntry]]:
    return await subject.queue.reclaim(0, consumer=consumer, idle=idle, cursor=cursor, count=count)


# -- the manager -------------------------------------------------------------------------


async def test_the_manager_is_a_worker_backend_with_one_queue(subject: Subject) -> None:
    assert isinstance(subject.manager, WorkerBackend)
    assert isinstance(subject.queue, WorkQueue)
    assert subject.manager.work_queue is subject.queue
    assert subject.queue.timeout > 0
    await subject.queue.ensure_groups([0])  # idempotent
    await subject.queue.ensure_groups([0])


# -- reading -----------------------------------------------------------------------------


async def test_a_new_entry_is_delivered_to_one_consumer_and_stays_pending_with_it(
    subject: Subject,
) -> None:
    first, second = await new_task(subject), await new_task(subject)
    entries = await read_all(subject, "w1")
    assert [e.task_id for e in entries] == [first, second]
    assert all(e.partition == 0 for e in entries)
    assert await read_all(subject, "w2") == []  # delivered once, to one consumer
    assert await read_all(subject, "w1") == []
    assert await subject.pending() == {e.entry_id: "w1" for e in entries}
    assert await subject.entries() == [e.entry_id for e in entries]


async def test_read_returns_at_most_count_entries_in_order(subject: Subject) -> None:
    created = [await new_task(subject) for _ in range(3)]
    reader = subject.queue.reader(0, "w1", BLOCK)
    first = await reader.read(2)
    rest = await reader.read(2)
    await reader.close()
    assert [e.task_id for e in first + rest] == created
    assert len(first) == 2


async def test_a_blocked_reader_wakes_when_a_task_is_created(subject: Subject) -> None:
    reader = subject.queue.reader(0, "w1", timedelta(seconds=10))
    started = time.monotonic()
    read = asyncio.create_task(reader.read(5))
    await asyncio.sleep(0.1)
    assert not read.done()
    task_id = await new_task(subject)
    entries = await asyncio.wait_for(read, timeout=5)
    await reader.close()
    assert [e.task_id for e in entries] == [task_id]
    assert time.monotonic() - started < 5


async def test_a_read_with_nothing_new_returns_empty_after_its_block_time(
    subject: Subject,
) -> None:
    reader = subject.queue.reader(0, "w1", timedelta(milliseconds=150))
    started = time.monotonic()
    assert await reader.read(1) == []
    assert time.monotonic() - started >= 0.12
    await reader.close()


async def test_one_new_entry_wakes_two_blocked_readers_but_reaches_one(
    subject: Subject,
) -> None:
    # A block long enough for the create below on a loaded machine (400 ms once missed
    # it in a full run: neither reader got the entry).
    readers = [subject.queue.reader(0, name, timedelta(seconds=1)) for name in "ab"]
    reads = [asyncio.create_task(r.read(1)) for r in readers]
    await asyncio.sleep(0.05)  # the readers' commands out first (a blocked read has no mark)
    task_id = await new_task(subject)
    results = await asyncio.gather(*reads)
    for reader in readers:
        await reader.close()
    assert sorted(len(r) for r in results) == [0, 1]
    assert [e.task_id for r in results for e in r] == [task_id]


# -- claims ------------------------------------------------------------------------------


async def test_a_claim_runs_the_task_with_a_fence_the_contract_checks(subject: Subject) -> None:
    m = subject.manager
    task_id = await new_task(subject, payload=b"work")
    entry = await read_one(subject, "w1")
    got = await claim(subject, entry)
    assert (got.outcome, got.attempt, got.payload, got.origin) == (
        ClaimOutcome.RUN,
        1,
        b"work",
        ORIGIN,
    )
    assert got.fence > 0
    with pytest.raises(LeaseLostError):  # the fence of no claim (0) is stale now
        await m.mark_working(task_id, "x", fence=0)
    with pytest.raises(LeaseLostError):
        await m.mark_working(task_id, "x", fence=got.fence + 1)
    await m.mark_working(task_id, "half way", fence=got.fence)
    await m.complete_task(task_id, {"ok": True}, fence=got.fence)
    assert await status_of(subject, task_id) is TaskStatus.COMPLETED
    # Finishing acknowledged and deleted the entry.
    assert await subject.pending() == {}
    assert await subject.entries() == []


async def test_the_fence_is_above_the_clock_in_ms_times_1024(subject: Subject) -> None:
    await new_task(subject)
    before_ms = int(time.time() * 1000)
    got = await claim(subject, await read_one(subject, "w1"))
    # Same host: the backend's clock is this clock (allowing for a small skew).
    assert got.fence >= (before_ms - 1000) * 1024


async def test_the_same_consumer_claiming_again_gets_its_lease_back(subject: Subject) -> None:
    await new_task(subject)
    entry = await read_one(subject, "w1")
    first = await claim(subject, entry)
    again = await claim(subject, entry)  # a retry after a lost reply
    assert again == first
    assert (again.fence, again.attempt) == (first.fence, 1)


async def test_another_consumer_finds_the_lease_held_and_changes_nothing(
    subject: Subject,
) -> None:
    task_id = await new_task(subject)
    entry = await read_one(subject, "w1")
    held = await claim(subject, entry)
    assert (await claim(subject, entry, "w2")).outcome is ClaimOutcome.LEASE_HELD
    await subject.manager.mark_working(task_id, "still mine", fence=held.fence)
    assert await subject.pending() == {entry.entry_id: "w1"}


async def test_an_idle_entry_is_reclaimed_and_the_new_claim_fences_out_the_old(
    subject: Subject,
) -> None:
    m = subject.manager
    task_id = await new_task(subject)
    entry = await read_one(subject, "w1")
    first = await claim(subject, entry, lease=SHORT)
    assert await reclaim(subject, "w2") == (START, [])  # not idle long enough yet
    await asyncio.sleep(PAST_SHORT)
    cursor, taken = await reclaim(subject, "w2")
    assert (cursor, taken) == (START, [entry])
    assert await subject.pending() == {entry.entry_id: "w2"}
    second = await claim(subject, taken[0], "w2")
    assert (second.outcome, second.attempt) == (ClaimOutcome.RUN, 2)
    assert second.fence > first.fence
    with pytest.raises(LeaseLostError):  # the first worker is a zombie now
        await m.complete_task(task_id, {"late": True}, fence=first.fence)
    await m.complete_task(task_id, {"ok": True}, fence=second.fence)


async def test_reclaim_scans_from_its_cursor_count_at_a_time(subject: Subject) -> None:
    # Half a second of idleness, not SHORT: the last check must come within it of the
    # first takeover, five round trips on a cluster that a loaded machine stretched
    # past 200 ms.
    idle = timedelta(milliseconds=500)
    for _ in range(3):
        await new_task(subject)
    entries = await read_all(subject, "w1")
    await asyncio.sleep(idle.total_seconds() + 0.15)
    ids = [e.entry_id for e in entries]
    cursor, taken = await reclaim(subject, "w2", idle, count=1)
    assert ([e.entry_id for e in taken], cursor) == (ids[:1], ids[1])
    cursor, taken = await reclaim(subject, "w2", idle, cursor=cursor, count=1)
    assert ([e.entry_id for e in taken], cursor) == (ids[1:2], ids[2])
    cursor, taken = await reclaim(subject, "w2", idle, cursor=cursor, count=1)
    assert ([e.entry_id for e in taken], cursor) == (ids[2:], START)
    assert await subject.pending() == dict.fromkeys(ids, "w2")
    # Each was just taken over, so none is idle any more.
    assert await reclaim(subject, "w3", idle) == (START, [])


async def test_reclaim_drops_a_pending_entry_deleted_from_the_stream(subject: Subject) -> None:
    await new_task(subject)
    await new_task(subject)
    gone, kept = await read_all(subject, "w1")
    await subject.delete_entry(gone.entry_id)
    await asyncio.sleep(PAST_SHORT)
    cursor, taken = await reclaim(subject, "w2")
    assert (cursor, taken) == (START, [kept])
    assert await subject.pending() == {kept.entry_id: "w2"}


async def test_claim_next_reads_and_claims_in_one_step(subject: Subject) -> None:
    created = [await new_task(subject, payload=bytes([n])) for n in range(3)]
    q = subject.queue
    first = await q.claim_next(0, consumer="w1", count=2, lease=LONG, max_attempts=3)
    rest = await q.claim_next(0, consumer="w1", count=2, lease=LONG, max_attempts=3)
    assert await q.claim_next(0, consumer="w1", count=2, lease=LONG, max_attempts=3) == []
    claimed = first + rest
    assert [e.task_id for e, _ in claimed] == created
    assert [c.outcome for _, c in claimed] == [ClaimOutcome.RUN] * 3
    assert [c.payload for _, c in claimed] == [b"\x00", b"\x01", b"\x02"]
    assert await subject.pending() == {e.entry_id: "w1" for e, _ in claimed}
    for (_, c), task_id in zip(claimed, created, strict=True):
        await subject.manager.complete_task(task_id, {}, fence=c.fence)
    assert await subject.pending() == {}


async def test_claim_next_never_meets_what_ended_before_a_worker_held_it(
    subject: Subject,
) -> None:
    """A cancellation asked while no worker holds the task ends it there and then, and
    an unfenced finish ends it as well: each takes its work with it (the first of a
    partition's tasks waits in the stream, the others in their tenant's queue)."""
    m = subject.manager
    cancelled, finished, runs = [await new_task(subject) for _ in range(3)]
    await m.request_cancellation(TaskRequestContext(ALICE, cancelled))
    assert await status_of(subject, cancelled) is TaskStatus.CANCELLED
    q = subject.queue
    await m.complete_task(finished, {})
    claimed = await q.claim_next(0, consumer="w1", count=5, lease=LONG, max_attempts=3)
    assert [(e.task_id, c.outcome) for e, c in claimed] == [(runs, ClaimOutcome.RUN)]
    assert await subject.pending() == {claimed[0][0].entry_id: "w1"}
    assert (await q.depth(0)).queued == 0


async def test_a_claim_of_a_terminal_task_drops_its_entry(subject: Subject) -> None:
    task_id = await new_task(subject)
    entry = await read_one(subject, "w1")
    await subject.manager.cancel_task(task_id)
    assert (await claim(subject, entry)).outcome is ClaimOutcome.TERMINAL
    assert await subject.pending() == {}
    assert await subject.entries() == []


async def test_a_claim_of_an_expired_task_drops_its_entry(subject: Subject) -> None:
    task_id = await new_task(subject, ttl=timedelta(milliseconds=100))
    entry = await read_one(subject, "w1")
    await asyncio.sleep(0.2)
    assert await status_of(subject, task_id) is None
    assert (await claim(subject, entry)).outcome is ClaimOutcome.EXPIRED
    assert await subject.pending() == {}
    assert await subject.entries() == []


async def test_a_claim_after_cancellation_was_requested_ends_it_cancelled(
    subject: Subject,
) -> None:
    """Cancellation asked while a worker held the task is intent only; once that
    worker's lease ran out (it died), the claim that takes the task over ends it."""
    m = subject.manager
    task_id = await new_task(subject)
    entry = await read_one(subject, "w1")
    assert (await claim(subject, entry, lease=SHORT)).outcome is ClaimOutcome.RUN
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))
    assert await status_of(subject, task_id) is TaskStatus.WORKING  # intent only
    await asyncio.sleep(PAST_SHORT)
    _, (entry,) = await reclaim(subject, "w2")
    assert (await claim(subject, entry, "w2")).outcome is ClaimOutcome.CANCELLED
    assert await status_of(subject, task_id) is TaskStatus.CANCELLED
    assert await subject.pending() == {}
    assert await subject.entries() == []
    # The same claim again (a retry after a lost reply) is told what it was told;
    # any other claim of the entry learns that the task has ended.
    assert (await claim(subject, entry, "w2")).outcome is ClaimOutcome.CANCELLED
    assert (await claim(subject, entry, "w3")).outcome is ClaimOutcome.TERMINAL


async def test_a_cancellation_of_a_task_read_but_not_claimed_ends_it(subject: Subject) -> None:
    """A worker read the entry but holds no lease yet: the cancellation ends the task
    and drops the entry; the claim that follows learns the task has ended."""
    m = subject.manager
    task_id = await new_task(subject)
    entry = await read_one(subject, "w1")
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))
    assert await status_of(subject, task_id) is TaskStatus.CANCELLED
    assert await subject.pending() == {}
    assert await subject.entries() == []
    assert (await claim(subject, entry)).outcome is ClaimOutcome.TERMINAL


async def test_a_task_claimed_more_than_max_attempts_times_fails_as_poison(
    subject: Subject,
) -> None:
    task_id = await new_task(subject)
    entry = await read_one(subject, "w1")
    assert (await claim(subject, entry, lease=SHORT, max_attempts=2)).attempt == 1
    await asyncio.sleep(PAST_SHORT)
    _, (entry,) = await reclaim(subject, "w2")
    assert (await claim(subject, entry, "w2", lease=SHORT, max_attempts=2)).attempt == 2
    await asyncio.sleep(PAST_SHORT)
    _, (entry,) = await reclaim(subject, "w3")
    assert (await claim(subject, entry, "w3", max_attempts=2)).outcome is ClaimOutcome.POISONED
    assert (await claim(subject, entry, "w3", max_attempts=2)).outcome is ClaimOutcome.POISONED
    task = await subject.manager.find_task(TaskRequestContext(ALICE, task_id))
    assert task is not None
    assert (task.status, task.error) == (TaskStatus.FAILED, INTERNAL_ERROR)
    assert await subject.pending() == {}
    assert await subject.entries() == []


async def test_a_renewal_before_any_claim_leaves_the_same_consumer_a_claim_at_fence_0(
    subject: Subject,
) -> None:
    # The lease a renewal records has no attempt yet: the same consumer's claim of
    # the same entry takes the "own lease" path, at fence 0 and attempt 0.
    task_id = await new_task(subject, payload=b"work")
    entry = await read_one(subject, "w1")
    assert await subject.queue.renew(task_id, fence=0, consumer="w1", lease=LONG) is False
    got = await claim(subject, entry)
    assert (got.outcome, got.fence, got.attempt, got.payload) == (ClaimOutcome.RUN, 0, 0, b"work")


# -- renewals ----------------------------------------------------------------------------


async def test_renew_reports_cancellation_and_refuses_a_stale_fence(subject: Subject) -> None:
    m, q = subject.manager, subject.queue
    task_id = await new_task(subject)
    got = await claim(subject, await read_one(subject, "w1"))
    assert await q.renew(task_id, fence=got.fence, consumer="w1", lease=LONG) is False
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))
    assert await q.renew(task_id, fence=got.fence, consumer="w1", lease=LONG) is True
    with pytest.raises(LeaseLostError):
        await q.renew(task_id, fence=got.fence - 1, consumer="w1", lease=LONG)
    await m.cancel_task(task_id, fence=got.fence)
    with pytest.raises(TaskTerminalError):
        await q.renew(task_id, fence=got.fence, consumer="w1", lease=LONG)
    with pytest.raises(LeaseLostError):  # a zombie learns it lost even after the end
        await q.renew(task_id, fence=got.fence + 1, consumer="w1", lease=LONG)
    with pytest.raises(TaskNotFoundError):
        await q.renew("0." + "A" * 24, fence=1, consumer="w1", lease=LONG)


async def test_a_renewal_keeps_the_entry_from_being_reclaimed(subject: Subject) -> None:
    task_id = await new_task(subject)
    entry = await read_one(subject, "w1")
    got = await claim(subject, entry, lease=SHORT)
    await asyncio.sleep(PAST_SHORT)
    await subject.queue.renew(task_id, fence=got.fence, consumer="w1", lease=LONG)
    assert await reclaim(subject, "w2") == (START, [])
    assert (await claim(subject, entry, "w2")).outcome is ClaimOutcome.LEASE_HELD
    assert await subject.pending() == {entry.entry_id: "w1"}


async def test_a_renewal_takes_the_entry_back_from_whoever_reclaimed_it(
    subject: Subject,
) -> None:
    task_id = await new_task(subject)
    entry = await read_one(subject, "w1")
    got = await claim(subject, entry, lease=SHORT)
    await asyncio.sleep(PAST_SHORT)
    assert (await reclaim(subject, "w2"))[1] == [entry]
    # The holder renews before w2 claims: the lease and the entry are w1's again.
    await subject.queue.renew(task_id, fence=got.fence, consumer="w1", lease=LONG)
    assert await subject.pending() == {entry.entry_id: "w1"}
    assert (await claim(subject, entry, "w2")).outcome is ClaimOutcome.LEASE_HELD


# -- hand-backs --------------------------------------------------------------------------


async def test_release_puts_a_fresh_entry_and_bumps_the_fence_by_one(subject: Subject) -> None:
    m, q = subject.manager, subject.queue
    task_id = await new_task(subject)
    entry = await read_one(subject, "w1")
    got = await claim(subject, entry)
    reader = q.reader(0, "w2", timedelta(seconds=10))
    waiting = asyncio.create_task(reader.read(1))
    await asyncio.sleep(0.05)
    await q.release(task_id, fence=got.fence)
    (fresh,) = await asyncio.wait_for(waiting, timeout=5)  # an idle reader gets it at once
    await reader.close()
    assert fresh.task_id == task_id
    assert fresh.entry_id != entry.entry_id
    assert await subject.entries() == [fresh.entry_id]
    assert await subject.pending() == {fresh.entry_id: "w2"}
    with pytest.raises(LeaseLostError):
        await m.mark_working(task_id, fence=got.fence)
    await m.mark_working(task_id, "the released fence, plus one", fence=got.fence + 1)
    again = await claim(subject, fresh, "w2")
    # The released run is not counted against max_attempts.
    assert (again.outcome, again.attempt) == (ClaimOutcome.RUN, 1)
    assert again.fence > got.fence + 1
    with pytest.raises(LeaseLostError):
        await q.release(task_id, fence=got.fence)


async def test_release_refuses_what_a_renewal_refuses(subject: Subject) -> None:
    m, q = subject.manager, subject.queue
    task_id = await new_task(subject)
    got = await claim(subject, await read_one(subject, "w1"))
    with pytest.raises(LeaseLostError):
        await q.release(task_id, fence=got.fence + 5)
    await m.complete_task(task_id, {}, fence=got.fence)
    with pytest.raises(TaskTerminalError):
        await q.release(task_id, fence=got.fence)
    with pytest.raises(TaskNotFoundError):
        await q.release("0." + "A" * 24, fence=1)
    assert await subject.entries() == []


async def test_requeue_puts_an_unclaimed_entry_at_the_tail_for_others(subject: Subject) -> None:
    first, second = await new_task(subject), await new_task(subject)
    entry = await read_one(subject, "w1")
    assert entry.task_id == first
    await subject.queue.requeue(entry)
    assert await subject.pending() == {}
    # Behind the entry nobody read yet.
    entries = await read_all(subject, "w2")
    assert [e.task_id for e in entries] == [second, first]
    assert entries[1].entry_id != entry.entry_id
    got = await claim(subject, entries[1], "w2")
    assert (got.outcome, got.attempt) == (ClaimOutcome.RUN, 1)  # never claimed before


async def test_requeue_of_a_finished_or_superseded_entry_only_drops_it(
    subject: Subject,
) -> None:
    m, q = subject.manager, subject.queue
    finished = await new_task(subject)
    entry = await read_one(subject, "w1")
    await m.complete_task(finished, {})
    await q.requeue(entry)
    assert await subject.entries() == []
    # An entry the task no longer names (it was released meanwhile).
    task_id = await new_task(subject)
    old = await read_one(subject, "w1")
    got = await claim(subject, old)
    await q.release(task_id, fence=got.fence)
    (current,) = await subject.entries()
    await q.requeue(old)
    assert await subject.entries() == [current]


async def test_drop_acknowledges_and_deletes_an_entry(subject: Subject) -> None:
    await new_task(subject)
    entry = await read_one(subject, "w1")
    await subject.queue.drop(entry)
    assert await subject.pending() == {}
    assert await subject.entries() == []
    await asyncio.sleep(PAST_SHORT)
    assert await reclaim(subject, "w2") == (START, [])
    await subject.queue.drop(entry)  # again: nothing to do


# -- consumers ---------------------------------------------------------------------------


async def test_forget_consumer_removes_it_only_when_nothing_is_pending(subject: Subject) -> None:
    q = subject.queue
    await new_task(subject)
    entry = await read_one(subject, "w1")
    assert "w1" in await subject.consumers()
    await q.forget_consumer(0, "w1")
    assert "w1" in await subject.consumers()
    await q.drop(entry)
    await q.forget_consumer(0, "w1")
    assert "w1" not in await subject.consumers()
    await q.forget_consumer(0, "never-seen")


async def test_what_a_stopping_worker_was_delivered_unclaimed_goes_back_at_once(
    subject: Subject,
) -> None:
    """``hand_back_unclaimed``: an entry delivered to a read its worker's stop cancelled
    (never claimed) goes back to the stream for another worker's read, not to a reclaim
    a lease later; a doorbell is dropped; then the consumer can be forgotten."""
    q = subject.queue
    task_id = await new_task(subject)
    delivered = await read_one(subject, "stopping")
    assert delivered.task_id == task_id
    assert await q.hand_back_unclaimed(0, "stopping") == 1
    assert await q.hand_back_unclaimed(0, "stopping") == 0
    again = await read_one(subject, "other")
    assert again.task_id == task_id
    assert again.entry_id != delivered.entry_id
    await q.forget_consumer(0, "stopping")
    assert "stopping" not in await subject.consumers()


async def test_remove_stale_consumers_keeps_the_caller_the_busy_and_the_recent(
    subject: Subject,
) -> None:
    q = subject.queue
    for _ in range(4):
        await new_task(subject)
    for name in ("keep", "stale", "busy"):
        entry = await read_one(subject, name)
        if name != "busy":
            await q.drop(entry)
    await asyncio.sleep(PAST_SHORT)
    await q.drop(await read_one(subject, "recent"))
    await q.remove_stale_consumers(0, keep="keep", idle=SHORT)
    assert await subject.consumers() == {"keep", "busy", "recent"}


# -- depth -------------------------------------------------------------------------------


async def test_depth_counts_the_entries_and_those_delivered(subject: Subject) -> None:
    q = subject.queue
    assert await q.depth(0) == QueueDepth(0, 0)
    for _ in range(3):
        await new_task(subject)
    assert (await q.depth(0)).backlog == 3
    entry = await read_one(subject, "w1")
    assert await q.depth(0) == QueueDepth(entries=3, pending=1)
    await q.drop(entry)
    depth = await q.depth(0)
    assert (depth.entries, depth.pending, depth.backlog) == (2, 0, 2)
