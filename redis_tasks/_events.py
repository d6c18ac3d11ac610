"""Task-change events: a best-effort broadcast of task IDs.

Events are hints. They carry task IDs only, may be duplicated, delayed or
lost, and polling stays authoritative: a listener that wants the task's state
looks it up through the manager, which authorizes the lookup.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from ._client import CLIENT_ERRORS
from ._errors import BackendError, TaskNotFoundError
from ._ids import parse_task_id
from ._keys import KeySpace
from ._pipeline import pack
from ._rawio import KeptConnection, entry_field
from ._shard_tail import ShardTail
from ._topology import Topology

__all__ = [
    "InMemoryEventPublisher",
    "Listener",
    "RedisEventPublisher",
    "TaskEventPublisher",
    "TaskEventRegistration",
]

logger = logging.getLogger("redis_tasks.events")

#: A listener receives one task ID per event; it may return an awaitable.
Listener = Callable[[str], Awaitable[None] | None]

_READ_COUNT: Final = 512
_MAX_BACKOFF: Final = 5.0


class TaskEventRegistration:
    """A subscription; :meth:`close` ends it and may be called any number of times."""

    __slots__ = ("_listener", "_publisher")

    def __init__(self, publisher: TaskEventPublisher, listener: Listener) -> None:
        self._publisher: TaskEventPublisher | None = publisher
        self._listener = listener

    @property
    def closed(self) -> bool:
        """Whether the registration no longer receives events."""
        return self._publisher is None

    def close(self) -> None:
        """Stop delivering events to this listener (idempotent)."""
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            publisher._remove(self)

    def __enter__(self) -> TaskEventRegistration:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class TaskEventPublisher(ABC):
    """Broadcast of task-ID hints to the listeners subscribed in this process.

    A listener that raises is logged and does not stop delivery to the others.
    """

    def __init__(self) -> None:
        self._registrations: list[TaskEventRegistration] = []
        self._pending: set[asyncio.Future[Any]] = set()

    def subscribe(self, listener: Listener) -> TaskEventRegistration:
        """Deliver every task ID this process learns of to ``listener`` until closed."""
        if not callable(listener):
            raise TypeError("listener must be callable")
        registration = TaskEventRegistration(self, listener)
        self._registrations.append(registration)
        self._on_subscribe()
        return registration

    @abstractmethod
    async def publish_task_changed(self, task_id: str) -> None:
        """Announce that ``task_id`` changed (managers do this for every durable change).

        A malformed task ID raises :class:`TaskNotFoundError`.
        """

    async def wait_ready(self) -> None:
        """Return once events published from now on will reach this process's listeners."""
        return  # in-process delivery is ready from the moment of subscribing

    async def aclose(self) -> None:
        """Stop delivering; pending asynchronous listeners are cancelled."""
        for registration in list(self._registrations):
            registration.close()
        for future in list(self._pending):
            future.cancel()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def _on_subscribe(self) -> None:
        """Hook for backends that start listening lazily."""
        return  # nothing to start for in-process delivery

    def _remove(self, registration: TaskEventRegistration) -> None:
        # Rebinding (not mutating) lets a delivery loop keep iterating its copy.
        self._registrations = [r for r in self._registrations if r is not registration]

    def _deliver(self, task_id: str) -> None:
        for registration in self._registrations:
            listener = registration._listener
            try:
                outcome = listener(task_id)
                if inspect.isawaitable(outcome):
                    future = asyncio.ensure_future(outcome)
                    self._pending.add(future)
                    future.add_done_callback(self._settled)
            except Exception:
                logger.exception("task event listener raised; other listeners still run")

    def _settled(self, future: asyncio.Future[Any]) -> None:
        self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            logger.error(
                "asynchronous task event listener raised",
                exc_info=future.exception(),
            )


class InMemoryEventPublisher(TaskEventPublisher):
    """In-process delivery for :class:`InMemoryTaskManager`.

    Delivery happens on the next event-loop turn, never inside the operation
    that made the change, so a listener may call back into the manager.
    """

    async def publish_task_changed(self, task_id: str) -> None:
        """Deliver ``task_id`` to this process's listeners."""
        if parse_task_id(task_id) is None:
            raise TaskNotFoundError()
        self.notify(task_id)

    def notify(self, task_id: str) -> None:
        """Schedule delivery of ``task_id`` (used by the manager, which is synchronous inside)."""
        if not self._registrations:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop, nobody can be listening asynchronously
        loop.call_soon(self._deliver, task_id)


class RedisEventPublisher(TaskEventPublisher):
    """Tails the partitions' event streams and fans their task IDs out in-process.

    Tailing starts with the first subscription (``XREAD BLOCK``, no consumer
    group: every process sees every event): one read over every partition on a
    standalone server. On a cluster, where a read may not span slots, hints are
    pushed on the streams' shard channels (:mod:`._shard_tail`), or, where the
    ACL refuses those, read with one blocking read per partition. :meth:`wait_ready`
    returns once the start positions are fixed, from which no event is missed
    unless a stream's MAXLEN trimmed it first. Failures are retried with
    backoff; a stream that moved to another node is followed there.
    """

    def __init__(self, topology: Topology, keys: KeySpace, partitions: int, *, maxlen: int) -> None:
        super().__init__()
        self._topology = topology
        self._keys = keys
        self._streams = [keys.events(p) for p in range(partitions)]
        self._maxlen = maxlen
        self._tails: list[asyncio.Task[None]] = []
        self._ready: asyncio.Event | None = None
        self._started = 0  # tails that have fixed their start positions
        self._publishing = False
        self.shard_tail: ShardTail | None = None  # on a cluster, once tailing

    def use(self, topology: Topology, *, publishing: bool = False) -> None:
        """Talk to ``topology`` from now on (the manager found a cluster); ``publishing``:
        this manager's scripts publish hints on the streams' shard channels too."""
        self._topology = topology
        self._publishing = publishing

    @property
    def _block_ms(self) -> int:
        # Block for less than the socket timeout so an idle read never times out.
        return max(1, min(1000, int(self._topology.timeout * 500)))

    async def publish_task_changed(self, task_id: str) -> None:
        """Append ``task_id`` to its partition's event stream."""
        partition = parse_task_id(task_id)
        if partition is None:
            raise TaskNotFoundError()
        stream = self._keys.events(partition)
        fields: dict[str, str] = {"t": task_id}
        publishing = self._publishing

        async def append(client: Redis) -> None:
            entry_id = await client.xadd(
                stream,
                fields,  # type: ignore[arg-type]
                maxlen=self._maxlen,
                approximate=True,
            )
            if publishing:  # as the scripts do (see _shard_tail.py)
                raw = entry_id if isinstance(entry_id, bytes) else str(entry_id).encode()
                await client.spublish(stream, b"%b %b" % (raw, task_id.encode()))

        await self._topology.execute(stream, append)

    def _on_subscribe(self) -> None:
        if self._tails:
            return
        self._ready = asyncio.Event()
        loop = asyncio.get_running_loop()
        if self._topology.is_cluster and self._publishing:
            self._tails = [loop.create_task(self._run_shard(), name="redis-tasks-event-tail")]
        else:
            self._tails = self._stream_tails()

    def _stream_tails(self) -> list[asyncio.Task[None]]:
        """Blocking reads of the streams: one over all of them on a standalone server,
        one per partition on a cluster (a read may not span slots)."""
        loop = asyncio.get_running_loop()
        groups = (
            [[stream] for stream in self._streams] if self._topology.is_cluster else [self._streams]
        )
        return [
            loop.create_task(self._run(streams, len(groups)), name="redis-tasks-event-tail")
            for streams in groups
        ]

    async def _run_shard(self) -> None:
        assert self._ready is not None
        self.shard_tail = ShardTail(self._topology, self._streams, self._deliver, self._ready)
        try:
            await self.shard_tail.run()
        except NoPermissionError:
            self.shard_tail = None
            logger.warning(
                "SSUBSCRIBE refused: task events are read with one blocking XREAD per "
                "partition (grant +ssubscribe and the channel pattern to save that work)"
            )
            tails = self._stream_tails()
            self._tails += tails
            await asyncio.gather(*tails)

    async def wait_ready(self) -> None:
        """Wait until the tail has fixed its start position (after a subscribe)."""
        if self._ready is not None:
            await self._ready.wait()

    async def aclose(self) -> None:
        """Stop tailing and delivering."""
        tails, self._tails = self._tails, []
        for tail in tails:
            tail.cancel()
        await asyncio.gather(*tails, return_exceptions=True)
        await super().aclose()

    async def _positions(self, streams: list[str]) -> dict[str, bytes]:
        topology = self._topology

        async def newest_of(stream: str) -> Any:
            return await topology.execute(stream, lambda client: client.xrevrange(stream, count=1))

        newest: Sequence[Any] = await asyncio.gather(*(newest_of(s) for s in streams))
        return {
            stream: (entries[0][0] if entries else b"0-0")
            for stream, entries in zip(streams, newest, strict=True)
        }

    async def _run(self, streams: list[str], tails: int) -> None:
        assert self._ready is not None
        backoff = 0.05
        positions: dict[str, bytes] | None = None
        tail = _Tail()
        try:
            while True:
                try:
                    if positions is None:
                        positions = await self._positions(streams)
                        self._started += 1
                        if self._started == tails:
                            self._ready.set()
                    replies = await tail.read(self._topology, positions, self._block_ms)
                    backoff = 0.05
                    if replies:
                        # Hints wait one loop turn: the change that woke this tail
                        # usually woke other readers of this process in the same
                        # turn (a worker's read of the new task's work entry), and
                        # they go first. Measured on an idle worker's pickup.
                        await asyncio.sleep(0)
                except asyncio.CancelledError:
                    raise
                except CLIENT_ERRORS as exc:
                    cause = exc.__cause__ if isinstance(exc, BackendError) else exc
                    logger.warning("task event tail failed (%s); retrying", type(cause).__name__)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, _MAX_BACKOFF)
                    continue
                if isinstance(replies, dict):  # RESP3 (and fakeredis) answer a map
                    replies = replies.items()
                for stream, entries in replies or ():
                    name = stream.decode() if isinstance(stream, bytes) else stream
                    for entry_id, fields in entries:
                        positions[name] = entry_id
                        task_id = entry_field(fields, b"t")
                        if task_id is not None:
                            self._deliver(task_id.decode("utf-8", "replace"))
        finally:
            await tail.close()


class _Tail:
    """One tail's blocking ``XREAD``, on a connection it keeps.

    A busy tail reads hundreds of times a second, and checking a connection out of
    the pool and parsing each reply into dicts every time cost a worker more than a
    tenth of its CPU (profiled); so the tail keeps one connection of its streams'
    node and reads raw replies. When the streams move (``MOVED``: a failover or a
    reshard), the topology learns where, and the next read goes there.
    """

    def __init__(self) -> None:
        self._kept = KeptConnection()

    async def read(self, topology: Topology, positions: dict[str, bytes], block_ms: int) -> Any:
        """New entries after ``positions``: ``[[stream, [[id, fields], ...]], ...]`` or None."""
        command = (b"XREAD", b"COUNT", _READ_COUNT, b"BLOCK", block_ms, b"STREAMS",
                   *positions, *positions.values())  # fmt: skip
        within = block_ms / 1000 + topology.timeout
        return await self._kept.request(topology, next(iter(positions)), pack([command]), within)

    async def close(self) -> None:
        """Give the connection back to the pool."""
        await self._kept.close()
