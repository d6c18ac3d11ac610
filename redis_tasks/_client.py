"""Redis clients: standalone or cluster, built the same way, and cluster detection.

One place decides how the library talks to Redis: timeouts on every call,
``decode_responses=False`` (origins and payloads are bytes), bounded connection
pools, and which client class serves a URL.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final, TypeAlias

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import ResponseError
from redis.retry import Retry

from ._errors import BackendError

__all__ = ["CLIENT_ERRORS", "Client", "build_client", "is_cluster"]

#: Either kind of asyncio client; every command the library uses exists on both.
Client: TypeAlias = Redis | RedisCluster

#: What a call through a client may raise: its own errors, socket errors, timeouts
#: and, while a cluster's topology changes, errors from inside the client library
#: (seen: AttributeError on a connection disconnected under it). Every one of them
#: means "this call failed"; code that talks to Redis directly catches this.
CLIENT_ERRORS: Final = (Exception,)


def build_client(
    url: str, *, cluster: bool, timeout: float, max_connections: int, options: dict[str, Any]
) -> Client:
    """A client for ``url`` with the library's settings; ``options`` override them."""
    settings: dict[str, Any] = {
        "socket_timeout": timeout,
        "socket_connect_timeout": timeout,
        "health_check_interval": 30,
        "max_connections": max_connections,
    }
    if cluster:
        # The cluster client follows MOVED/ASK and refreshes its view of the slots
        # on failover; its retries re-send commands, which is safe because every
        # script may run again after a lost reply.
        settings["retry"] = Retry(ExponentialBackoff(cap=1.0, base=0.05), 5)
    else:
        # A lost reply is retried once by ScriptRunner, which knows what is safe.
        settings["retry"] = Retry(NoBackoff(), 0)
        # A burst of calls waits (up to the timeout) for a free connection
        # instead of failing.
        settings["timeout"] = timeout
    settings.update(options)
    settings["decode_responses"] = False
    if cluster:
        return RedisCluster.from_url(url, **settings)
    return Redis.from_pool(BlockingConnectionPool.from_url(url, **settings))


async def is_cluster(client: Redis, seconds: float) -> bool:
    """Whether the server behind ``client`` runs in cluster mode (asked within ``seconds``)."""
    try:
        async with asyncio.timeout(seconds):
            info = await client.info("cluster")
    except ResponseError:
        return False  # a server without INFO (an embedded fake) is no cluster
    except CLIENT_ERRORS as exc:
        raise BackendError("could not reach Redis") from exc
    return bool(info.get("cluster_enabled"))
