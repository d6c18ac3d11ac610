"""``wait_replicas="auto"``: wait for one replica on each primary that has one online.

Why: with ``wait_replicas=0`` a failover may lose a primary's last acknowledged writes
(the history checker lost 483 acknowledged creates in 100 lagging failovers), and a
fixed ``wait_replicas=1`` fails every write on a primary without a replica (a
standalone server, the embedded default, a shard whose replica died). The default waits
exactly where a replica can confirm: a confirmed write (a create, an answer, a
cancellation, an outcome) then survives its primary's loss wherever a replica exists,
and costs nothing where none does.

How: :class:`ReplicaWatch` knows, per primary (by node name), how many replicas it has
online, from ``INFO replication`` (``slaveN:...,state=online``): asked when the
manager connects and when a call first reaches a primary it has not seen (a cluster's
promoted replica). A ``WAIT`` that a primary answers with no replica makes it ask
again: if none is online the write stands (nothing could confirm it), the primary is
marked bare and its writes stop waiting, and the loss is said once (a warning and the
``redis_tasks_replicas_missing{primary}`` gauge at 1, when a replica had been seen in
this deployment); if one is online it merely lagged, and the write is unconfirmed
(:class:`~redis_tasks.ReplicationError`), as with ``wait_replicas=1``. A bare primary
is asked again at most every :data:`RECHECK_S` seconds, on its next confirmed write,
and its replica's return is said once too; so for up to that second after a replica
comes (back) online, writes there are not yet confirmed by it (the price of not asking
on every write). A user ``INFO`` is refused to cannot tell,
so such a deployment does not wait (said once, with the fix).

Cost: one ``INFO replication`` per primary at start, one per bare primary every
second while it writes, and one after each ``WAIT`` that found no replica, however many
calls want the answer at once (they share the question in flight: a burst of a thousand
answers on a bare primary asked it a thousand times, each holding a pooled connection,
and took three times as long to send); a confirmed
write on a primary with a replica pays its ``WAIT`` (one per pipeline batch, shared by
the batch's writes).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final

from redis.exceptions import NoPermissionError

from redis_tasks._telemetry.metrics import METRICS

from .client import CLIENT_ERRORS

if TYPE_CHECKING:
    from .topology import Node, Topology

__all__ = ["AUTO", "RECHECK_S", "ReplicaWatch", "online_count", "online_replicas"]

logger = logging.getLogger("redis_tasks")

#: The ``wait_replicas`` value that waits for one replica where a primary has one.
AUTO: Final = "auto"
#: How often a primary without a replica is asked again whether one came back.
RECHECK_S: Final = 1.0


def online_count(info: Mapping[str, object]) -> int:
    """The replicas an ``INFO replication`` reply (as redis-py parses it) lists online."""
    count = int(str(info.get("connected_slaves", 0) or 0))
    online = 0
    for n in range(count):
        replica = info.get(f"slave{n}")
        if isinstance(replica, dict) and replica.get("state") == "online":
            online += 1
    return online


async def online_replicas(node: Node) -> int:
    """How many replicas ``node`` has online (``INFO replication``)."""
    return online_count(await node.client.info("replication"))


class ReplicaWatch:
    """Which primaries have a replica online, for ``wait_replicas="auto"`` (see the module)."""

    __slots__ = ("_asking", "_checked", "_count", "_missing", "_refused", "_seen")

    def __init__(self) -> None:
        self._count: dict[str, int] = {}
        self._checked: dict[str, float] = {}
        #: Primaries said to have lost their replicas, until one is back.
        self._missing: set[str] = set()
        #: Whether any primary has had a replica online: only then is a bare one news.
        self._seen = False
        self._refused = False
        #: The question in flight per primary, shared by every call that wants it.
        self._asking: dict[str, asyncio.Future[int]] = {}

    async def start(self, topology: Topology) -> None:
        """Ask every primary now (the manager connects), so no first write waits on it."""
        await asyncio.gather(*(self._ask(node) for node in topology.primaries()))

    async def wants_wait(self, node: Node) -> bool:
        """Whether a confirmed write on ``node`` should send its ``WAIT``."""
        count = self._count.get(node.name)
        if count is None or (
            count == 0
            and asyncio.get_running_loop().time() - self._checked.get(node.name, 0.0) >= RECHECK_S
        ):
            count = await self._ask(node)
        return count > 0

    async def still_has_replica(self, node: Node) -> bool:
        """After a ``WAIT`` no replica answered: whether ``node`` has one online (the write
        is then unconfirmed), or not (the write stands, and ``node`` stops waiting)."""
        return await self._ask(node) > 0

    async def _ask(self, node: Node) -> int:
        """``node``'s online replicas, from the question in flight if one is (a call
        cancelled while it waits leaves the question to the others)."""
        asking = self._asking.get(node.name)
        if asking is None:
            asking = asyncio.ensure_future(self._ask_now(node))
            self._asking[node.name] = asking
            asking.add_done_callback(lambda _: self._asking.pop(node.name, None))
        return await asyncio.shield(asking)

    async def _ask_now(self, node: Node) -> int:
        name = node.name
        try:
            count = await online_replicas(node)
        except CLIENT_ERRORS as exc:
            # INFO refused (an ACL without +info), not served (an embedded stand-in) or
            # the node unreachable: a known count stands; an unknown one is none, so
            # writes there do not wait. Only a refusal is the operator's to fix.
            if isinstance(exc, NoPermissionError) and not self._refused:
                self._refused = True
                logger.warning(
                    "wait_replicas=auto cannot read INFO replication on a primary, so writes "
                    "there do not wait for a replica: grant the user +info, or set "
                    "wait_replicas explicitly",
                    extra={"event": "replicas_unknown"},
                )
            count = self._count.get(name, 0)
        self._count[name] = count
        self._checked[name] = asyncio.get_running_loop().time()
        if count > 0:
            self._seen = True
            if name in self._missing:
                self._missing.discard(name)
                METRICS.replicas_missing(name, False)
                logger.warning(
                    "primary %s has a replica online again: its confirmed writes wait for it",
                    name,
                    extra={"event": "replicas_back", "primary": name},
                )
        elif self._seen and name not in self._missing:
            self._missing.add(name)
            METRICS.replicas_missing(name, True)
            logger.warning(
                "primary %s has no replica online: its writes are no longer confirmed by one, "
                "and its loss would lose its latest acknowledged tasks",
                name,
                extra={"event": "replicas_missing", "primary": name},
            )
        return count
