"""One partition's work queue as ``inspect`` reads it: its consumers, its sampled
leases, its counts, and the stats hash they come from.

A partition's work stream holds one entry per live task (``XLEN``), its consumer
group the entries delivered and not finished (the pending list, with each
consumer's idle time); the stats hash counts what Redis does not keep (creates,
terminal transitions by status, pickup times). Leases come from a *sample*: the
oldest pending entries, each looked up in its task record.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis_tasks._stats import TERMINAL_FIELDS
from redis_tasks._status import TaskStatus

from .pickup import PickupHistogram
from .tenants import PartitionTenants

__all__ = ["ConsumerView", "LeaseView", "PartitionView", "ended_counts", "stats_counts"]


@dataclass(frozen=True, slots=True)
class ConsumerView:
    """One consumer of a partition's work group: a worker (its ``--name`` or a
    generated one) with the entries delivered to it and not finished."""

    name: str
    pending: int
    idle_ms: int


@dataclass(frozen=True, slots=True)
class LeaseView:
    """A delivered entry and the lease on its task, as the task record has it.

    ``task`` is the task's reference (``11.Wt0jM9``: :func:`redis_tasks._ids.task_ref`),
    never its ID, which is a capability; empty for an entry that names no task.
    ``redis-tasks inspect <reference>`` finds the task. ``status`` is ``None`` (and
    the lease fields empty) for an entry whose task expired; ``remaining_ms`` is
    negative for a lease that ran out (its task waits for a reclaim). ``tenant``
    is the task's tenant digest.
    """

    partition: int
    task: str
    consumer: str
    entry_idle_ms: int
    deliveries: int
    status: str | None
    lease_owner: str | None
    fence: int
    attempt: int
    remaining_ms: int | None
    tenant: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionView:
    """One partition's work queue, read in one atomic step on its node's clock.

    ``entries`` counts the work entries of live tasks (and, until a worker meets
    them, those of tasks that expired waiting); ``pending`` those delivered to a
    consumer; ``tenants`` the tasks still in tenant queues (no entry yet) and whose
    they are; ``backlog`` the tasks no worker has read. ``created`` counts tasks
    created, ``ended`` terminal transitions by status and ``pickup`` first
    claims, all since the partition's stats began. ``leases`` holds the oldest ``sample`` pending
    entries (``sampled`` when there were more).
    """

    partition: int
    node: str
    server_ms: int
    entries: int
    pending: int
    created: int
    oldest_waiting_ms: int | None
    oldest_pending_ms: int | None
    consumers: tuple[ConsumerView, ...]
    leases: tuple[LeaseView, ...]
    sampled: bool
    ended: Mapping[str, int]
    pickup: PickupHistogram
    tenants: PartitionTenants = field(default_factory=PartitionTenants)

    @property
    def backlog(self) -> int:
        """Tasks no worker has read yet: entries not delivered, and tasks queued."""
        return max(self.entries - self.pending, 0) + self.tenants.queued

    @property
    def input_required(self) -> int:
        """Running tasks waiting for the client (among the sampled leases)."""
        return sum(1 for lease in self.leases if lease.status == TaskStatus.INPUT_REQUIRED)

    @property
    def expired_pending(self) -> int:
        """Delivered entries whose task expired (among the sampled leases)."""
        return sum(1 for lease in self.leases if lease.status is None)


def stats_counts(flat: Sequence[Any]) -> dict[str, int]:
    """A stats hash read as a flat ``[field, value, ...]`` reply, by field name."""
    out: dict[str, int] = {}
    for i in range(0, len(flat) - 1, 2):
        name = flat[i].decode() if isinstance(flat[i], bytes) else str(flat[i])
        try:
            out[name] = int(flat[i + 1])
        except (TypeError, ValueError):
            continue  # a field this library did not write
    return out


def ended_counts(stats: Mapping[str, int]) -> dict[str, int]:
    """The terminal transitions a stats hash counts, by status."""
    return {name: stats.get(name, 0) for name in TERMINAL_FIELDS}
