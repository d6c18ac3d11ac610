"""A connection kept by one loop of blocking stream reads (an event tail, a worker's reader).

Checking a connection out of the pool for every blocking read, and letting
redis-py pack the command and parse the reply into dicts, cost a busy process more
than a tenth of its CPU (profiled). A :class:`KeptConnection` is taken from the
pool of the node that serves the stream, kept across reads, written to raw (see
:func:`~.pipeline.write`), and moved when the stream moves (``MOVED``).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

from redis.exceptions import MovedError, ResponseError

from .topology import TRANSIENT, Node, Topology
from .wire import write

__all__ = ["KeptConnection", "entry_field", "stream_entries", "task_ids"]


def stream_entries(reply: Any) -> list[Any]:
    """The entries of a raw one-stream ``XREAD``/``XREADGROUP`` reply (a RESP2 list or a
    RESP3 map; ``None`` when nothing came): ``[[entry id, fields], ...]``."""
    if not reply:
        return []
    (_, entries), *_ = reply.items() if isinstance(reply, dict) else reply
    return list(entries or ())


def entry_field(fields: Any, name: bytes) -> bytes | None:
    """``name``'s value in a stream entry's raw fields: a ``[k, v, ...]`` list or a map."""
    if isinstance(fields, dict):
        value: bytes | None = fields.get(name)
        return value
    for i in range(0, len(fields) - 1, 2):
        if fields[i] == name:
            found: bytes = fields[i + 1]
            return found
    return None


def task_ids(raw: bytes) -> list[str]:
    """The task IDs of an event (its entry's ``t``, or a hint line's tail): one, or the
    tasks one script call created or ended, separated by spaces."""
    return [task_id.decode("utf-8", "replace") for task_id in raw.split(b" ")]


class KeptConnection:
    """One loop's connection for blocking reads of a stream, on the node that serves it.

    :meth:`request` sends a packed command and returns its reply (raw: no
    response callbacks). An error reply leaves the connection in step; any other
    failure drops it (half a reply may be waiting on it). Either way the topology
    is told: a ``MOVED`` says where the stream lives now, a transient failure
    that the slot map may be stale.
    """

    def __init__(self) -> None:
        self._node: Node | None = None
        self._connection: Any = None

    async def request(self, topology: Topology, key: str, data: bytes, within: float) -> Any:
        """Send ``data`` on the connection for ``key``'s node; its reply within ``within`` s."""
        node = topology.node_for(key)
        if node is not self._node:
            await self.close()
            self._node = node
        if self._connection is None:
            async with asyncio.timeout(within):
                self._connection = await node.pool.get_connection()  # type: ignore[no-untyped-call]
        connection = self._connection
        try:
            async with asyncio.timeout(within):
                await write(connection, data)
                return await connection.read_response(timeout=math.inf)
        except ResponseError as exc:
            # An error reply is a whole reply: the connection is still in step.
            if isinstance(exc, MovedError):
                topology.redirected(exc)
            elif isinstance(exc, TRANSIENT):
                topology.failed()
            raise
        except BaseException as exc:
            self._connection = None
            await connection.disconnect()
            await node.pool.release(connection)
            if isinstance(exc, Exception):
                topology.failed()
            raise

    async def close(self) -> None:
        """Give the connection back to its pool."""
        connection, self._connection = self._connection, None
        if connection is not None and self._node is not None:
            await self._node.pool.release(connection)
