"""How connections are made: one set of settings for every node, and cluster detection.

One place decides how the library talks to Redis: timeouts on every call,
``decode_responses=False`` (origins and payloads are bytes), and bounded
*blocking* pools: a burst of calls waits (within its deadline) for a free
connection instead of failing. redis-py's own retries are off everywhere, on
standalone and on a cluster alike: :mod:`.topology` retries, because it knows
what is safe (every script may run again) and keeps every retry inside the
call's one deadline.

A cluster is served with one such pool per node, made from the same settings
as the standalone pool, so both topologies behave the same.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, TypeAlias, TypeVar

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import OutOfMemoryError, RedisClusterException, RedisError, ResponseError

from redis_tasks._errors import BackendError, CapacityError
from redis_tasks._telemetry.metrics import METRICS

__all__ = [
    "CLIENT_ERRORS",
    "Client",
    "ConnectionSettings",
    "backend_errors",
    "counted",
    "is_cluster",
]

_BackendErrorT = TypeVar("_BackendErrorT", bound=BackendError)

#: Either kind of redis-py asyncio client.
Client: TypeAlias = Redis | RedisCluster

#: What a call to Redis raises when the call failed, not our code: redis-py's own
#: errors (every error reply, connection and timeout error; the cluster client's
#: stand outside ``RedisError``), and socket, TLS and timeout errors (``OSError``,
#: of which ``TimeoutError`` is one: an ``asyncio.timeout`` running out). Code that
#: talks to Redis catches only these: anything else (a ``TypeError``, a
#: ``KeyError``) is a bug, which a retry repeats, and passes as what it is.
CLIENT_ERRORS: Final = (RedisError, RedisClusterException, OSError)

# What a connection accepts; a RedisCluster's settings hold more (its pool size,
# response callbacks, ...), which a single connection must not be given.
_CONNECTION_PARAMETERS: Final = frozenset(
    name
    for cls in (AbstractConnection, Connection, SSLConnection)
    for name in inspect.signature(cls.__init__).parameters
    if name not in ("self", "args", "kwargs", "host", "port")
)


@dataclass(frozen=True)
class ConnectionSettings:
    """How every connection to every node is made.

    ``connection`` holds the keywords of ``connection_class`` (credentials, TLS,
    socket timeouts, ...) without the address; ``seeds`` are the addresses the
    caller named. ``timeout`` bounds the wait for a pooled connection too.
    """

    seeds: tuple[tuple[str, int], ...]
    connection_class: type[Connection]
    connection: dict[str, Any] = field(repr=False)
    max_connections: int
    timeout: float

    @classmethod
    def from_url(
        cls, url: str, *, timeout: float, max_connections: int, options: dict[str, Any]
    ) -> ConnectionSettings:
        """Settings for ``url`` (``redis://`` or ``rediss://``); ``options`` override them."""
        if max_connections < 1:
            raise ValueError("max_connections must be >= 1")
        parsed: dict[str, Any] = dict(parse_url(url))
        host = str(parsed.pop("host", "localhost"))
        port = int(parsed.pop("port", 6379))
        connection: dict[str, Any] = {
            "socket_timeout": timeout,
            "socket_connect_timeout": timeout,
            "health_check_interval": 30,
            # Retries belong to the topology, which keeps them inside the deadline.
            "retry": Retry(NoBackoff(), 0),
        }
        connection.update(parsed)
        options = dict(options)
        if options.pop("ssl", False):
            connection["connection_class"] = SSLConnection
        connection.update(options)
        connection["decode_responses"] = False
        connection_class = connection.pop("connection_class", Connection)
        return cls(((host, port),), connection_class, connection, max_connections, timeout)

    @classmethod
    def from_cluster_client(cls, client: RedisCluster, timeout: float) -> ConnectionSettings:
        """The settings of a ready ``RedisCluster`` (its startup nodes are the seeds)."""
        kwargs = dict(client.connection_kwargs)
        connection = {k: v for k, v in kwargs.items() if k in _CONNECTION_PARAMETERS}
        connection["retry"] = Retry(NoBackoff(), 0)
        connection["decode_responses"] = False
        seeds = tuple((node.host, int(node.port)) for node in client.startup_nodes)
        connection_class = kwargs.get("connection_class", Connection)
        max_connections = int(kwargs.get("max_connections", 256))
        return cls(seeds, connection_class, connection, max_connections, timeout)

    def pool(self, host: str, port: int) -> BlockingConnectionPool:
        """A blocking pool of up to ``max_connections`` connections to ``host:port``."""
        return BlockingConnectionPool(
            connection_class=self.connection_class,
            max_connections=self.max_connections,
            timeout=self.timeout,
            host=host,
            port=port,
            **self.connection,
        )

    def single(self, host: str, port: int) -> AbstractConnection:
        """One connection outside any pool (for a question that must not queue)."""
        return self.connection_class(host=host, port=port, **self.connection)


def counted(error: _BackendErrorT) -> _BackendErrorT:
    """``error``, counted as a Redis error (``redis_tasks_redis_errors``): every
    :class:`BackendError` the Redis backend raises is made through this, at the
    place a failure is mapped to it (the exception tree imports no metrics)."""
    METRICS.redis_error()
    return error


class _BackendErrors:
    """See :data:`backend_errors`. A class, not ``contextlib.contextmanager``: it
    wraps every script call, and one shared instance allocates nothing per call."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None or not isinstance(exc, CLIENT_ERRORS):
            return  # nothing, ours already, a cancellation or a bug: it goes on as it is
        if isinstance(exc, TimeoutError):
            raise counted(BackendError("Redis call timed out")) from exc
        if isinstance(exc, OutOfMemoryError):
            # A script's first write refused under maxmemory (noeviction): it wrote
            # nothing. Full, not down: the caller may tell its client so.
            raise CapacityError("Redis is out of memory (maxmemory): nothing was stored") from exc
        raise counted(BackendError("Redis call failed")) from exc


#: ``with backend_errors:`` is the one mapping of client failures to the exception
#: tree: a timeout or any other of :data:`CLIENT_ERRORS` becomes :class:`BackendError`
#: (cause attached, a message naming none, counted), except an out-of-memory
#: refusal, which is a :class:`CapacityError`; the library's own errors, and any
#: other exception (a bug), pass through as they are.
backend_errors: Final = _BackendErrors()


async def is_cluster(client: Redis, seconds: float) -> bool:
    """Whether the server behind ``client`` runs in cluster mode (asked within ``seconds``)."""
    try:
        async with asyncio.timeout(seconds):
            info = await client.info("cluster")
    except ResponseError:
        return False  # a server without INFO (an embedded fake) is no cluster
    except CLIENT_ERRORS as exc:
        raise counted(BackendError("could not reach Redis")) from exc
    return bool(info.get("cluster_enabled"))
