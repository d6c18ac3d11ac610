"""A batch claim in memory: the twin of ``lua/claim_next.lua``.

Start a newcomer's task first, read and claim the partition's new entries, then
dispatch the rest of the batch from the tenant queues and claim exactly what was
dispatched; at most one doorbell, rung at the end (:class:`~.work.Doorbell`). The
work queue runs it under its lock.
"""

from __future__ import annotations

from redis_tasks._ids import parse_task_id
from redis_tasks._lease import Claim
from redis_tasks._work_queue import WorkEntry

from .claim import claim_entry
from .dispatch import dispatch, dispatch_first
from .records import TaskRecords
from .stream import Streams
from .work import Doorbell

__all__ = ["ClaimBatch"]


class ClaimBatch:
    """One ``claim_next`` of ``consumer`` on ``partition`` (callers hold the lock)."""

    def __init__(
        self,
        records: TaskRecords,
        streams: Streams,
        poison_error: bytes,
        partition: int,
        consumer: str,
    ) -> None:
        self._records = records
        self._streams = streams
        self._poison_error = poison_error
        self._partition = partition
        self._consumer = consumer
        self._doorbell = Doorbell()
        self._out: list[tuple[WorkEntry, Claim]] = []

    def run(
        self, count: int, lease_ms: int, max_attempts: int, *, wake: bool, first: str | None
    ) -> list[tuple[WorkEntry, Claim]]:
        """Mirror of ``claim_next.lua``: what was claimed, entry by entry."""
        streams, partition = self._streams, self._partition
        if first and parse_task_id(first) == partition:
            dispatch_first(self._records, streams, partition, first)
        wanted, drained = count, False
        while wanted > 0 and not drained:
            met, drained, _ = self._read_and_claim(wanted, lease_ms, max_attempts)
            wanted -= met
        if drained:
            if wanted > 0:
                now = self._records.now()
                added = dispatch(streams, partition, wanted, now, now + lease_ms)
                # Exactly these entries come next (see claim_next.lua).
                left = len(added)
                while left > 0:
                    met, empty, last = self._read_and_claim(left, lease_ms, max_attempts)
                    if last == added[-1][0] or empty:
                        break
                    left -= met
            if wake and streams.partition(partition).tenants.ring:
                self._doorbell.due = True
        self._doorbell.ring(streams, partition)
        return self._out

    def _read_and_claim(
        self, wanted: int, lease_ms: int, max_attempts: int
    ) -> tuple[int, bool, str | None]:
        """Read up to ``wanted`` new entries and claim each: the tasks met, whether the
        stream ran out, and the last entry read."""
        streams, partition = self._streams, self._partition
        entries = streams.deliver(partition, self._consumer, wanted)
        met = 0
        for entry in entries:
            if entry.task_id is None:  # a doorbell (every entry here names a task)
                streams.drop_entry(partition, entry.entry_id)
                continue
            claim = claim_entry(
                self._records,
                streams,
                self._poison_error,
                entry.task_id,
                entry.entry_id,
                self._consumer,
                lease_ms,
                max_attempts,
                self._doorbell,
            )
            self._out.append((entry, claim))
            met += 1
        return met, len(entries) < wanted, entries[-1].entry_id if entries else None
