"""Intake: how entries reach the worker's runs.

Three routes. An idle partition blocks in one read for up to two entries and
claims what it gets at once (the pickup path: one round trip for the claim,
sent in the turn the read's reply arrived in). A second entry, a claim that saw
tasks waiting in the tenant queues, or a doorbell (rung by a busy worker's batch
claim) says a backlog is building: the partition then reads and claims batches
in one call each (``claim_next``, which dispatches from the tenant queues in
their fair order) until it runs dry. A read loop starts that way too, and goes
back to it once after each idle read that timed out empty, so tasks left waiting
in the tenant queues (a doorbell lost with a worker that died) wait at most one
block period. And every half lease, entries pending with crashed or stalled
consumers are taken over (reclaimed) and claimed like new ones (:mod:`.reclaim`,
which the worker runs beside these); the claim checks the task's own lease
deadline, so a live lease is left alone.

A fourth route starts *newcomers*: a task whose tenant was not waiting and joined
a partition where others wait is signalled by its create (``lua/create.lua``).
That tenant is the one most behind, yet behind the partitions' turns at free
slots it waited for one free slot per partition served, and in its partition
behind tenants already there: with 16 partitions, 16 slots and tools of 500 ms,
its p99 was 1.7-2.0 s though a slot freed every 31 ms. So one loop takes the
signalled tasks in order, each at the worker's next free slot, first in line,
with a batch claim that starts that task first (``claim_next``'s ``first``); a
task another worker started already costs that claim nothing but its order.
Newcomers' runs hold at most half the worker's slots (each holds one of the
newcomers' share too), so a stream of newcomers cannot hold back the tenants
already waiting: past it, the next newcomer waits for a newcomer's run to end,
or for its partition's turn. With ``newcomer_slots`` (default none), a newcomer
that finds every slot busy takes one of those extra slots instead of waiting for
the next to free: tools that run long free their slots only when they end, and
those that started together end together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter, deque
from enum import Enum
from typing import Final

from redis_tasks._errors import RedisTasksError
from redis_tasks._ids import parse_task_id
from redis_tasks._lease import Claim
from redis_tasks._work_queue import WorkEntry, WorkQueue

from .health import Health
from .log import log
from .run_state import Settings
from .runs import Runs
from .slots import Background, SlotLease, Slots

__all__ = ["Intake", "Mode"]

_MAX_BACKOFF: Final = 5.0
# Entries an idle read asks for (see Intake.read).
_IDLE_READ: Final = 2
# Newcomers' tasks kept waiting for a free slot: past this many, the oldest is
# forgotten (it waits its turn in its partition, as every task did before).
_NEWCOMERS: Final = 64
# How long a batch claim waits for enough free slots (see Intake.read): a millisecond,
# next to handlers that free their slots together when they are short, and to a claim's
# own round trip when they are long.
_PATIENCE: Final = 0.001


class Mode(Enum):
    """What a partition's read loop does next (see :meth:`Intake.read`)."""

    #: Block in a read for up to two entries, reserving no slot: one is an idle
    #: pickup; a second, a doorbell, or a claim that saw tasks waiting in the
    #: tenant queues says a backlog is building (then ``BATCH``).
    IDLE = "idle"
    #: Look whether tasks wait, with a batch claim of one: at the start, and after
    #: an idle read timed out empty (a doorbell lost with a worker that died). A
    #: real backlog then gets whole batches, and sixteen idle loops looking at once
    #: do not hold every free slot meanwhile. Entries found: ``BATCH``, else ``IDLE``.
    PROBE = "probe"
    #: Read and claim whole batches in one call each until one comes back empty.
    BATCH = "batch"


class Intake:
    """Reads, claims and reclaims work for one worker (see the module)."""

    def __init__(
        self,
        queue: WorkQueue,
        runs: Runs,
        slots: Slots,
        settings: Settings,
        background: Background,
        stopping: asyncio.Event,
        health: Health,
    ) -> None:
        self._queue = queue
        self._health = health
        self._runs = runs
        self._slots = slots
        self._settings = settings
        self._background = background
        self._stopping = stopping
        self._block = settings.block
        self._newcomers: deque[str] = deque(maxlen=_NEWCOMERS)
        self._newcomer = asyncio.Event()  # set: newcomers wait, or the worker stops
        #: The newcomers' share of the slots: a newcomer's run holds one of these
        #: besides its handler slot (see the module).
        self._share = Slots(max(1, settings.concurrency // 2))
        #: Free slots a batch claim waits for (up to a millisecond): half the slots,
        #: at most a batch (see :meth:`read`).
        self._enough = max(1, min(settings.read_batch, settings.concurrency // 2))
        #: When this worker last rang each partition's doorbell (loop time): at most
        #: once a block period (see :meth:`_claim_batch`).
        self._rung: dict[int, float] = {}
        #: Claim calls by the number of tasks they brought (1 for an idle pickup).
        self.claim_sizes: Counter[int] = Counter()
        #: The read loops blocked in an idle read now: a stop cancels them (see close).
        self._blocked: set[asyncio.Task[None]] = set()

    @property
    def slots_out(self) -> int:
        """Newcomers' share not given back: zero once stopped."""
        return self._share.out

    def hint(self, task_id: str) -> None:
        """A newcomer's task waits (its create signalled it: in its partition's tenant
        queues, or in a stream whose partition's tasks hold workers): start it at the
        next free slot (see the module). With a spare slot (free, and no reader waiting
        in line for it), nothing waits for one: every read loop is reading or claiming
        batches, and meets the task in its own turn (a claim from here would race the
        loop that has it already: under light load, a round trip per task)."""
        if self._slots.spare:
            return
        self._newcomers.append(task_id)
        self._newcomer.set()

    def close(self) -> None:
        """The worker stops: the newcomers' loop ends, and so do the read loops blocked
        in an idle read, at once rather than at the end of their block (up to a second,
        which every stop of an idle worker waited). An entry the server delivered to a
        read cancelled that very moment stays pending with this worker, unread: the
        stop hands it back once its runs are over (the queue's ``hand_back_unclaimed``)."""
        self._share.close()
        self._newcomer.set()
        for loop in self._blocked:
            loop.cancel()

    async def newcomers(self) -> None:
        """Start newcomers' tasks in the order they were signalled, each at the next
        free slot and ahead of the partitions' turns, until the worker stops."""
        backoff = 0.05
        while True:
            await self._newcomer.wait()
            if self._stopping.is_set():
                return
            if not self._newcomers:
                self._newcomer.clear()
                continue
            # Room in the newcomers' share, then a free slot: taken at once when one
            # is free (the reader whose turn it gives keeps its place), else an extra
            # slot, else first in line. A newcomer's run that ends frees its share
            # and its slot, and wakes this loop first.
            share = self._share
            if not await share.wait_free():
                return
            slots = self._slots
            if not await slots.wait_free(first=True, overflow=True):
                return
            pool = slots if slots.free > 0 or slots.overflow is None else slots.overflow
            # A slot each for as many as wait, claimed together: one at a time, the
            # partitions' readers took the other slots of a batch that freed up
            # together while the first claim was out.
            wanted = min(len(self._newcomers), share.free)
            reserved = pool.take_up_to(wanted)
            if reserved is None:
                continue
            shared = share.take_up_to(reserved.count)
            assert shared is not None  # share.free >= wanted >= reserved.count >= 1
            reserved.with_companion(shared)
            claims = []
            while reserved.count and self._newcomers:
                task_id = self._newcomers.popleft()
                partition = parse_task_id(task_id)
                assert partition is not None  # the worker hints only its partitions' tasks
                claims.append(self._claim_batch(partition, reserved.split(), backoff, task_id))
            reserved.give_back()
            backoff = max(delay for _, delay in await asyncio.gather(*claims))

    async def read(self, partition: int) -> None:
        """Read and start ``partition``'s new entries until the worker stops."""
        reader = self._queue.reader(partition, self._settings.name, self._block)
        backoff = 0.05
        mode = Mode.PROBE  # tasks may be waiting in the tenant queues already
        try:
            health = self._health
            while not self._stopping.is_set():
                # Busy, not stuck: the health check leaves a loop waiting for a slot alone.
                busy = self._slots.free == 0
                if busy:
                    health.waiting(partition, True)
                try:
                    free = await self._slots.wait_free()
                finally:
                    if busy:  # on every path out: a loop cancelled while waiting too
                        health.waiting(partition, False)
                if not free:
                    return
                if mode is not Mode.IDLE:
                    # Read and claim a batch in one call, for slots reserved up front
                    # (the call returns at once, so the reservation holds no capacity
                    # idle). A backlog's batch waits up to a millisecond for half the
                    # slots: claiming each slot as it frees made batches of one or two
                    # under load, and more workers (more loops taking turns at the
                    # slots) made them smaller, each with a call's whole cost in Redis.
                    if mode is Mode.BATCH:
                        await self._slots.gather(self._enough, _PATIENCE)
                    wanted = 1 if mode is Mode.PROBE else self._settings.read_batch
                    reserved = self._slots.take_up_to(wanted)
                    if reserved is None:
                        continue
                    more, backoff = await self._claim_batch(partition, reserved, backoff)
                    mode = Mode.BATCH if more else Mode.IDLE
                    continue
                # Idle: block for an entry without reserving a slot, so every
                # partition is watched while idle partitions hold no capacity. Two
                # entries at most: one is an idle pickup, after which the loop
                # blocks again; a second says a backlog is building. With one,
                # every idle pickup was followed by a batch claim that found
                # nothing: a round trip and a script per task.
                loop = asyncio.current_task()
                assert loop is not None
                self._blocked.add(loop)
                try:
                    entries = await reader.read(_IDLE_READ)
                except RedisTasksError as exc:
                    backoff = await self._backoff("read", backoff, exc)
                    continue
                finally:
                    self._blocked.discard(loop)
                health.read_done(partition)
                backoff = 0.05
                if not entries:
                    mode = Mode.PROBE  # timed out empty: one look, in case tasks wait
                elif len(entries) >= _IDLE_READ:
                    mode = Mode.BATCH
                for entry in entries:
                    if entry.doorbell:
                        mode = Mode.BATCH
                        self._background.spawn(self.drop(entry))
                    elif (slot := self._slots.take_up_to(1)) is not None:
                        if await self._claim_read(entry, slot):
                            mode = Mode.BATCH
                    else:
                        # Other partitions filled the slots while this read was
                        # blocked: hand the entry straight back rather than hold it
                        # (another worker's blocked read may take it at once), and
                        # come back for it with a batch claim in this loop's turn at
                        # a free slot. Reading again at once would find no slot again
                        # whenever the loops in line take every slot that frees up.
                        self._background.spawn(self._requeue(entry))
                        mode = Mode.BATCH
                if entries:
                    # Let the handler just launched take its first step before this
                    # loop sends its next read or batch claim: measured 0.09 ms off
                    # an idle pickup.
                    await asyncio.sleep(0)
        finally:
            await reader.close()

    async def _claim_read(self, entry: WorkEntry, slot: SlotLease) -> bool:
        """Claim an entry the idle read returned, from the reader itself, then start it
        for ``slot`` (given back unless its run took it); whether tasks wait in the
        tenant queues (the claim saw the ring).

        The claim goes out in the same loop turn the read's reply arrived in, not
        after a task of its own was scheduled (the event tail wakes in that turn
        too, for the same create). The reader waits one round trip, which it
        would spend reading a batch.
        """
        if entry.task_id is None:
            slot.give_back()
            self._background.spawn(self.drop(entry))
            return False
        try:
            claim = await self._runs.claim(entry)
            self.claim_sizes[1] += 1
            self._runs.start_claimed([(entry, claim)], slot)
        finally:
            slot.give_back()
        return claim is not None and claim.backlog

    async def _claim_batch(
        self,
        partition: int,
        reserved: SlotLease,
        backoff: float,
        first: str | None = None,
    ) -> tuple[bool, float]:
        """Claim up to ``reserved.count`` new entries of ``partition`` and start their
        runs, each with one of the slots ``reserved`` (given back: what no run took);
        ``first``, a newcomer's task, first.

        Returns whether entries were read (the partition may have more) and the
        next read backoff.
        """
        settings = self._settings
        claimed: list[tuple[WorkEntry, Claim]] | None = None
        failure: RedisTasksError | None = None
        # No slot left here: if tasks still wait, wake a worker that has some.
        wake = self._slots.free == 0 and self._bell_due(partition)
        try:
            claimed = await self._queue.claim_next(
                partition,
                consumer=settings.name,
                count=reserved.count,
                lease=settings.lease,
                max_attempts=settings.max_attempts,
                wake=wake,
                first=first,
            )
        except RedisTasksError as exc:
            failure = exc
        else:
            self._health.read_done(partition)
            self.claim_sizes[len(claimed)] += 1
            if wake and claimed:
                # A batch that brought tasks may have rung: the next waits a block
                # period. One that brought none (the tenants it met had gone) did not
                # find work, and its doorbell is what keeps the ring being cleared.
                self._rung[partition] = asyncio.get_running_loop().time()
            self._runs.start_claimed(claimed, reserved)
        finally:
            reserved.give_back()  # on every path out, before any backoff
        if claimed is None:
            # Entries the call read before its reply was lost stay pending with
            # us and are reclaimed after a lease, like any claim that failed.
            return False, await self._backoff("read", backoff, failure)
        return bool(claimed), 0.05

    def _bell_due(self, partition: int) -> bool:
        """Whether this worker may ring ``partition``'s doorbell now: once a block
        period after a batch that brought tasks. Each doorbell wakes one blocked
        reader, which claims a batch and rings again when it fills up, so one a period
        per worker still reaches every idle worker; one per batch claim woke readers
        into small batches and cost every reader a dropped entry."""
        since = asyncio.get_running_loop().time() - self._rung.get(partition, -1e9)
        return since >= self._block.total_seconds()

    async def _requeue(self, entry: WorkEntry) -> None:
        try:
            await self._queue.requeue(entry)
        except RedisTasksError as exc:
            # Left pending with us: reclaimed after a lease, by us or another worker.
            log(
                logging.WARNING,
                "requeue failed",
                "requeue_failed",
                task=self._settings.ref(entry.task_id),
                error=type(exc).__name__,
            )

    async def drop(self, entry: WorkEntry) -> None:
        """Drop an entry that names no task of ours (a doorbell is expected; anything
        else is logged as foreign)."""
        if not entry.doorbell:
            log(
                logging.WARNING,
                "dropping a malformed work entry",
                "foreign_entry",
                partition=entry.partition,
            )
        with contextlib.suppress(RedisTasksError):
            await self._queue.drop(entry)

    async def _backoff(self, what: str, delay: float, error: BaseException | None) -> float:
        cause = error.__cause__ if error is not None else None
        log(
            logging.WARNING,
            f"Redis unavailable during {what}; retrying",
            "redis_retry",
            worker=self._settings.name,
            retry_in=round(delay, 3),
            # The class of what failed (a timeout, a lost connection, a reply the
            # client could not parse), never its message: messages quote keys.
            error=type(cause or error).__name__ if error is not None else None,
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=delay)
        return min(delay * 2, _MAX_BACKOFF)
