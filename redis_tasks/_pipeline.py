"""Auto-pipelining: script calls made in one event-loop turn share one round trip.

Under load many coroutines call scripts at once (a worker's handlers finishing,
pollers asking ``tasks/get``). Sent one by one, each call pays for a pool
checkout, a write, a read and a release, and redis-py's per-call overhead, not
Redis, limits throughput. :class:`AutoPipeline` queues the calls made during
one turn of the event loop and, at the end of that turn, writes them to one
connection in one packed write and reads the replies back in order, resolving
each caller's future as its reply arrives. A lone call goes out at once (one
turn later), so nothing waits for company: batching costs no latency.

Each script stays atomic on its own; a pipeline only shares the connection, so
the guarantees are exactly those of separate calls. A failed connection fails
every call of its batch that has no reply yet, with the connection error, and
the caller's retry logic applies as before.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

__all__ = ["AutoPipeline", "pack"]

#: The most calls one write carries; a larger turn is split over connections.
MAX_BATCH: Final = 128

_Call = tuple[tuple[Any, ...], "asyncio.Future[Any]"]


def pack(commands: Sequence[tuple[Any, ...]]) -> bytes:
    """RESP-encode ``commands`` (arguments: ``bytes``, ``str`` or ``int``) as one write.

    Our arguments are only ever these three types, so this is a few times faster
    than redis-py's general packer, which the per-call profile showed to matter.
    """
    parts: list[bytes] = []
    append = parts.append
    for command in commands:
        append(b"*%d\r\n" % len(command))
        for arg in command:
            kind = type(arg)  # exact types first: the common case, and the fast one
            if kind is str:
                data = arg.encode()
            elif kind is bytes:
                data = arg
            elif kind is int:
                data = b"%d" % arg
            else:
                data = _encode_subclass(arg)
            append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


def _encode_subclass(arg: object) -> bytes:
    """A subclass of ``str``, ``bytes`` or ``int`` (an enum member, say)."""
    if isinstance(arg, str):
        return arg.encode()
    if isinstance(arg, bytes):
        return bytes(arg)
    if isinstance(arg, int) and not isinstance(arg, bool):
        return b"%d" % arg
    raise TypeError(f"cannot send a {type(arg).__name__} to Redis")


class AutoPipeline:
    """Sends the commands given to :meth:`call` in the same loop turn as one pipeline."""

    def __init__(self, client: Redis, timeout: float) -> None:
        self._client = client
        self._timeout = timeout
        self._queue: list[_Call] = []
        self._scheduled = False
        # asyncio keeps only weak references to tasks: these keep the sends alive.
        self._tasks: set[asyncio.Task[None]] = set()

    def call(self, command: Sequence[Any]) -> asyncio.Future[Any]:
        """Queue ``command``; the future gets its reply (or its error reply as exception).

        Cancelling the future before the batch is written withdraws the command.
        Even a lone call waits for the end of the loop turn (and one more for its
        send to start): writing it at once from the caller's task was measured to
        cost 15 to 20 % of a worker's throughput, because every wave of callers
        woken together then paid for two writes instead of one.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queue.append((tuple(command), future))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._scheduled = False
        batch = [call for call in self._queue if not call[1].done()]
        self._queue = []
        for start in range(0, len(batch), MAX_BATCH):
            task = asyncio.ensure_future(self._send(batch[start : start + MAX_BATCH]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[_Call]) -> None:
        pool = self._client.connection_pool
        try:
            async with asyncio.timeout(self._timeout):
                connection = await pool.get_connection()  # type: ignore[no-untyped-call]
                try:
                    await connection.send_packed_command(pack([command for command, _ in batch]))
                    for _, future in batch:
                        try:
                            # The batch has one deadline (above), not one per reply.
                            reply = await connection.read_response(timeout=math.inf)
                        except ResponseError as exc:  # an error reply: that call's alone
                            if not future.done():
                                future.set_exception(exc)
                            continue
                        if not future.done():
                            future.set_result(reply)
                except BaseException:
                    # Replies left unread would answer the next user of this
                    # connection: drop it rather than return it to the pool.
                    await connection.disconnect()
                    raise
                finally:
                    await pool.release(connection)
        except BaseException as exc:
            error = exc if isinstance(exc, Exception) else RedisConnectionError("send abandoned")
            # Every call still without a reply fails (the one being read included).
            for _, future in batch:
                if not future.done():
                    future.set_exception(error)
            if not isinstance(exc, Exception):
                raise
