"""``ClusterTopology``: a Redis Cluster's slot map, and :func:`connect`, which picks a topology.

The map comes from ``CLUSTER SLOTS``; every ``MOVED`` patches it at once and a
failure refreshes it in the background. The retry rule every call follows is
:meth:`Topology.call`, in :mod:`.topology`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final

from redis.asyncio import Redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

from redis_tasks._cancel import cancel_and_wait
from redis_tasks._errors import BackendError

from .client import CLIENT_ERRORS, ConnectionSettings, counted, is_cluster
from .topology import Node, SlotUncoveredError, StandaloneTopology, Topology

__all__ = ["ClusterTopology", "connect"]

logger = logging.getLogger("redis_tasks")

#: Slot-map refreshes start at most this often (seconds) while failures go on.
_REFRESH_EVERY: Final = 0.1
#: How long one node may take to answer ``CLUSTER SLOTS`` before the next is asked.
_REFRESH_ASK: Final = 2.0


class ClusterTopology(Topology):
    """A Redis Cluster: a slot map of primaries, each node with its own pool.

    The map comes from ``CLUSTER SLOTS``, asked of the known primaries and then
    the seeds, each on a connection of its own (a pool busy with a burst must not
    delay the one question that may end the burst's errors). It is refreshed in
    the background after failures, at most every 100 ms, and patched at once
    from every ``MOVED``.
    """

    is_cluster = True

    def __init__(self, settings: ConnectionSettings) -> None:
        super().__init__(settings.timeout)
        self._settings = settings
        self._nodes: dict[str, Node] = {}
        self._slots: list[Node | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
        self._refreshing: asyncio.Task[None] | None = None
        self._refreshed_at = 0.0
        self._closed = False
        self._bug_told = False  # a refresh's unexpected error was logged

    def _node(self, host: str, port: int) -> Node:
        name = f"{host}:{port}"
        node = self._nodes.get(name)
        if node is None:
            pool = self._settings.pool(host, port)
            node = Node(name, pool, Redis.from_pool(pool), self.timeout)
            self._nodes[name] = node
        return node

    def node_at(self, host: str, port: int) -> Node:
        """The node at ``host:port`` (made on first use)."""
        return self._node(host, port)

    def slot(self, key: str) -> int:
        """The key's cluster slot (its hash tag's CRC16)."""
        return int(key_slot(key.encode()))

    def node_for_slot(self, slot: int) -> Node:
        """The primary that owns ``slot``, as far as this process knows."""
        node = self._slots[slot]
        if node is None:
            raise SlotUncoveredError("no node serves this slot yet")
        return node

    def primaries(self) -> list[Node]:
        """Every primary that owns at least one slot."""
        return list({id(node): node for node in self._slots if node is not None}.values())

    def moved(self, slot: int, host: str, port: int) -> None:
        """Record the new owner of ``slot``, and refresh the rest of the map soon."""
        self._slots[slot] = self._node(host, port)
        self.failed()

    def failed(self) -> None:
        """Refresh the slot map in the background, unless one ran just now."""
        if self._closed or (self._refreshing is not None and not self._refreshing.done()):
            return
        if time.monotonic() - self._refreshed_at < _REFRESH_EVERY:
            return
        self._refreshing = asyncio.get_running_loop().create_task(
            self._refresh_quietly(), name="redis-tasks-slot-map"
        )

    async def start(self) -> None:
        """Load the slot map (within twice the timeout), or raise :class:`BackendError`."""
        try:
            async with asyncio.timeout(self.timeout * 2):
                await self.refresh()
        except TimeoutError as exc:
            raise counted(BackendError("could not reach the Redis Cluster")) from exc

    async def refresh(self) -> None:
        """Ask the known primaries, then the seeds, for the slot map; take the first answer."""
        self._refreshed_at = time.monotonic()
        candidates = [node.name for node in self.primaries()]
        candidates += [f"{host}:{port}" for host, port in self._settings.seeds]
        tried: set[str] = set()
        last: BaseException | None = None
        for name in candidates:
            if name in tried:
                continue
            tried.add(name)
            host, _, port = name.rpartition(":")
            try:
                rows = await self._ask_slots(host, int(port))
            except CLIENT_ERRORS as exc:  # that node is down or busy: ask the next
                last = exc
                continue
            self._apply(rows, host)
            return
        raise counted(BackendError("no cluster node answered CLUSTER SLOTS")) from last

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except BackendError:
            return  # the calls that failed retry, and fail again, which refreshes again
        except Exception:
            # A bug, not the cluster. Refreshes go on, since they run only when calls
            # fail and a later map may not meet it, but it is told once, in full.
            if not self._bug_told:
                self._bug_told = True
                logger.exception("refreshing the cluster's slot map failed unexpectedly")

    async def _ask_slots(self, host: str, port: int) -> list[Any]:
        connection = self._settings.single(host, port)
        try:
            async with asyncio.timeout(min(self.timeout, _REFRESH_ASK)):
                await connection.connect()  # type: ignore[no-untyped-call]
                await connection.send_command("CLUSTER", "SLOTS")
                rows: list[Any] = await connection.read_response()
        finally:
            await connection.disconnect()
        return rows

    def _apply(self, rows: list[Any], asked: str) -> None:
        slots: list[Node | None] = [None] * REDIS_CLUSTER_HASH_SLOTS
        for row in rows:
            first, last, primary = int(row[0]), int(row[1]), row[2]
            host = primary[0].decode() if isinstance(primary[0], bytes) else str(primary[0])
            if host in ("", "?"):
                host = asked  # "the address you reached me at"
            node = self._node(host, int(primary[1]))
            slots[first : last + 1] = [node] * (last - first + 1)
        self._slots = slots

    async def aclose(self) -> None:
        """Stop refreshing and close every node's pool."""
        self._closed = True
        if self._refreshing is not None:
            # Its CLUSTER SLOTS may lose a cancellation (redis_tasks._cancel).
            await cancel_and_wait([self._refreshing])
        for node in self._nodes.values():
            await node.pipeline.aclose()
            await node.client.aclose()  # and its pool


async def connect(settings: ConnectionSettings, cluster: bool | None) -> Topology:
    """The topology behind ``settings``' first seed; ``cluster=None`` asks the server."""
    host, port = settings.seeds[0]
    if cluster is not True:
        client = Redis.from_pool(settings.pool(host, port))
        if cluster is False or not await is_cluster(client, settings.timeout):
            return StandaloneTopology(client, settings.timeout, owned=True)
        await client.aclose()
    topology = ClusterTopology(settings)
    await topology.start()
    return topology
