"""One partition's work stream in memory: entry IDs, the pending list, a blocking reader.

What the in-memory work queue (:mod:`._memory_queue`) keeps per partition in
place of a Redis stream and its consumer group, and the reader that waits for
new entries on an :class:`asyncio.Event` an append sets (no polling).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Final

from ._memory_tenants import Tenants
from ._work_queue import WorkEntry

if TYPE_CHECKING:
    from ._memory_queue import InMemoryWorkQueue

__all__ = ["EntryId", "Partition", "Pending", "Reader", "id_text", "parse_id"]

_MS: Final = timedelta(milliseconds=1)

#: A stream entry ID: (milliseconds, sequence).
EntryId = tuple[int, int]


def id_text(entry_id: EntryId) -> str:
    """``<ms>-<seq>``, as Redis writes an entry ID."""
    return f"{entry_id[0]}-{entry_id[1]}"


def parse_id(text: str) -> EntryId | None:
    """``<ms>-<seq>`` or ``<ms>`` (sequence 0), as Redis accepts a start ID."""
    ms, _, seq = text.partition("-")
    if not ms.isdigit() or not (seq.isdigit() or (seq == "" and "-" not in text)):
        return None
    return int(ms), int(seq or 0)


@dataclass(slots=True)
class Pending:
    """A delivered entry nobody acknowledged yet."""

    consumer: str
    delivered_ms: int
    deliveries: int = 1


@dataclass(slots=True)
class Partition:
    """One partition's work stream and its consumer group, and its tenant queues."""

    tenants: Tenants
    # ID -> task ID (a doorbell: ""), in ID order
    entries: dict[EntryId, str] = field(default_factory=dict)
    last_id: EntryId = (0, 0)
    # Entries above the group's last delivered ID, in ID order (some since deleted):
    # what ``XREADGROUP >`` hands out next.
    fresh: deque[EntryId] = field(default_factory=deque)
    pending: dict[EntryId, Pending] = field(default_factory=dict)
    consumers: dict[str, int] = field(default_factory=dict)  # name -> last seen (ms)
    waiting: set[asyncio.Event] = field(default_factory=set)

    def undelivered(self) -> bool:
        """Whether an entry no consumer was given yet is in the stream (tenants.lua's
        ``undelivered``)."""
        return any(entry_id in self.entries for entry_id in self.fresh)


class Reader:
    """A consumer's blocking read of one partition's new entries."""

    __slots__ = ("_block", "_consumer", "_partition", "_queue")

    def __init__(
        self, queue: InMemoryWorkQueue, partition: int, consumer: str, block: timedelta
    ) -> None:
        self._queue = queue
        self._partition = partition
        self._consumer = consumer
        # Like the Redis reader: at least 1 ms, since BLOCK 0 would wait forever.
        self._block = max(block, _MS).total_seconds()

    async def read(self, count: int) -> list[WorkEntry]:
        """Up to ``count`` new entries, waiting up to the block time for the first."""
        queue = self._queue
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._block
        while True:
            arrived = asyncio.Event()
            with queue.lock:
                entries = queue.deliver(self._partition, self._consumer, count)
                if entries:
                    return entries
                # Registered under the lock that appends take: an entry added
                # after the check above sets this event, so no wake-up is lost.
                waiting = queue.partition(self._partition).waiting
                waiting.add(arrived)
            try:
                async with asyncio.timeout_at(deadline):
                    await arrived.wait()
            except TimeoutError:
                return []
            finally:
                with queue.lock:
                    waiting.discard(arrived)
            # Another reader may have taken what arrived: look again until the deadline.

    async def close(self) -> None:
        """Nothing to release: the reader holds no connection."""
