"""Every inspected partition together: the totals an operator reads first, the rates
between two readings, and the JSON of it all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from redis_tasks._stats import PICKUP_FIELDS, TERMINAL_FIELDS
from redis_tasks._status import TaskStatus

from .partition import ConsumerView, LeaseView, PartitionView
from .pickup import PickupHistogram
from .tenants import TenantSummary

__all__ = ["Inspection", "Rates"]


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
        return (1, 0, lease.task)
    return (0, lease.remaining_ms, lease.task)


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
