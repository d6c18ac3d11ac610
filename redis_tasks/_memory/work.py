"""The work stream's one writer in memory: the twin of ``lua/includes/work.lua``.

Every entry of a partition's stream goes in through here: a task's entry, whose ID
its record keeps as its work entry (so "in the stream" and "has an entry" are one
fact after every operation), and doorbells, at most one an operation, rung at its
end (:class:`Doorbell`): rung in the middle of a batch claim, one was read back by
that claim's read of what it dispatched, and the last task dispatched stayed
undelivered without its entry recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

from redis_tasks._record import FIELD_WORK_ENTRY

from .stream import Streams

__all__ = ["Doorbell", "add_work"]


def add_work(
    streams: Streams, partition: int, task_id: str, fields: dict[str, bytes] | None
) -> str:
    """Mirror of ``add_work``: the task's entry, its ID recorded in ``fields`` (the
    record's) when given; ``None`` when a claim in the same operation takes the
    entry (it records the entry with the lease, or drops it)."""
    entry = streams.append(partition, task_id)
    if fields is not None:
        fields[FIELD_WORK_ENTRY] = entry.encode()
    return entry


@dataclass(slots=True)
class Doorbell:
    """Mirror of a call's ``doorbell`` and ``ring_due``: asked for anywhere in an
    operation (a parked tenant back in the ring, a batch claim leaving tasks waiting
    for a worker with free slots), rung once at its end."""

    due: bool = False

    def ring(self, streams: Streams, partition: int) -> None:
        """The doorbell, if one was asked for."""
        if self.due:
            self.due = False
            streams.append(partition, "")
