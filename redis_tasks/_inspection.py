"""What ``redis-tasks inspect`` and the dashboard show: the state of the work queues
and of one task, as plain values that render as a table or as JSON.

An operator asks how deep the backlog is, what runs, which worker holds which
lease, how long pickup takes and what ended how. Most of that Redis keeps
anyway: a partition's work stream holds one entry per live task (``XLEN``), and
its consumer group the entries delivered and not finished (the pending list,
with each consumer's idle time). What it does not keep the scripts count, in one
small hash per partition (the *stats*: ``created``, the terminal statuses and
:data:`PICKUP_FIELDS`): each create adds one to ``created``, each terminal
transition one to its status, and each first claim one to the bucket of its
pickup time (enqueue to claim, both on the server's clock, so no clock skew),
one ``HINCRBY`` per batch of claims. That is the whole cost on the hot
path (``redis-tasks bench drain``, measured before and after: see the README).

Leases, statuses of running tasks and lease deadlines come from a *sample*: the
oldest ``sample`` pending entries of each partition, each looked up in its task
record by the ``inspect`` script (one atomic, read-only call per partition).
With more entries pending than that, :attr:`PartitionView.sampled` says so. Tasks
waiting in tenant queues, and the tenants, are in :mod:`._inspection_tenants`.

Nothing here carries a task's origin, payload, answers, result, status message,
endpoint or partition key: a :class:`TaskInspection` has the lease and the
bookkeeping only, and the error of a failed task by its JSON-RPC code alone.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ._inspection_tenants import PartitionTenants, TenantSummary
from ._stats import (
    PICKUP_BOUNDS_MS,
    PICKUP_FIELDS,
    TERMINAL_FIELDS,
)
from ._status import TaskStatus

__all__ = [
    "PICKUP_BOUNDS_MS",
    "PICKUP_FIELDS",
    "ConsumerView",
    "Inspection",
    "LeaseView",
    "PartitionView",
    "PickupHistogram",
    "Rates",
    "TaskInspection",
]


@dataclass(frozen=True, slots=True)
class PickupHistogram:
    """First claims by pickup time (enqueue to claim): a count per bucket of
    :data:`PICKUP_BOUNDS_MS`, the last one unbounded."""

    counts: tuple[int, ...] = (0,) * len(PICKUP_FIELDS)

    @classmethod
    def from_stats(cls, stats: Mapping[str, int]) -> PickupHistogram:
        """The histogram kept in a partition's stats hash."""
        return cls(tuple(stats.get(name, 0) for name in PICKUP_FIELDS))

    @property
    def total(self) -> int:
        """How many first claims the histogram counts."""
        return sum(self.counts)

    def __add__(self, other: PickupHistogram) -> PickupHistogram:
        return PickupHistogram(tuple(a + b for a, b in zip(self.counts, other.counts, strict=True)))

    def since(self, earlier: PickupHistogram) -> PickupHistogram:
        """The claims counted after ``earlier`` was read (counters never go down;
        a reset, such as a flushed server, reads as the whole of this one)."""
        delta = tuple(a - b for a, b in zip(self.counts, earlier.counts, strict=True))
        return self if any(d < 0 for d in delta) else PickupHistogram(delta)

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile in ms, interpolated within its bucket; ``None`` when
        empty, and the last bound when it falls in the unbounded bucket."""
        total = self.total
        if total == 0:
            return None
        rank = q * total
        seen = 0
        lower = 0.0
        for i, count in enumerate(self.counts):
            upper = float(PICKUP_BOUNDS_MS[i]) if i < len(PICKUP_BOUNDS_MS) else None
            if count and seen + count >= rank:
                if upper is None:
                    return lower
                return lower + (upper - lower) * max(rank - seen, 0) / count
            seen += count
            if upper is not None:
                lower = upper
        return lower  # pragma: no cover - rank <= total always lands in a bucket


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

    ``status`` is ``None`` (and the lease fields empty) for an entry whose task
    expired; ``remaining_ms`` is negative for a lease that ran out (its task waits
    for a reclaim). ``tenant`` is the task's tenant digest.
    """

    partition: int
    task_id: str
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


@dataclass(frozen=True, slots=True)
class Inspection:
    """Every inspected partition, with the totals an operator reads first."""

    partitions: tuple[PartitionView, ...]
    cluster: bool = False
    sample: int = 0

    @property
    def server_ms(self) -> int:
        """When this was read: the latest of the partitions' server clocks (ms)."""
        return max((p.server_ms for p in self.partitions), default=0)

    @property
    def entries(self) -> int:
        """Work entries of every partition (about the live tasks)."""
        return sum(p.entries for p in self.partitions)

    @property
    def backlog(self) -> int:
        """Tasks no worker has read yet (entries and tasks queued), all partitions."""
        return sum(p.backlog for p in self.partitions)

    @property
    def tenants(self) -> TenantSummary:
        """The tenants' figures, summed over partitions."""
        return TenantSummary(self.partitions)

    @property
    def pending(self) -> int:
        """Entries delivered and not finished, all partitions."""
        return sum(p.pending for p in self.partitions)

    @property
    def created(self) -> int:
        """Tasks created since the stats began, all partitions."""
        return sum(p.created for p in self.partitions)

    @property
    def sampled(self) -> bool:
        """Whether any partition had more pending entries than the sample read."""
        return any(p.sampled for p in self.partitions)

    @property
    def oldest_waiting_ms(self) -> int | None:
        """Age of the oldest task no worker has read, all partitions."""
        return _max(p.oldest_waiting_ms for p in self.partitions)

    @property
    def oldest_pending_ms(self) -> int | None:
        """Age of the oldest delivered entry, all partitions."""
        return _max(p.oldest_pending_ms for p in self.partitions)

    @property
    def statuses(self) -> dict[str, int]:
        """Tasks by status: the live ones by their work entries and tenant queues (the
        sampled leases tell input_required from working), the ended ones since the
        stats began."""
        input_required = sum(p.input_required for p in self.partitions)
        live = self.entries + sum(p.tenants.queued for p in self.partitions)
        live -= sum(p.expired_pending for p in self.partitions)
        counts = {
            TaskStatus.WORKING.value: max(live - input_required, 0),
            TaskStatus.INPUT_REQUIRED.value: input_required,
        }
        for name in TERMINAL_FIELDS:
            counts[name] = sum(p.ended.get(name, 0) for p in self.partitions)
        return counts

    @property
    def ended(self) -> int:
        """Terminal transitions since the stats began, all partitions."""
        return sum(sum(p.ended.values()) for p in self.partitions)

    @property
    def pickup(self) -> PickupHistogram:
        """First claims by pickup time, all partitions."""
        total = PickupHistogram()
        for p in self.partitions:
            total += p.pickup
        return total

    def consumers(self) -> list[ConsumerView]:
        """Each consumer once: its pending entries summed over partitions, its
        smallest idle time; busiest first."""
        merged: dict[str, ConsumerView] = {}
        for p in self.partitions:
            for c in p.consumers:
                seen = merged.get(c.name)
                if seen is None:
                    merged[c.name] = c
                else:
                    merged[c.name] = ConsumerView(
                        c.name, seen.pending + c.pending, min(seen.idle_ms, c.idle_ms)
                    )
        return sorted(merged.values(), key=lambda c: (-c.pending, c.idle_ms, c.name))

    def leases(self) -> list[LeaseView]:
        """Every sampled lease, the soonest to run out first (expired tasks last)."""
        found = [lease for p in self.partitions for lease in p.leases]
        return sorted(found, key=_deadline_order)

    def expiring(self, within_ms: int) -> list[LeaseView]:
        """Sampled leases that run out within ``within_ms`` (or already have)."""
        return [
            lease
            for lease in self.leases()
            if lease.remaining_ms is not None and lease.remaining_ms <= within_ms
        ]

    def to_json(
        self, *, leases: int | None = None, names: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """A JSON-ready dict: the totals, then each partition (``leases``: at most
        that many per partition, soonest deadline first). Tenants are digests, with
        the key only of those ``names`` (digest to key) has."""
        pickup = self.pickup
        return {
            "cluster": self.cluster,
            "sample": self.sample,
            "sampled": self.sampled,
            "entries": self.entries,
            "backlog": self.backlog,
            "pending": self.pending,
            "created": self.created,
            "oldest_waiting_ms": self.oldest_waiting_ms,
            "oldest_pending_ms": self.oldest_pending_ms,
            "statuses": self.statuses,
            "pickup": _pickup_json(pickup),
            "consumers": [asdict(c) for c in self.consumers()],
            "tenants": self.tenants.to_json(names),
            "partitions": [_partition_json(p, leases) for p in self.partitions],
        }


class Rates:
    """What changed between two readings: tasks created and ended per second (over
    the servers' clocks), and the pickup quantiles of the first claims in between."""

    def __init__(self, earlier: Inspection, later: Inspection) -> None:
        seconds = max(later.server_ms - earlier.server_ms, 1) / 1000
        self.created_per_s = max(later.created - earlier.created, 0) / seconds
        self.ended_per_s = max(later.ended - earlier.ended, 0) / seconds
        pickup = later.pickup.since(earlier.pickup)
        self.claims = pickup.total
        self.pickup_p50 = pickup.quantile(0.5)
        self.pickup_p99 = pickup.quantile(0.99)


def _max(values: Iterable[int | None]) -> int | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _deadline_order(lease: LeaseView) -> tuple[int, int, str]:
    if lease.remaining_ms is None:
        return (1, 0, lease.task_id)
    return (0, lease.remaining_ms, lease.task_id)


def _pickup_json(pickup: PickupHistogram) -> dict[str, Any]:
    return {
        "count": pickup.total,
        "p50_ms": pickup.quantile(0.5),
        "p99_ms": pickup.quantile(0.99),
        "buckets": dict(zip(PICKUP_FIELDS, pickup.counts, strict=True)),
    }


def _partition_json(p: PartitionView, leases: int | None) -> dict[str, Any]:
    ordered = sorted(p.leases, key=_deadline_order)
    return {
        "partition": p.partition,
        "node": p.node,
        "entries": p.entries,
        "backlog": p.backlog,
        "pending": p.pending,
        "created": p.created,
        "oldest_waiting_ms": p.oldest_waiting_ms,
        "oldest_pending_ms": p.oldest_pending_ms,
        "sampled": p.sampled,
        "input_required": p.input_required,
        "ended": dict(p.ended),
        "pickup": _pickup_json(p.pickup),
        "consumers": [asdict(c) for c in p.consumers],
        "tenants": p.tenants.to_json(),
        "leases": [asdict(lease) for lease in ordered[:leases]],
    }


@dataclass(frozen=True, slots=True)
class TaskInspection:
    """One task's bookkeeping, as an operator needs it to tell what happens to it.

    Times are ms on the server's clock. ``entry_state`` is ``"waiting"`` (no
    worker read it yet), ``"delivered"`` (pending with ``entry_consumer``),
    ``"queued"`` (in its tenant's queue, no entry yet) or ``None`` (no work entry:
    the task ended, or it is gone); ``tenant`` is its tenant's digest. Never the
    origin, payload, answers, result or status message; ``error_code`` is a failed
    task's JSON-RPC code only.
    """

    task_id: str
    partition: int
    server_ms: int
    status: str
    created_ms: int
    updated_ms: int
    expires_ms: int | None
    poll_interval_ms: int | None
    fence: int
    attempts: int
    lease_owner: str | None
    lease_deadline_ms: int | None
    cancellation_requested: bool
    input_requests: int
    error_code: int | None
    entry_id: str | None
    entry_state: str | None
    entry_consumer: str | None
    entry_idle_ms: int | None
    entry_deliveries: int | None
    tenant: str | None = None

    @property
    def lease_remaining_ms(self) -> int | None:
        """Milliseconds left on the lease (negative: it ran out); ``None`` without one."""
        if self.lease_deadline_ms is None:
            return None
        return self.lease_deadline_ms - self.server_ms

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field, and the lease's remaining time."""
        out = asdict(self)
        out["lease_remaining_ms"] = self.lease_remaining_ms
        return out


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


def pickup_bucket(ms: float) -> int:
    """The index of the pickup bucket ``ms`` falls in (as the scripts pick it)."""
    return bisect.bisect_left(PICKUP_BOUNDS_MS, ms)
