"""Where each key lives, and how one call survives redirects and failovers.

A :class:`Topology` maps a key to the :class:`Node` that serves it: the one server
of a standalone deployment, or the primary that owns the key's slot on a Redis
Cluster. Every node has its own blocking connection pool, a redis-py client over
that pool, and an :class:`~._pipeline.AutoPipeline`, so the two topologies run the
same code: the cluster is the standalone path once per primary.

Why not redis-py's ``RedisCluster``? Its node pools raise ``MaxConnectionsError``
instead of waiting (a burst of 5,000 calls failed two thirds of them), it has no
auto-pipelining, and its retries are not bounded by one deadline. What this
module costs instead is its own slot map: ``CLUSTER SLOTS``, asked of any node,
and patched from ``MOVED`` replies.

:meth:`Topology.call` is the one retry rule. Within the call's deadline it:

- follows ``MOVED`` at once (the slot's new owner is recorded, and the whole map
  refreshed in the background: a move seldom comes alone);
- follows ``ASK`` at once, with ``ASKING`` on the same connection;
- after ``TRYAGAIN`` (a slot migrating), ``CLUSTERDOWN``/``MASTERDOWN`` (a failover
  under way), a replica that says ``READONLY``, ``LOADING``, or a broken or refused
  connection, refreshes the slot map and tries again after a backoff (25 ms,
  doubling to 250 ms).

Every script is safe to run again after a lost reply, so a retry never does
harm; the deadline is what bounds a call, never a count of attempts.
"""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from redis.asyncio import Redis
from redis.asyncio.connection import ConnectionPool
from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot
from redis.exceptions import (
    AskError,
    AuthenticationError,
    AuthorizationError,
    ClusterDownError,
    MovedError,
    ReadOnlyError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from redis_tasks._errors import BackendError

from .client import ConnectionSettings, backend_errors, is_cluster
from .pipeline import AutoPipeline

__all__ = [
    "TRANSIENT",
    "CallStats",
    "ClusterTopology",
    "Node",
    "SlotUncoveredError",
    "StandaloneTopology",
    "Topology",
    "connect",
    "pause_after",
]

T = TypeVar("T")
K = TypeVar("K")

_FIRST_PAUSE: Final = 0.025
_MAX_PAUSE: Final = 0.25
#: Redirects followed back to back before a call pauses like after a failure.
_REDIRECTS: Final = 8
#: Slot-map refreshes start at most this often (seconds) while failures go on.
_REFRESH_EVERY: Final = 0.1
#: How long one node may take to answer ``CLUSTER SLOTS`` before the next is asked.
_REFRESH_ASK: Final = 2.0


class SlotUncoveredError(RedisConnectionError):
    """No known node serves the slot (yet): retried like a refused connection."""


#: Failures after which the same call, made again a little later, may succeed.
TRANSIENT: Final = (
    TryAgainError,
    ClusterDownError,  # and MasterDownError
    ReadOnlyError,
    RedisConnectionError,  # and BusyLoadingError (LOADING), SlotUncoveredError
    RedisTimeoutError,
    OSError,
)
# ... except these, which no retry can fix.
_PERMANENT: Final = (AuthenticationError, AuthorizationError)


def pause_after(failures: int) -> float:
    """The backoff before retry number ``failures`` (1, 2, ...)."""
    return float(min(_FIRST_PAUSE * 2 ** (failures - 1), _MAX_PAUSE))


class Node:
    """One server the library sends commands to: its pool, a client, its pipeline."""

    __slots__ = ("client", "name", "pipeline", "pool")

    def __init__(self, name: str, pool: ConnectionPool, client: Redis, timeout: float) -> None:
        self.name = name
        self.pool = pool
        #: A redis-py client over :attr:`pool`, for commands other than scripts.
        self.client = client
        self.pipeline = AutoPipeline(pool, timeout)

    def __repr__(self) -> str:
        return f"Node({self.name})"


@dataclass
class CallStats:
    """What :meth:`Topology.call` had to do beyond the first attempt, since start."""

    moved: int = 0  # MOVED redirects followed
    asked: int = 0  # ASK redirects followed
    retried: int = 0  # retries after a transient failure


class Topology(ABC):
    """The nodes behind a manager and the rule for one call's retries."""

    is_cluster: bool = False

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.stats = CallStats()

    @abstractmethod
    def node_for_slot(self, slot: int) -> Node:
        """The node that serves ``slot`` now (raises :class:`SlotUncoveredError`)."""

    @abstractmethod
    def slot(self, key: str) -> int:
        """The slot of ``key`` (always 0 on a standalone server)."""

    @abstractmethod
    def primaries(self) -> list[Node]:
        """Every primary that serves slots (the one node on a standalone server)."""

    @abstractmethod
    def node_at(self, host: str, port: int) -> Node:
        """The node at ``host:port`` (made on first use)."""

    def moved(self, slot: int, host: str, port: int) -> None:
        """``MOVED``: ``slot`` is served at ``host:port`` from now on."""
        return  # a standalone server never redirects

    def redirected(self, exc: MovedError) -> None:
        """Learn from a ``MOVED`` reply where its slot is served now."""
        self.moved(exc.slot_id, exc.host, int(exc.port))

    def failed(self) -> None:
        """A call failed in a way a stale slot map may explain."""
        return  # nothing to learn on a standalone server

    async def start(self) -> None:
        """Learn what is needed before the first call."""
        return  # a standalone server needs nothing

    @abstractmethod
    async def aclose(self) -> None:
        """Close every node's connections."""

    def node_for(self, key: str) -> Node:
        """The node that serves ``key`` now."""
        return self.node_for_slot(self.slot(key))

    def by_node(self, items: Iterable[K], key: Callable[[K], str]) -> list[tuple[Node, list[K]]]:
        """``items`` grouped by the node that serves ``key(item)`` now, in order."""
        groups: dict[str, tuple[Node, list[K]]] = {}
        for item in items:
            node = self.node_for(key(item))
            groups.setdefault(node.name, (node, []))[1].append(item)
        return list(groups.values())

    async def call(
        self,
        slot: int,
        attempt: Callable[[Node, bool], Awaitable[T]],
        *,
        deadline: float,
        timed: bool = True,
    ) -> T:
        """``attempt(node, asking)`` on ``slot``'s node, redirected and retried until
        ``deadline`` (event-loop time) as the module docstring says.

        ``timed=False`` runs the first attempt without a timer of its own: for an
        auto-pipelined call, whose batch already has one. Raises the last error.
        """
        loop = asyncio.get_running_loop()
        asking: Node | None = None
        failures = redirects = 0
        while True:
            try:
                node = asking if asking is not None else self.node_for_slot(slot)
                if not timed:
                    return await attempt(node, asking is not None)
                async with asyncio.timeout_at(deadline):
                    return await attempt(node, asking is not None)
            except MovedError as exc:
                self.stats.moved += 1
                self.redirected(exc)
                asking = None
                redirects += 1
                pause = 0.0 if redirects <= _REDIRECTS else pause_after(redirects - _REDIRECTS)
                if pause:
                    self.failed()
                error: BaseException = exc
            except AskError as exc:
                self.stats.asked += 1
                asking = self.node_at(exc.host, int(exc.port))
                redirects += 1
                pause = 0.0 if redirects <= _REDIRECTS else pause_after(redirects - _REDIRECTS)
                error = exc
            except _PERMANENT:
                raise
            except TRANSIENT as exc:
                self.stats.retried += 1
                asking = None
                failures += 1
                self.failed()
                pause = pause_after(failures)
                error = exc
            timed = True
            if loop.time() + pause >= deadline:
                raise error
            if pause:
                await asyncio.sleep(pause)

    async def execute(
        self, key: str, command: Callable[[Redis], Awaitable[T]], *, within: float | None = None
    ) -> T:
        """Run ``command(client)`` with the client of ``key``'s node, under the one retry
        rule and a deadline of ``within`` seconds (default: the topology's timeout);
        failures raise :class:`BackendError` with the cause attached.

        For commands other than scripts (stream reads, group set-up). An ``ASK`` is
        followed by retrying after the migration, since ``ASKING`` cannot be put
        in front of a redis-py command on the same connection: such commands are
        few, and a slot migrates in moments.
        """
        loop = asyncio.get_running_loop()
        deadline = loop.time() + (self.timeout if within is None else within)

        async def attempt(node: Node, asking: bool) -> T:
            if asking:
                raise TryAgainError("ASK redirect: retried after the migration")
            return await command(node.client)

        with backend_errors:
            return await self.call(self.slot(key), attempt, deadline=deadline)


class StandaloneTopology(Topology):
    """One server serves every key."""

    def __init__(self, client: Redis, timeout: float, *, owned: bool) -> None:
        super().__init__(timeout)
        self._owned = owned
        kwargs = client.connection_pool.connection_kwargs
        name = f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
        self._node = Node(name, client.connection_pool, client, timeout)

    @property
    def client(self) -> Redis:
        """The server's client."""
        return self._node.client

    def node_for_slot(self, slot: int) -> Node:
        """The one node."""
        return self._node

    def slot(self, key: str) -> int:
        """0: a standalone server has no slots."""
        return 0

    def node_for(self, key: str) -> Node:
        """The one node."""
        return self._node

    def primaries(self) -> list[Node]:
        """The one node."""
        return [self._node]

    def node_at(self, host: str, port: int) -> Node:
        """The one node (a standalone server never redirects)."""
        return self._node

    async def aclose(self) -> None:
        """Close the client if the topology made it."""
        await self._node.pipeline.aclose()
        if self._owned:
            await self._node.client.aclose()


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
            raise BackendError("could not reach the Redis Cluster") from exc

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
            except Exception as exc:  # that node is down or busy: ask the next
                last = exc
                continue
            self._apply(rows, host)
            return
        raise BackendError("no cluster node answered CLUSTER SLOTS") from last

    async def _refresh_quietly(self) -> None:
        try:
            await self.refresh()
        except BackendError:
            return  # the calls that failed retry, and fail again, which refreshes again

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
            self._refreshing.cancel()
            await asyncio.gather(self._refreshing, return_exceptions=True)
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
