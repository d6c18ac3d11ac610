"""The ``workers`` group's consumers: what a stopping worker was delivered and never
claimed, and the consumers that leave the group.

Each is one stream's commands on the client of its node, run by the work queue under
the topology's retry rule (``Topology.execute``). A consumer is removed only with
nothing pending: ``XGROUP DELCONSUMER`` drops a consumer's pending entries with it, and
a pending entry is a task some worker still has to run or hand back.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from redis_tasks._stats import CLAIM_FIELD_PREFIX

from .keys import WORK_GROUP

__all__ = ["delivered_unclaimed", "forget_if_idle", "remove_stale"]


async def delivered_unclaimed(
    client: Redis, stream: str, consumer: str, count: int
) -> list[tuple[bytes, Any]]:
    """Up to ``count`` entries pending with ``consumer``: their IDs and fields (empty
    fields for an entry deleted since)."""
    pending = await client.xpending_range(
        stream, WORK_GROUP, min="-", max="+", count=count, consumername=consumer
    )
    entries: list[tuple[bytes, Any]] = []
    for item in pending:
        entry_id = item["message_id"]
        found = await client.xrange(stream, entry_id, entry_id)
        raw = entry_id if isinstance(entry_id, bytes) else str(entry_id).encode()
        entries.append((raw, found[0][1] if found else {}))
    return entries


async def forget_if_idle(client: Redis, stream: str, consumer: str) -> None:
    """Remove ``consumer`` from the group if nothing is pending with it."""
    pending = await client.xpending_range(
        stream, WORK_GROUP, min="-", max="+", count=1, consumername=consumer
    )
    if not pending:
        await client.xgroup_delconsumer(stream, WORK_GROUP, consumer)


async def remove_stale(client: Redis, stream: str, stats: str, keep: str, idle_ms: int) -> None:
    """Remove the consumers other than ``keep`` with nothing pending, idle ``idle_ms``,
    with their last batch claim's record in the ``stats`` hash (a stopped worker's
    own stop removes its; this is for one that was killed)."""
    for consumer in await client.xinfo_consumers(stream, WORK_GROUP):
        name = consumer["name"]
        name = name.decode() if isinstance(name, bytes) else name
        if name != keep and consumer["pending"] == 0 and consumer["idle"] > idle_ms:
            await client.xgroup_delconsumer(stream, WORK_GROUP, name)
            await client.hdel(stats, CLAIM_FIELD_PREFIX + name)
