"""How much work one partition holds (:class:`~redis_tasks._work_queue.QueueDepth`),
read in one round trip: what ``inspect``'s summary and a worker's backlog gauges show."""

from __future__ import annotations

import time

from redis.asyncio import Redis

from redis_tasks._stats import QUEUED_FIELD
from redis_tasks._work_queue import QueueDepth

from .keys import WORK_GROUP, KeySpace
from .topology import Topology

__all__ = ["queue_depth"]


async def queue_depth(topology: Topology, keys: KeySpace, partition: int) -> QueueDepth:
    """``XLEN`` and the ``XPENDING`` summary of ``partition``'s stream with its lease
    set's size (the direct claims: running tasks with no work entry), its stats'
    ``queued``, the sizes of its ring and parked set, and its parked tasks not expired
    (by this host's clock), in one round trip (all O(1) but the last, O(log N)); a
    group not created yet has nothing pending."""
    stream = keys.work(partition)
    now_ms = int(time.time() * 1000)

    async def ask(client: Redis) -> QueueDepth:
        pipe = client.pipeline(transaction=False)
        pipe.xlen(stream)
        pipe.xpending(stream, WORK_GROUP)
        pipe.hget(keys.stats(partition), QUEUED_FIELD)
        pipe.zcard(keys.ring(partition))
        pipe.zcard(keys.parked(partition))
        pipe.zcount(keys.waiting(partition), f"({now_ms}", "+inf")
        pipe.zcard(keys.leases(partition))
        replies = await pipe.execute(raise_on_error=False)
        length, pending, queued, ring, parked, waiting, direct = replies
        for reply in (length, queued, ring, parked, waiting, direct):
            if isinstance(reply, Exception):
                raise reply
        count = int(direct) + (0 if isinstance(pending, Exception) else int(pending["pending"]))
        # A direct claim has no entry: counted as one delivered (entries and pending).
        entries = int(length) + int(direct)
        return QueueDepth(entries, count, int(queued or 0), int(ring) + int(parked), int(waiting))

    return await topology.execute(stream, ask)
