"""Event hints on a cluster: sharded pub/sub wake-ups, the streams as the record.

On a standalone server one blocking ``XREAD`` covers every partition's event
stream. A cluster refuses a read across slots, so the plain way is one blocking
read per partition and process, each re-sent after every event it returns: with
16 partitions that was 3.2 ``XREAD`` per task in a lifecycle run (0.45 on
standalone), the largest part of the cluster's extra CPU in the client, the
workers and Redis alike (profiled).

So on a cluster every script that appends a hint also publishes it, as
``"<entry id> <task id>"``, on the stream's *shard channel* (``SPUBLISH``; the
channel is named like the stream, so it lives in the same slot). A script that
ends many tasks (``finish_batch``) publishes one message of such lines: Redis
sends every ``SPUBLISH`` on to the shard's replicas as a cluster-bus message
with a header of about 2 KiB, which per task cost the primary more than the
rest of the event. A tail holds one
connection per primary, subscribed (``SSUBSCRIBE``, one command per slot) to the
channels of the partitions that primary serves; Redis pushes each hint as it is
published, many per write under load, and nothing has to be asked again.

Pub/sub loses what is published while nobody listens, so the streams stay the
record: positions are fixed before subscribing, every (re)subscription is
followed by a read of each stream from its position, and every second the
streams are read again (one pipelined write per primary). Hints seen both ways
are delivered once (by entry ID). A process that does not publish (an older
version, or a user without ``+spublish``) is thus still heard, within a second.
A failover, a slot that moved (Redis sends ``sunsubscribe``) or any Redis error
ends the subscriptions; the tail regroups the partitions by their new primaries
and subscribes again. Any other error is a bug, which a retry would repeat: it
ends the tail (:class:`~.events.RedisEventPublisher` says so once).

The cost: one ``SPUBLISH`` inside each emitting script call (1.5 us in
``commandstats``, and the bus message to each replica besides), and the ACL's
``+spublish +ssubscribe`` with the channel pattern.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import math
from collections.abc import Callable
from typing import Any, Final

from redis.exceptions import MovedError, NoPermissionError, ResponseError

from .client import CLIENT_ERRORS
from .rawio import entry_field, stream_entries, task_ids
from .topology import Node, Topology
from .wire import pack, write

__all__ = ["ShardTail"]

logger = logging.getLogger("redis_tasks.events")

#: Seconds between reads of the streams themselves (the catch-up).
CATCH_UP_EVERY: Final = 1.0
_CATCH_UP_COUNT: Final = 1000  # entries per stream per read
_SETTLE_TRIES: Final = 5  # counter checks before a stream is read...
_SETTLE_WAIT: Final = 0.02  # ...seconds apart
_MAX_BACKOFF: Final = 5.0
_REGROUP_PAUSE: Final = 0.1  # seconds between regroups that follow each other

StreamId = tuple[int, int]


def stream_id(raw: bytes) -> StreamId:
    """``b"1700000000000-3"`` as ``(1700000000000, 3)``, which orders like the stream."""
    ms, _, seq = raw.partition(b"-")
    return int(ms), int(seq or b"0")


class _Stream:
    """One partition's event stream: how far it is accounted for, and what was pushed since.

    ``position`` is an entry ID up to which every entry was delivered, and ``added``
    the stream's ``entries-added`` counter when it ended there: so the entries
    after ``position`` number ``entries-added - added``, and when the pushes since
    account for all of them, nothing has to be read. Only a writer that does not
    publish (or a push lost in a reconnect) makes the counts differ, and then the
    entries are read, once. Pushes of one stream arrive in the order of its
    entries (one connection, published in append order), so they are kept in a
    list that stays sorted.
    """

    __slots__ = ("added", "name", "position", "pushed", "since")

    def __init__(self, name: str, position: bytes, added: int) -> None:
        self.name = name
        self.position = position
        self.since = stream_id(position)
        self.added = added
        # Entries after position delivered from pushes, ascending: (ID, raw ID).
        self.pushed: list[tuple[StreamId, bytes]] = []

    def pushed_hint(self, entry_id: bytes) -> bool:
        """Record a pushed hint; whether it is new (not delivered before)."""
        key = stream_id(entry_id)
        if key <= self.since or (self.pushed and key <= self.pushed[-1][0]):
            return False
        self.pushed.append((key, entry_id))
        return True

    def settle(self, added: int, last_id: bytes) -> bool:
        """With the stream's counter ``added`` and newest ID ``last_id``: whether pushes
        account for every entry up to ``last_id`` (then the stream is accounted for)."""
        if self.added < 0:
            return False  # a read was cut short: the count after position is unknown
        arrived = bisect.bisect_right(self.pushed, stream_id(last_id), key=_first)
        if added - self.added != arrived:
            return False
        self._advance(last_id, added)
        return True

    def read(
        self,
        entries: list[Any],
        counter: tuple[int, bytes],
        deliver: Callable[[str], None],
        *,
        complete: bool,
    ) -> None:
        """Deliver what was read after ``position`` that no push delivered.

        ``counter`` is ``(entries-added, last-generated-id)`` from before the read;
        ``complete``: the read reached the end of the stream, so the stream is
        accounted for up to the last entry, and the counter there is the one read
        plus the entries appended since. A read cut short only moves the position.
        """
        added, last_id = counter
        last = stream_id(last_id)
        pushed = {raw for _, raw in self.pushed}
        newer = 0  # entries appended after the counter was read
        for entry_id, fields in entries:
            if entry_id not in pushed:
                named = entry_field(fields, b"t")
                if named is not None:
                    for task_id in task_ids(named):
                        deliver(task_id)
            if stream_id(entry_id) > last:
                newer += 1
        end = bytes(entries[-1][0]) if entries else self.position
        if complete:
            self._advance(max(end, last_id, key=stream_id), added + newer)
        else:
            self._advance(end, -1)

    def _advance(self, position: bytes, added: int) -> None:
        self.position, self.since, self.added = position, stream_id(position), added
        del self.pushed[: bisect.bisect_right(self.pushed, self.since, key=_first)]


def _first(pair: tuple[StreamId, bytes]) -> StreamId:
    return pair[0]


class _Regroup(Exception):
    """The partitions' primaries changed: subscribe again where they are now."""


class ShardTail:
    """Delivers every hint of ``streams`` to ``deliver``, on a cluster (see the module)."""

    def __init__(
        self,
        topology: Topology,
        streams: list[str],
        deliver: Callable[[str], None],
        ready: asyncio.Event,
    ) -> None:
        self._topology = topology
        self._names = streams
        self._deliver = deliver
        self._ready = ready
        #: Catch-ups made, streams that had to be read in them, subscriptions made.
        self.catch_ups = 0
        self.reads = 0
        self.subscriptions = 0

    async def run(self) -> None:
        """Until cancelled: fix positions, subscribe per primary, deliver; regroup on change.

        Raises :class:`NoPermissionError` when the ACL refuses ``SSUBSCRIBE``, and
        what is not a Redis error (a bug: retrying would repeat it).
        """
        backoff = 0.05
        streams: dict[str, _Stream] | None = None
        loop = asyncio.get_running_loop()
        regrouped = -math.inf
        while True:
            try:
                if streams is None:
                    streams = await self._positions()
                await self._subscribed(streams)
            except asyncio.CancelledError:
                raise
            except _Regroup:
                backoff = 0.05
                # Regroup at once after a move, but not in a loop while the slot map
                # is still catching up with the cluster.
                if loop.time() - regrouped < _REGROUP_PAUSE:
                    await asyncio.sleep(_REGROUP_PAUSE)
                regrouped = loop.time()
                continue
            except NoPermissionError:
                raise  # no +ssubscribe: the publisher tails the streams instead
            except CLIENT_ERRORS as exc:
                cause = exc.__cause__ or exc
                logger.warning("task event tail failed (%s); retrying", type(cause).__name__)
                self._topology.failed()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF)

    async def _positions(self) -> dict[str, _Stream]:
        """Every stream accounted for up to its newest entry: what is added from now on
        is delivered."""
        counters: dict[str, tuple[int, bytes]] = {}
        for node, names in self._topology.by_node(self._names, str):
            counters.update(zip(names, await self._counters(node, names), strict=True))
        return {name: _Stream(name, counters[name][1], counters[name][0]) for name in self._names}

    async def _counters(self, node: Node, names: list[str]) -> list[tuple[int, bytes]]:
        """``(entries-added, last-generated-id)`` of each stream (``XINFO STREAM``, one
        write to ``node``); ``(0, b"0-0")`` for a stream not created yet."""
        async with asyncio.timeout(self._topology.timeout):
            replies = await asyncio.gather(
                *(node.pipeline.call((b"XINFO", b"STREAM", name)) for name in names),
                return_exceptions=True,
            )
        counters = []
        for reply in replies:
            if isinstance(reply, MovedError):
                self._topology.redirected(reply)
                raise _Regroup from reply
            if isinstance(reply, ResponseError) and "no such key" in str(reply).lower():
                counters.append((0, b"0-0"))
                continue
            if isinstance(reply, BaseException):
                raise reply
            info = reply if isinstance(reply, dict) else dict(zip(*[iter(reply)] * 2, strict=True))
            counters.append((int(info[b"entries-added"]), bytes(info[b"last-generated-id"])))
        return counters

    async def _subscribed(self, streams: dict[str, _Stream]) -> None:
        """One subscription per primary until any of them ends; raises why it ended."""
        groups = self._topology.by_node(streams.values(), lambda stream: stream.name)
        ready = [asyncio.Event() for _ in groups]
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task[None]] = []
        connections: list[Any] = []  # the listeners' subscribed connections
        for (node, members), event in zip(groups, ready, strict=True):
            tasks.append(loop.create_task(self._listen(node, members, event, connections)))
            tasks.append(loop.create_task(self._catch_up_every(node, members, event)))

        async def all_ready() -> None:
            for event in ready:
                await event.wait()
            self._ready.set()

        announcer = loop.create_task(all_ready())
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        finally:
            await self._stop([*tasks, announcer], connections, self._topology.timeout)
        for task in done:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        raise _Regroup  # pragma: no cover - every task ends by raising

    @staticmethod
    async def _stop(tasks: list[asyncio.Task[None]], connections: list[Any], within: float) -> None:
        """Cancel a subscription's tasks and wait for them to end.

        A listener blocked in its read was seen (about once in twenty slot moves)
        to outlive its cancellation, which left the whole tail waiting for it, and
        every hint undelivered. Closing the connections ends any such read, since
        the read then fails; a task that still does not end is left behind
        (logged) rather than stopping the tail.
        """
        for task in tasks:
            task.cancel()
        _, pending = await asyncio.wait(tasks, timeout=within / 10)
        if pending:
            for connection in connections:
                await connection.disconnect(nowait=True)
            _, pending = await asyncio.wait(pending, timeout=within)
        if pending:
            logger.warning(
                "a task event listener did not stop; subscribing again without it",
                extra={"event": "listener_stuck"},
            )

    async def _listen(
        self, node: Node, members: list[_Stream], ready: asyncio.Event, connections: list[Any]
    ) -> None:
        by_channel = {stream.name.encode(): stream for stream in members}
        connection: Any = None
        try:
            async with asyncio.timeout(self._topology.timeout):
                connection = await node.pool.get_connection()  # type: ignore[no-untyped-call]
                connections.append(connection)
                # One SSUBSCRIBE per stream: one command may not span slots.
                await write(connection, pack([(b"SSUBSCRIBE", name) for name in by_channel]))
                for _ in by_channel:
                    reply = await connection.read_response(timeout=math.inf, push_request=True)
                    if not (isinstance(reply, list) and reply[:1] == [b"ssubscribe"]):
                        raise _Regroup
            self.subscriptions += 1
            # Subscribed: whatever was published before is in the streams.
            await self._catch_up(node, members)
            ready.set()
            while True:
                # RESP3 (redis-py's default) delivers pub/sub messages as pushes.
                message = await connection.read_response(timeout=math.inf, push_request=True)
                kind = message[0] if isinstance(message, list) and message else None
                if kind == b"smessage":
                    stream = by_channel.get(bytes(message[1]))
                    if stream is not None:
                        self._pushed(stream, bytes(message[2]))
                elif kind == b"sunsubscribe":
                    raise _Regroup  # the slot moved to another primary
        except MovedError as exc:
            self._topology.redirected(exc)
            raise _Regroup from exc
        finally:
            if connection is not None:
                # A subscribed connection is no use to anyone else: close it.
                await connection.disconnect()
                await node.pool.release(connection)

    def _pushed(self, stream: _Stream, message: bytes) -> None:
        """Deliver the hints of one pushed message: ``<entry id> <task ids>``, the
        IDs separated by spaces (a batch script's one event names all the tasks it
        ended); lines of such, from earlier releases, are read too."""
        for line in message.split(b"\n"):
            entry_id, _, named = line.partition(b" ")
            if named and stream.pushed_hint(entry_id):
                for task_id in task_ids(named):
                    self._deliver(task_id)

    async def _catch_up_every(
        self, node: Node, members: list[_Stream], ready: asyncio.Event
    ) -> None:
        await ready.wait()
        while True:
            await asyncio.sleep(CATCH_UP_EVERY)
            if any(self._topology.node_for(s.name) is not node for s in members):
                raise _Regroup  # learnt elsewhere (a MOVED to a script call, a refresh)
            await self._catch_up(node, members)

    async def _catch_up(self, node: Node, members: list[_Stream]) -> None:
        """Account for every stream of ``members``: settled by its counter where pushes
        delivered everything, read from its position where they did not."""
        self.catch_ups += 1
        counters = await self._counters(node, [s.name for s in members])
        pending = [
            (s, added, last_id) for s, (added, last_id) in zip(members, counters, strict=True)
        ]
        for _ in range(_SETTLE_TRIES):
            pending = [
                (s, added, last_id) for s, added, last_id in pending if not s.settle(added, last_id)
            ]
            if not pending:
                return
            # Under load the pushes of the newest entries are still on their way (sent
            # before the counter, on the other connection): give them a moment rather
            # than read every entry of the last second again.
            await asyncio.sleep(_SETTLE_WAIT)
        self.reads += len(pending)
        while pending:
            async with asyncio.timeout(self._topology.timeout):
                replies = await asyncio.gather(
                    *(
                        node.pipeline.call(
                            (b"XREAD", b"COUNT", _CATCH_UP_COUNT, b"STREAMS", s.name, s.position)
                        )
                        for s, _, _ in pending
                    ),
                    return_exceptions=True,
                )
            more = []
            for (stream, added, last_id), reply in zip(pending, replies, strict=True):
                if isinstance(reply, MovedError):
                    self._topology.redirected(reply)
                    raise _Regroup from reply
                if isinstance(reply, BaseException):
                    raise reply
                entries = stream_entries(reply)
                complete = len(entries) < _CATCH_UP_COUNT
                stream.read(entries, (added, last_id), self._deliver, complete=complete)
                if not complete:
                    # Entries past the counter read now count into it at the end.
                    more.append((stream, added + _newer_than(entries, last_id), last_id))
            pending = more


def _newer_than(entries: list[Any], last_id: bytes) -> int:
    last = stream_id(last_id)
    return sum(1 for entry_id, _ in entries if stream_id(entry_id) > last)
