"""Auto-pipelining: calls made in one event-loop turn share one write to their node.

Under load many coroutines call scripts at once (a worker's handlers finishing,
pollers asking ``tasks/get``). Sent one by one, each call pays for a pool
checkout, a write, a read and a release, and redis-py's per-call overhead, not
Redis, limits throughput. An :class:`AutoPipeline` serves one node (one pool):
it queues the calls made during one turn of the event loop and, at the end of
that turn, writes them to one connection in one packed write and reads the
replies back in order, resolving each caller's future as its reply arrives. A
lone call goes out one turn later, so nothing waits for company; while two
batches are on the wire, calls gather for the next (:data:`MAX_IN_FLIGHT`). On a
cluster every primary has its own, so one turn's calls go out as one write per node.

Each script stays atomic on its own; a pipeline only shares the connection, so
the guarantees are exactly those of separate calls. Two kinds of call carry a
companion command on the same connection:

- a call redirected by ``ASK`` is preceded by ``ASKING`` (which applies only to
  the next command of its connection);
- a *durable* call is followed by ``WAIT``, which confirms every earlier write of
  its connection: one ``WAIT`` closes a batch and covers all its durable calls,
  so under load the replica round trip is paid once per batch, not per call.

A batch waiting for its ``WAIT`` holds its connection until the replicas answer
(up to ``wait_timeout`` behind a replica that stalls while still *online*). At most
half the pool's connections do (:data:`WAITING_SHARE`): past that, durable calls
wait in the queue for one of those batches to end, while calls that wait for no
replica (a worker's lease renewals, reads) go on with the other half. Without the
bound, every durable batch of a burst held a connection for the whole
``wait_timeout``, and renewals queued for connections behind them.

A failed connection fails every call of its batch that has no reply yet, with
the connection error; the caller's retry logic applies as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any, Final

from redis.asyncio.connection import ConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from .client import CLIENT_ERRORS
from .wire import pack, write

__all__ = ["AutoPipeline", "Call"]

#: The most calls one write carries; a larger turn is split over connections.
MAX_BATCH: Final = 128
#: Connections a pipeline keeps between batches instead of giving them back to the
#: pool: a checkout (lock, condition, health probe, metrics hooks) cost more than
#: the write it served (profiled). Enough for the batches of a busy turn.
KEEP: Final = 4
#: Batches a pipeline has on the wire at once; calls made meanwhile wait for one to
#: come back and go out together. Under load batches grow instead of multiplying: on
#: a cluster, where each turn's calls are split over the primaries, drain went from
#: 14,600 to 15,900 jobs/s (medians of 4 interleaved rounds; 1, 4 and 8 measured
#: within noise of 2). A lone call still goes out at the end of its turn. A batch
#: whose calls have their replies and that waits only for its WAIT's answer (replicas
#: confirming) no longer counts: with wait_replicas="auto", holding the place until the
#: replica answered cost the drain 8 to 12 % more (benchmarks/wait_cost.py, issue 44).
MAX_IN_FLIGHT: Final = 2
#: The share of a pool's connections that batches waiting for their ``WAIT`` may hold
#: at once (at least one): see the module.
WAITING_SHARE: Final = 0.5
_ASKING: Final = (b"ASKING",)


class Call:
    """One queued call: its command, its future, and its companions."""

    __slots__ = ("asking", "command", "future", "wait")

    def __init__(
        self,
        command: tuple[Any, ...],
        future: asyncio.Future[Any],
        asking: bool,
        wait: tuple[Any, ...] | None,
    ) -> None:
        self.command = command
        self.future = future
        self.asking = asking
        #: ``("WAIT", n, ms)`` for a durable call: its future gets ``(reply, acked)``.
        self.wait = wait


class AutoPipeline:
    """Sends the commands given to :meth:`call` in the same loop turn as one write.

    ``timeout`` bounds each batch as a whole: the wait for a connection, the
    write and every reply.
    """

    def __init__(self, pool: ConnectionPool, timeout: float) -> None:
        self._pool = pool
        self._timeout = timeout
        self._queue: list[Call] = []
        self._since = 0.0  # when the oldest queued call was made (loop time)
        self._idle: list[Any] = []  # connections kept between batches (at most KEEP)
        self._scheduled = False
        # The batches on the wire. (asyncio keeps only weak references to tasks:
        # this also keeps the sends alive.)
        self._tasks: set[asyncio.Task[None]] = set()
        # Of those, the ones still reading their calls' replies: a batch that only
        # waits for its WAIT's answer (replicas confirming) no longer counts, so the
        # next batch goes out meanwhile instead of queueing behind the replica.
        self._in_flight = 0
        # Batches with a WAIT on the wire (each holds a connection until its WAIT is
        # answered), and how many may be (see the module).
        self._durable_out = 0
        max_connections = int(getattr(pool, "max_connections", 0) or 0)
        self._durable_cap = max(1, int(max_connections * WAITING_SHARE)) if max_connections else 0
        # Durable calls held back while the cap is reached, and when the oldest was made.
        self._held: list[Call] = []
        self._held_since = 0.0

    def call(
        self,
        command: tuple[Any, ...],
        *,
        asking: bool = False,
        wait: tuple[Any, ...] | None = None,
    ) -> asyncio.Future[Any]:
        """Queue ``command``; the future gets its reply (or its error reply as exception).

        Cancelling the future before the batch is written withdraws the command.
        Even a lone call waits for the end of the loop turn (and one more for its
        send to start): writing it at once from the caller's task was measured to
        cost 15 to 20 % of a worker's throughput, because every wave of callers
        woken together then paid for two writes instead of one.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._queue:
            self._since = loop.time()
        self._queue.append(Call(command, future, asking, wait))
        if not self._scheduled and self._in_flight < MAX_IN_FLIGHT:
            self._scheduled = True
            loop.call_soon(self._flush)
        return future

    async def call_now(
        self,
        command: tuple[Any, ...],
        *,
        asking: bool = False,
        wait: tuple[Any, ...] | None = None,
    ) -> Any:
        """Send ``command`` at once on a connection of its own and return its reply.

        For a call others wait on (a worker's claim): it does not wait for the
        end of the turn, and no other call's reply is read before its own.
        """
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        try:
            await self._send([Call(command, future, asking, wait)])
        except BaseException:
            # The caller was cancelled mid-send: nobody will ever ask this future.
            future.cancel()
            raise
        return future.result()

    async def call_then_wait(
        self,
        command: tuple[Any, ...],
        wait: tuple[Any, ...],
        needed: Callable[[Any], bool],
        *,
        asking: bool = False,
        again: Callable[[Any, int], Awaitable[bool]] | None = None,
        eager: bool = False,
    ) -> tuple[Any, int | None]:
        """:meth:`call_now`, then ``wait`` (a ``WAIT``) on the same connection only if
        ``needed(reply)``: the reply, and the replicas that confirmed it (``None``: not
        asked). The connection's own ``WAIT`` covers its write, so a reply that wrote
        nothing for replicas (a claim that found nothing) pays no replica round trip.
        ``again(reply, acked)``, after each ``WAIT`` that fell short, says whether to ask
        it once more (a claim that starts a task waits here for its replica). ``eager``
        sends the ``WAIT`` in the command's own write, for a reply that nearly always
        needs it: one round trip, not two; one that does not need it gets ``None``.
        """
        commands: list[tuple[Any, ...]] = [_ASKING, command] if asking else [command]
        if eager:
            commands.append(wait)
        async with asyncio.timeout(self._timeout):
            connection = await self._checkout()
            try:
                await write(connection, pack(commands))
                if asking:
                    # Its refusal shows in the command's own reply, read next.
                    with contextlib.suppress(ResponseError):
                        await connection.read_response(timeout=math.inf)
                try:
                    reply = await connection.read_response(timeout=math.inf)
                except ResponseError:
                    if eager:
                        await connection.read_response(timeout=math.inf)  # the WAIT's
                    raise
                acked: int | None = None
                if eager:
                    acked = int(await connection.read_response(timeout=math.inf))
                    if not needed(reply):
                        acked = None
                elif needed(reply):
                    await write(connection, pack((wait,)))
                    acked = int(await connection.read_response(timeout=math.inf))
                if acked is not None:
                    while again is not None and acked < wait[1] and await again(reply, acked):
                        await write(connection, pack((wait,)))
                        acked = int(await connection.read_response(timeout=math.inf))
            except ResponseError:
                # An error reply is read whole: the connection is in step.
                await self._keep(connection)
                raise
            except BaseException:
                # Replies left unread would answer the next user: drop it.
                await connection.disconnect()
                await self._pool.release(connection)
                raise
            await self._keep(connection)
            return reply, acked

    async def _keep(self, connection: Any) -> None:
        if len(self._idle) < KEEP:
            self._idle.append(connection)
        else:
            await self._pool.release(connection)

    def _flush(self) -> None:
        self._scheduled = False
        if self._in_flight >= MAX_IN_FLIGHT:
            return  # the batch in flight flushes the queue when its replies are in
        queue, since = self._queue, self._since
        if self._held:
            queue, since = [*self._held, *queue], min(self._held_since, since)
        self._queue, self._held = [], []
        batch = [call for call in queue if not call.future.done()]
        cap = self._durable_cap
        for start in range(0, len(batch), MAX_BATCH):
            part = batch[start : start + MAX_BATCH]
            durable = bool(cap) and any(call.wait is not None for call in part)
            if durable and self._durable_out >= cap:
                # Every connection waiting batches may hold is held: the durable calls
                # wait for one of those batches to end; the rest go now.
                if not self._held:
                    self._held_since = since
                self._held.extend(call for call in part if call.wait is not None)
                part = [call for call in part if call.wait is None]
                durable = False
                if not part:
                    continue
            if durable:
                self._durable_out += 1
            self._in_flight += 1
            task = asyncio.ensure_future(self._send(part, since, counted=True, durable=durable))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _replied(self) -> None:
        """A counted batch has its calls' replies (its WAIT's may still be coming)."""
        self._in_flight -= 1
        self._flush_soon()

    def _waited(self) -> None:
        """A batch with a WAIT ended (answered or failed): its connection is free."""
        self._durable_out -= 1
        self._flush_soon()

    def _flush_soon(self) -> None:
        if (self._queue or self._held) and not self._scheduled and self._in_flight < MAX_IN_FLIGHT:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def _send(
        self,
        batch: list[Call],
        since: float | None = None,
        *,
        counted: bool = False,
        durable: bool = False,
    ) -> None:
        pool = self._pool
        # A counted batch gives its place back once (see _in_flight): when its calls'
        # replies are in, or when it fails, whichever comes first.
        owed = [counted]

        def replied() -> None:
            if owed[0]:
                owed[0] = False
                self._replied()

        commands: list[tuple[Any, ...]] = []
        wait: tuple[Any, ...] | None = None
        for call in batch:
            if call.asking:
                commands.append(_ASKING)
            commands.append(call.command)
            if call.wait is not None:
                wait = call.wait
        if wait is not None:
            commands.append(wait)
        start = asyncio.get_running_loop().time() if since is None else since
        try:
            # The batch's deadline counts from its oldest call, which may have waited
            # for the batch before it.
            async with asyncio.timeout_at(start + self._timeout):
                connection = await self._checkout()
                try:
                    await write(connection, pack(commands))
                    await self._read_replies(connection, batch, wait is not None, replied)
                except BaseException:
                    # Replies left unread would answer the next user of this
                    # connection: drop it rather than use it again.
                    await connection.disconnect()
                    await pool.release(connection)
                    raise
                if len(self._idle) < KEEP:
                    self._idle.append(connection)
                else:
                    await pool.release(connection)
        except BaseException as exc:
            replied()
            error = exc if isinstance(exc, Exception) else RedisConnectionError("send abandoned")
            # Every call still without a reply fails (the one being read included).
            for call in batch:
                if not call.future.done():
                    call.future.set_exception(error)
            if not isinstance(exc, Exception):
                raise
        finally:
            if durable:
                self._waited()

    async def _checkout(self) -> Any:
        """A kept connection that is still sound, else one from the pool."""
        idle = self._idle
        while idle:
            connection = idle.pop()
            try:
                # Connected, at no EOF, with no stray bytes: fit for the next batch.
                if connection.is_connected and not await connection.can_read():
                    return connection
            except CLIENT_ERRORS:
                pass  # the pool's own check reconnects it on its next checkout
            await self._pool.release(connection)
        return await self._pool.get_connection()  # type: ignore[no-untyped-call]

    async def aclose(self) -> None:
        """Give the kept connections back to the pool (which may then close them)."""
        idle, self._idle = self._idle, []
        for connection in idle:
            await self._pool.release(connection)

    @staticmethod
    async def _read_replies(
        connection: Any, batch: list[Call], waits: bool, replied: Callable[[], None]
    ) -> None:
        """Read the batch's replies, and its WAIT's answer if ``waits``; ``replied()``
        once the calls' own replies are in, before the WAIT's."""
        held: list[tuple[Call, Any]] = []  # durable calls' replies, until WAIT answers
        for call in batch:
            future = call.future
            if call.asking:
                try:
                    await connection.read_response(timeout=math.inf)
                except ResponseError as exc:  # read the command's reply too, to stay in step
                    if not future.done():
                        future.set_exception(exc)
            try:
                # The batch has one deadline (the caller's), not one per reply.
                reply = await connection.read_response(timeout=math.inf)
            except ResponseError as exc:  # an error reply: that call's alone
                if not future.done():
                    future.set_exception(exc)
                continue
            if call.wait is not None:
                held.append((call, reply))
            elif not future.done():
                future.set_result(reply)
        replied()
        if waits:
            try:
                acked: Any = int(await connection.read_response(timeout=math.inf))
            except ResponseError as exc:
                acked = exc
            for call, reply in held:
                if call.future.done():
                    continue
                if isinstance(acked, Exception):
                    call.future.set_exception(acked)
                else:
                    call.future.set_result((reply, acked))
