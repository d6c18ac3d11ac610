"""A worker's blocking read of one partition's work stream, and the stream entry as a
:class:`~redis_tasks._work_queue.WorkEntry`.

Why a module of its own: the read is the idle worker's one command (``XREADGROUP
... BLOCK``, on a kept connection of its own, sent as prepared bytes), and the work
queue's other calls are scripts; the queue hands each reader what it needs of it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from redis_tasks._errors import BackendError
from redis_tasks._ids import parse_task_id
from redis_tasks._work_queue import WorkEntry

from .client import backend_errors
from .keys import WORK_GROUP
from .rawio import KeptConnection, stream_entries
from .topology import Topology
from .wire import pack
from .work_groups import no_group

__all__ = ["StreamReader", "stream_entry"]


def stream_entry(partition: int, entry_id: bytes, fields: Any) -> WorkEntry:
    """A raw stream entry as a :class:`WorkEntry` (``task_id`` checked; a doorbell,
    ``d``, names no task)."""
    if not isinstance(fields, dict):  # a flat [field, value, ...] list; None once deleted
        flat = fields or []
        fields = {flat[i]: flat[i + 1] for i in range(0, len(flat) - 1, 2)}
    raw = fields.get(b"t")
    task_id = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else None
    if task_id is not None and parse_task_id(task_id) is None:
        task_id = None
    return WorkEntry(partition, entry_id.decode(), task_id, doorbell=b"d" in fields)


class StreamReader:
    """A consumer's blocking ``XREADGROUP`` on one partition, on a kept connection:
    ``topology`` says where the stream lives at each read, ``recreate_group`` makes
    the group again when the server lost it (``NOGROUP``: the read then returns no
    entry)."""

    __slots__ = (
        "_command",
        "_command_tail",
        "_kept",
        "_partition",
        "_recreate",
        "_stream",
        "_topology",
        "_within",
    )

    def __init__(
        self,
        topology: Callable[[], Topology],
        stream: str,
        partition: int,
        consumer: str,
        block: timedelta,
        *,
        timeout: float,
        recreate_group: Callable[[int], Awaitable[None]],
    ) -> None:
        self._topology = topology
        self._recreate = recreate_group
        self._partition = partition
        self._stream = stream
        block_ms = max(1, block // timedelta(milliseconds=1))
        self._within = block_ms / 1000 + timeout
        self._kept = KeptConnection()
        self._command = (b"XREADGROUP", b"GROUP", WORK_GROUP, consumer, b"COUNT")
        self._command_tail = (b"BLOCK", block_ms, b"STREAMS", stream, b">")

    async def read(self, count: int) -> list[WorkEntry]:
        """Up to ``count`` new entries, waiting up to the block time for the first."""
        command = pack([(*self._command, count, *self._command_tail)])
        try:
            with backend_errors:
                reply = await self._kept.request(
                    self._topology(), self._stream, command, self._within
                )
        except BackendError as exc:
            if not no_group(exc):
                raise
            await self._recreate(self._partition)
            return []
        return [stream_entry(self._partition, eid, fields) for eid, fields in stream_entries(reply)]

    async def close(self) -> None:
        """Give the kept connection back."""
        await self._kept.close()
