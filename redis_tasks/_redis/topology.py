"""Where each key lives, and how one call survives redirects and failovers.

A :class:`Topology` maps a key to the :class:`Node` that serves it: the one server
of a standalone deployment, or the primary that owns the key's slot on a Redis
Cluster. Every node has its own blocking connection pool, a redis-py client over
that pool, and an :class:`~.pipeline.AutoPipeline`, so the two topologies run the
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
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final, TypeVar

from redis.asyncio import Redis
from redis.asyncio.connection import ConnectionPool
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

from .client import backend_errors
from .pipeline import AutoPipeline

__all__ = [
    "TRANSIENT",
    "CallStats",
    "Node",
    "SlotUncoveredError",
    "StandaloneTopology",
    "Topology",
    "pause_after",
]

T = TypeVar("T")
K = TypeVar("K")

_FIRST_PAUSE: Final = 0.025
_MAX_PAUSE: Final = 0.25
#: Redirects followed back to back before a call pauses like after a failure.
_REDIRECTS: Final = 8


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
