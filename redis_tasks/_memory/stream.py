"""One partition's work stream in memory: entry IDs, the pending list, a blocking reader.

What the in-memory work queue (:mod:`.work_queue`) keeps per partition in place
of a Redis stream and its consumer group, the stream commands it needs on it
(``XADD``, ``XACK`` with ``XDEL``, ``XREADGROUP >``, ``XCLAIM``), and the reader
that waits for new entries on an :class:`asyncio.Event` an append sets (no
polling). The reader and the script mirrors (:mod:`.claim`, :mod:`.dispatch`,
:mod:`.terminal`) reach every partition through :class:`Streams`, the queue's
view of its partitions, so none of them imports the queue.
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Final, Protocol

from redis_tasks._work_queue import WorkEntry

from .tenants import Tenants

__all__ = [
    "EntryId",
    "Partition",
    "Pending",
    "Reader",
    "Streams",
    "id_text",
    "parse_id",
    "work_entry",
]

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


def work_entry(partition: int, entry_id: EntryId, task_id: str) -> WorkEntry:
    """A stored entry as a :class:`WorkEntry` (a doorbell names no task)."""
    if task_id:
        return WorkEntry(partition, id_text(entry_id), task_id)
    return WorkEntry(partition, id_text(entry_id), None, doorbell=True)


@dataclass(slots=True)
class Pending:
    """A delivered entry nobody acknowledged yet."""

    consumer: str
    delivered_ms: int
    deliveries: int = 1


@dataclass(slots=True)
class Partition:
    """One partition's work stream and its consumer group, and its tenant queues.

    Its methods are the stream commands, on the caller's clock reading ``now``;
    callers hold the records' lock.
    """

    index: int
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
    #: Until when (ms) a saturated worker marked the partition busy (``{tag}:busy``).
    busy_until: int = 0

    def undelivered(self) -> bool:
        """Whether an entry no consumer was given yet is in the stream (tenants.lua's
        ``undelivered``)."""
        return any(entry_id in self.entries for entry_id in self.fresh)

    def append(self, task_id: str, now: int) -> str:
        """``XADD <work> * t <task_id>`` (``task_id`` "": a doorbell, ``XADD <work> * d
        1``): the new entry's ID; wakes the waiting readers."""
        ms, seq = self.last_id
        entry_id = (now, 0) if now > ms else (ms, seq + 1)
        self.last_id = entry_id
        self.entries[entry_id] = task_id
        self.fresh.append(entry_id)
        for arrived in self.waiting:
            arrived.set()
        self.waiting.clear()
        return id_text(entry_id)

    def drop(self, entry_id: EntryId) -> None:
        """``XACK`` and ``XDEL``: the entry is neither pending nor in the stream."""
        self.pending.pop(entry_id, None)
        self.entries.pop(entry_id, None)

    def deliver(self, consumer: str, count: int, now: int) -> list[WorkEntry]:
        """``XREADGROUP GROUP workers <consumer> COUNT <count> ... >`` (not blocking)."""
        out: list[WorkEntry] = []
        while self.fresh and len(out) < count:
            entry_id = self.fresh.popleft()
            task_id = self.entries.get(entry_id)
            if task_id is None:
                continue  # deleted before anyone read it
            self.pending[entry_id] = Pending(consumer, now)
            out.append(work_entry(self.index, entry_id, task_id))
        if out:
            self.consumers[consumer] = now
        return out

    def autoclaim(
        self, consumer: str, idle_ms: int, start: EntryId, count: int, now: int
    ) -> tuple[EntryId, list[WorkEntry]]:
        """``XAUTOCLAIM <work> workers <consumer> <idle_ms> <start> COUNT <count>``: the
        next cursor (``(0, 0)`` once the scan reached the end) and the entries taken
        over."""
        # Redis looks at no more than ten entries per one asked for.
        attempts, wanted = count * 10, count
        taken: list[WorkEntry] = []
        next_cursor: EntryId = (0, 0)
        for entry_id in [e for e in self.pending if e >= start]:
            if attempts == 0 or wanted == 0:
                next_cursor = entry_id
                break
            attempts -= 1
            task_id = self.entries.get(entry_id)
            if task_id is None:
                # Deleted from the stream: the pending entry goes, and counts.
                del self.pending[entry_id]
                wanted -= 1
                continue
            pending = self.pending[entry_id]
            if idle_ms and now - pending.delivered_ms < idle_ms:
                continue
            pending.consumer, pending.delivered_ms = consumer, now
            pending.deliveries += 1
            taken.append(work_entry(self.index, entry_id, task_id))
            wanted -= 1
        if taken:
            self.consumers[consumer] = now
        return next_cursor, taken

    def forget_idle(self, which: Callable[[str, int], bool]) -> None:
        """``XGROUP DELCONSUMER`` of each consumer with nothing pending that ``which``
        picks (by its name and when it was last seen)."""
        busy = {pending.consumer for pending in self.pending.values()}
        for name, seen in list(self.consumers.items()):
            if name not in busy and which(name, seen):
                del self.consumers[name]

    def take_over(self, entry: str, consumer: str, now: int) -> None:
        """``XCLAIM <work> workers <consumer> 0 <entry> JUSTID``."""
        entry_id = parse_id(entry)
        pending = self.pending.get(entry_id) if entry_id is not None else None
        if entry_id is None or pending is None:
            return
        if entry_id not in self.entries:
            del self.pending[entry_id]  # Redis 7 purges a deleted entry it meets
            return
        pending.consumer, pending.delivered_ms = consumer, now
        self.consumers[consumer] = now


class Streams(Protocol):
    """Every partition's stream, by index, under one lock: what the in-memory work
    queue offers the reader and the script mirrors (callers hold the lock, except
    to take it)."""

    @property
    def lock(self) -> threading.Lock:
        """The lock that guards the records and the streams together."""
        ...

    def partition(self, partition: int) -> Partition:
        """The partition's stream and group, created on first use (like ``MKSTREAM``)."""
        ...

    def append(self, partition: int, task_id: str) -> str:
        """``XADD`` on the partition's stream, at the records' clock: the entry's ID."""
        ...

    def drop_entry(self, partition: int, entry: str) -> None:
        """``XACK`` and ``XDEL`` of ``entry`` on the partition's stream."""
        ...

    def deliver(self, partition: int, consumer: str, count: int) -> list[WorkEntry]:
        """``XREADGROUP >`` of up to ``count`` entries for ``consumer`` (not blocking)."""
        ...


class Reader:
    """A consumer's blocking read of one partition's new entries."""

    __slots__ = ("_block", "_consumer", "_partition", "_streams")

    def __init__(self, streams: Streams, partition: int, consumer: str, block: timedelta) -> None:
        self._streams = streams
        self._partition = partition
        self._consumer = consumer
        # Like the Redis reader: at least 1 ms, since BLOCK 0 would wait forever.
        self._block = max(block, _MS).total_seconds()

    async def read(self, count: int) -> list[WorkEntry]:
        """Up to ``count`` new entries, waiting up to the block time for the first."""
        streams = self._streams
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._block
        while True:
            arrived = asyncio.Event()
            with streams.lock:
                entries = streams.deliver(self._partition, self._consumer, count)
                if entries:
                    return entries
                # Registered under the lock that appends take: an entry added
                # after the check above sets this event, so no wake-up is lost.
                waiting = streams.partition(self._partition).waiting
                waiting.add(arrived)
            try:
                async with asyncio.timeout_at(deadline):
                    await arrived.wait()
            except TimeoutError:
                return []
            finally:
                with streams.lock:
                    waiting.discard(arrived)
            # Another reader may have taken what arrived: look again until the deadline.

    async def close(self) -> None:
        """Nothing to release: the reader holds no connection."""
