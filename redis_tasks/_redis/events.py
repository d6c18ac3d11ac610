"""``RedisEventPublisher``: task-ID events from the partitions' event streams."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, Final

from redis.asyncio import Redis
from redis.exceptions import NoPermissionError

from redis_tasks._cancel import cancel_and_wait
from redis_tasks._errors import BackendError, TaskNotFoundError
from redis_tasks._events import TaskEventPublisher
from redis_tasks._ids import parse_task_id

from .client import CLIENT_ERRORS
from .keys import KeySpace
from .link import Link
from .rawio import KeptConnection, entry_field, task_ids
from .shard_tail import ShardTail
from .topology import Topology
from .wire import pack

__all__ = ["RedisEventPublisher"]

logger = logging.getLogger("redis_tasks.events")

_READ_COUNT: Final = 512
_MAX_BACKOFF: Final = 5.0


class RedisEventPublisher(TaskEventPublisher):
    """Tails the partitions' event streams and fans their task IDs out in-process.

    Tailing starts with the first subscription (``XREAD BLOCK``, no consumer
    group: every process sees every event): one read over every partition on a
    standalone server. On a cluster, where a read may not span slots, hints are
    pushed on the streams' shard channels (:mod:`.shard_tail`), or, where the
    ACL refuses those, read with one blocking read per partition. :meth:`wait_ready`
    returns once the start positions are fixed, from which no event is missed
    unless a stream's MAXLEN trimmed it first. Redis failures are retried with
    backoff; a stream that moved to another node is followed there.

    A tail that meets a bug (any exception but Redis's: see
    :data:`.client.CLIENT_ERRORS`) stops, and says so once with its traceback. A
    retry would meet it again (the position it failed at does not move), and
    events are hints: this process's listeners still learn of changes by polling,
    a worker's handlers of cancellation by renewal. :meth:`wait_ready` returns then.

    ``link`` returns the manager's link as it is at each call (entering a manager
    connects, which may find a cluster and start publishing on shard channels).
    """

    def __init__(
        self,
        link: Callable[[], Link],
        keys: KeySpace,
        partitions: int,
        *,
        maxlen: int,
        stream: Callable[[int], str] | None = None,
    ) -> None:
        """``stream`` names a partition's stream: the event stream by default, the
        signal stream for a work queue's signals."""
        super().__init__()
        self._link = link
        self._stream = keys.events if stream is None else stream
        self._streams = [self._stream(p) for p in range(partitions)]
        self._maxlen = maxlen
        self._tails: list[asyncio.Task[None]] = []
        self._ready: asyncio.Event | None = None
        self._started = 0  # tails that have fixed their start positions
        self.shard_tail: ShardTail | None = None  # on a cluster, once tailing

    @property
    def _topology(self) -> Topology:
        return self._link().topology

    @property
    def _block_ms(self) -> int:
        # Block for less than the socket timeout so an idle read never times out.
        return max(1, min(1000, int(self._topology.timeout * 500)))

    async def publish_task_changed(self, task_id: str) -> None:
        """Append ``task_id`` to its partition's stream."""
        partition = parse_task_id(task_id)
        if partition is None:
            raise TaskNotFoundError()
        stream = self._stream(partition)
        fields: dict[str, str] = {"t": task_id}
        link = self._link()
        publishing = link.publishing

        async def append(client: Redis) -> None:
            entry_id = await client.xadd(
                stream,
                fields,  # type: ignore[arg-type]
                maxlen=self._maxlen,
                approximate=True,
            )
            if publishing:  # as the scripts do (see shard_tail.py)
                raw = entry_id if isinstance(entry_id, bytes) else str(entry_id).encode()
                await client.spublish(stream, b"%b %b" % (raw, task_id.encode()))

        await link.topology.execute(stream, append)

    def _on_subscribe(self) -> None:
        if self._tails:
            return
        self._ready = asyncio.Event()
        loop = asyncio.get_running_loop()
        link = self._link()
        if link.topology.is_cluster and link.publishing:
            self._tails = [
                loop.create_task(self._guarded(self._run_shard()), name="redis-tasks-event-tail")
            ]
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
            loop.create_task(
                self._guarded(self._run(streams, len(groups))), name="redis-tasks-event-tail"
            )
            for streams in groups
        ]

    async def _guarded(self, tail: Coroutine[Any, Any, None]) -> None:
        """Run ``tail``; a bug stops it, logged once with its traceback (see the class)."""
        try:
            await tail
        except Exception:
            logger.exception(
                "task event tail stopped by an unexpected error; the changes it "
                "followed reach this process by polling only"
            )
            assert self._ready is not None
            self._ready.set()  # nobody waits for a start that will not come

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
        await cancel_and_wait(tails)  # a cancellation lost in a Redis call is repeated
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
                except (BackendError, *CLIENT_ERRORS) as exc:
                    # Redis failed (a BackendError: the start positions' reads).
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
                        named = entry_field(fields, b"t")
                        if named is not None:
                            for task_id in task_ids(named):
                                self._deliver(task_id)
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
