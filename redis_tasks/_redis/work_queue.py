"""``RedisWorkQueue``: the :class:`WorkQueue` on each partition's work stream.

Work entries live in a stream per partition, read through the consumer group
``workers``: ``XREADGROUP`` delivers a new entry to one consumer, where it stays
pending until a script claims or drops it; ``XAUTOCLAIM`` takes over the entries
of crashed workers. A batch claim takes tasks straight from their tenants' queues
with no entry (a direct claim): their leases are in the partition's lease set,
scored by deadline, and a reclaim takes over those whose deadline passed.
Claims, renewals and hand-backs are scripts (``claim``, ``claim_next``,
``renew``, ``release``, ``requeue``), so the lease and the fence change
atomically with the task record.

A group that the server lost (a flush, a restart without persistence) answers
``NOGROUP``: the queue creates it again (:mod:`.work_groups`) and reports an
empty read, so a worker never has to know what a consumer group is. The manager
passes what the queue needs of it: its link (:mod:`.link`: the topology, the
script runner and the scripts' ``events`` argument), the key space and the
encoder (fences and the poison error).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Iterable
from dataclasses import replace
from datetime import timedelta
from typing import Final

from redis.asyncio import Redis

from redis_tasks._errors import BackendError, TaskNotFoundError
from redis_tasks._events import TaskEventPublisher
from redis_tasks._ids import parse_task_id
from redis_tasks._lease import INTERNAL_ERROR, Claim
from redis_tasks._record import Encoder
from redis_tasks._stats import CLAIM_FIELD_PREFIX
from redis_tasks._work_queue import QueueDepth, WorkEntry

from . import replies
from . import scripts as lua
from .consumers import delivered_unclaimed, forget_if_idle, remove_stale
from .keys import DIRECT_ENTRY, WORK_GROUP, KeySpace, TaskKeys
from .link import Link
from .queue_depth import queue_depth
from .stream_reader import StreamReader, stream_entry
from .topology import Topology
from .work_groups import ensure_groups, no_group, recreate_group

__all__ = ["RedisWorkQueue"]

#: The most entries a stopping worker hands back from its pending list (the rest, if
#: ever, are reclaimed after a lease, as before).
_SWEPT: Final = 100


def _lease_ms(lease: timedelta) -> int:
    ms = lease // timedelta(milliseconds=1)
    if ms < 1:
        raise ValueError("a lease must be at least one millisecond")
    return ms


def _hold_s(lease: timedelta) -> float:
    """How long a claim may hold the tasks it started for a lagging replica: a third
    of their lease, so a worker that counts the lease from the reply (it cannot know
    how long the claim waited) still renews well before it ends."""
    return lease.total_seconds() / 3


def _confirmed(claim: Claim, lagging: bool) -> Claim:
    """``claim`` as its call's ``WAIT`` left it: a claim that ended or started its
    task is unconfirmed when the replicas fell short (``lagging``); any other stands."""
    if lagging and replies.wrote(claim):
        return replace(claim, unconfirmed=True)
    return claim


class RedisWorkQueue:
    """The work queue of a :class:`RedisTaskManager` (see the module).

    ``link`` returns the manager's link as it is at each call (entering a manager
    connects, which may find a cluster and start publishing hints on shard channels).
    """

    def __init__(
        self,
        link: Callable[[], Link],
        keys: KeySpace,
        encoder: Encoder,
        signals: TaskEventPublisher,
    ) -> None:
        self._link = link
        self._signals = signals
        self.keys = keys
        self._encoder = encoder
        self._poison_error = encoder.error(INTERNAL_ERROR)

    @property
    def topology(self) -> Topology:
        """Where the streams live (the manager's link's)."""
        return self._link().topology

    @property
    def timeout(self) -> float:
        """Seconds one call may take."""
        return self._link().runner.timeout

    @property
    def signals(self) -> TaskEventPublisher:
        """See :attr:`~redis_tasks._work_queue.WorkQueue.signals`: the partitions'
        signal streams, tailed like the event streams."""
        return self._signals

    def _task_keys(self, task_id: str) -> TaskKeys:
        keys = self.keys.of_task(task_id)
        if keys is None:
            raise TaskNotFoundError()
        return keys

    def reader(self, partition: int, consumer: str, block: timedelta) -> StreamReader:
        """A blocking reader of ``partition``'s new entries for ``consumer``."""
        return StreamReader(
            lambda: self.topology,
            self.keys.work(partition),
            partition,
            consumer,
            block,
            timeout=self.timeout,
            recreate_group=self.recreate_group,
        )

    async def ensure_groups(self, partitions: Iterable[int], *, load_scripts: bool = False) -> None:
        """Create the ``workers`` group on each partition's work stream if it is missing
        (``load_scripts``: and load every script on every primary); see
        :func:`.work_groups.ensure_groups`."""
        await ensure_groups(
            self.topology,
            self.keys,
            partitions,
            call_timeout=self.timeout,
            load_scripts=load_scripts,
        )

    async def recreate_group(self, partition: int) -> None:
        """Create ``partition``'s group again after the server lost it (NOGROUP)."""
        await recreate_group(self.topology, self.keys, partition, self.timeout)

    async def claim(
        self, entry: WorkEntry, *, consumer: str, lease: timedelta, max_attempts: int
    ) -> Claim:
        """One ``claim`` script call for an entry a worker read or reclaimed."""
        if entry.task_id is None:
            raise TaskNotFoundError()
        keys = self._task_keys(entry.task_id)
        link = self._link()
        reply, unconfirmed = await link.runner.run_confirmed(
            lua.claim(
                task=keys.task,
                requests=keys.requests,
                issued=keys.issued,
                answers=keys.answers,
                journal=keys.journal,
                work=keys.work,
                events=keys.events,
                stats=keys.stats,
                task_id=entry.task_id,
                entry_id=entry.entry_id,
                consumer=consumer,
                lease_ms=_lease_ms(lease),
                max_attempts=max_attempts,
                poison_error=self._poison_error,
                event_opts=link.events,
            ),
            # A worker claims one entry at a time only when it was idle (or
            # reclaims): the task's start waits on this call, so it goes at once.
            batch=False,
            # A claim that ended its task wrote an outcome, confirmed like any other
            # (issue 26's history saw one rolled back). One that runs the task holds
            # it until a replica confirms (the WAIT covers the create before it; the
            # history saw workers run tasks whose create a failover took back). The
            # WAIT goes in the call's own write: a handed entry is nearly always claimed.
            wrote=replies.claim_wrote,
            hold=replies.claim_started,
            hold_s=_hold_s(lease),
            eager=True,
        )
        return _confirmed(replies.claim(reply), unconfirmed is not None)

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
        """One ``claim_next`` script call: read up to ``count`` new entries (then tasks
        dispatched from the tenant queues) and claim each; ``wake`` rings the doorbell
        for blocked workers if tasks still wait; ``first`` starts a newcomer's queued
        task first."""
        keys = self.keys
        link = self._link()
        try:
            reply, unconfirmed = await link.runner.run_confirmed(
                lua.claim_next(
                    work=keys.work(partition),
                    events=keys.events(partition),
                    stats=keys.stats(partition),
                    tag=keys.tag(partition),
                    consumer=consumer,
                    count=count,
                    lease_ms=_lease_ms(lease),
                    max_attempts=max_attempts,
                    poison_error=self._poison_error,
                    event_opts=link.events,
                    wake=int(wake),
                    first=first or "",
                    # The same in the runner's retries of this call: a retry after a
                    # lost reply is answered with what the first run leased.
                    call_id=secrets.token_hex(8),
                ),
                # The reader waits on this call for the next tasks to start: sent at
                # once, it was measured to drain 30-50 % faster than with a batch.
                batch=False,
                # See claim(): a batch that started or ended a task waits for a
                # replica, and one that started a task holds it until a replica
                # confirms, as long as the call's deadline allows; past that the
                # tasks it started run, unconfirmed (failing the whole reply left them
                # leased here, never started, for a whole lease: issue 49).
                wrote=replies.claim_batch_wrote,
                hold=replies.claim_batch_started,
                hold_s=_hold_s(lease),
            )
        except BackendError as exc:
            if not no_group(exc):
                raise
            await self.recreate_group(partition)
            return []
        lagging = unconfirmed is not None
        return [
            (WorkEntry(partition, entry_id, task_id), _confirmed(claim, lagging))
            for entry_id, task_id, claim in replies.claim_batch(reply)
        ]

    async def reclaim(
        self, partition: int, *, consumer: str, idle: timedelta, cursor: str, count: int
    ) -> tuple[str, list[WorkEntry]]:
        """The direct claims whose lease ran out (``expired_leases``, as entries
        ``DIRECT_ENTRY``), then, for the rest of ``count``, ``XAUTOCLAIM`` of entries
        idle for ``idle``; the next cursor and the entries that still exist."""
        reply = await self._link().runner.run(
            lua.expired_leases(leases=self.keys.leases(partition), count=count)
        )
        entries = [
            WorkEntry(partition, DIRECT_ENTRY, task_id)
            for task_id in replies.expired_leases(reply)
            if parse_task_id(task_id) == partition
        ]
        if len(entries) >= count:
            return cursor, entries
        stream = self.keys.work(partition)
        idle_ms = idle // timedelta(milliseconds=1)
        left = count - len(entries)
        reply = await self.topology.execute(
            stream,
            lambda client: client.xautoclaim(
                stream, WORK_GROUP, consumer, idle_ms, start_id=cursor, count=left
            ),
        )
        next_cursor = reply[0].decode() if isinstance(reply[0], bytes) else str(reply[0])
        entries += [
            stream_entry(partition, eid, fields) for eid, fields in reply[1] if fields is not None
        ]
        return next_cursor, entries

    async def renew(self, task_id: str, *, fence: int, consumer: str, lease: timedelta) -> bool:
        """One ``renew`` script call; whether cancellation was requested."""
        keys = self._task_keys(task_id)
        reply = await self._link().runner.run(
            lua.renew(
                task=keys.task,
                work=keys.work,
                task_id=task_id,
                fence=self._fence(fence),
                consumer=consumer,
                lease_ms=_lease_ms(lease),
            )
        )
        return replies.flag(reply, "renew")

    async def release(self, task_id: str, *, fence: int) -> None:
        """One ``release`` script call: the task goes back for another worker at once."""
        keys = self._task_keys(task_id)
        await self._link().runner.run(
            lua.release(task=keys.task, work=keys.work, task_id=task_id, fence=self._fence(fence))
        )

    async def park(self, task_id: str, *, fence: int) -> bool:
        """One ``park`` script call: whether the task is parked now (given back while
        it waits for its client's input); ``False`` when its round was answered
        meanwhile or cancellation was asked (the run goes on)."""
        keys = self._task_keys(task_id)
        reply = await self._link().runner.run(
            lua.park(
                task=keys.task,
                requests=keys.requests,
                work=keys.work,
                task_id=task_id,
                fence=self._fence(fence),
            )
        )
        # Not durable: a park a failover loses leaves the task leased to a run that
        # stopped, and its lease runs out as any stopped run's does.
        return replies.flag(reply, "park")

    async def requeue(self, entry: WorkEntry) -> None:
        """One ``requeue`` script call: an unclaimed delivered entry goes back to the tail."""
        if entry.task_id is None:
            await self.drop(entry)
            return
        keys = self._task_keys(entry.task_id)
        await self._link().runner.run(
            lua.requeue(
                task=keys.task, work=keys.work, task_id=entry.task_id, entry_id=entry.entry_id
            )
        )

    async def drop(self, entry: WorkEntry) -> None:
        """``XACK`` and ``XDEL`` an entry that will never run."""
        stream = self.keys.work(entry.partition)

        async def drop(client: Redis) -> None:
            await client.xack(stream, WORK_GROUP, entry.entry_id)
            await client.xdel(stream, entry.entry_id)

        await self.topology.execute(stream, drop)

    async def hand_back_unclaimed(self, partition: int, consumer: str) -> int:
        """Hand back what was delivered to ``consumer`` in ``partition`` and never
        claimed (a requeue each: a task's entry goes to the stream's end again, for
        another worker's blocked read at once; anything else is dropped); how many.

        A stopping worker cancels its blocked reads rather than wait out their block
        (up to a second); a read cancelled just as the server delivered an entry
        leaves that entry pending with it, unread. Called once the worker's runs are
        over, so nothing pending is one of them (an entry of a task handed back is no
        longer its ``wk``: requeue drops it). The common case costs one ``XPENDING``.
        """
        stream = self.keys.work(partition)
        found = await self.topology.execute(
            stream, lambda client: delivered_unclaimed(client, stream, consumer, _SWEPT)
        )
        for entry_id, fields in found:
            await self.requeue(stream_entry(partition, entry_id, fields))
        return len(found)

    async def forget_consumer(self, partition: int, consumer: str) -> None:
        """Remove ``consumer`` from the group if nothing is pending with it, and its
        last batch claim's record (no retry of it can come now)."""
        stream, stats = self.keys.work(partition), self.keys.stats(partition)

        async def forget(client: Redis) -> None:
            await forget_if_idle(client, stream, consumer)
            await client.hdel(stats, CLAIM_FIELD_PREFIX + consumer)

        await self.topology.execute(stream, forget)

    async def remove_stale_consumers(self, partition: int, *, keep: str, idle: timedelta) -> None:
        """Remove consumers other than ``keep`` with nothing pending, idle for ``idle``."""
        stream, stats = self.keys.work(partition), self.keys.stats(partition)
        idle_ms = idle // timedelta(milliseconds=1)
        await self.topology.execute(
            stream, lambda client: remove_stale(client, stream, stats, keep, idle_ms)
        )

    async def depth(self, partition: int) -> QueueDepth:
        """What ``partition`` holds, in one round trip (see :func:`.queue_depth.queue_depth`)."""
        return await queue_depth(self.topology, self.keys, partition)

    async def mark_busy(self, partitions: Iterable[int], ttl: timedelta) -> None:
        """``SET <busy> 1 PX <ttl>`` for each partition (see the protocol), each on its
        node, at once."""
        ms = max(1, ttl // timedelta(milliseconds=1))
        keys = [self.keys.busy(partition) for partition in partitions]
        topology = self.topology

        async def mark(key: str) -> None:
            await topology.execute(key, lambda client: client.set(key, b"1", px=ms))

        await asyncio.gather(*(mark(key) for key in keys))

    def _fence(self, fence: int) -> bytes:
        return self._encoder.fence(fence)
