"""Tenants in ``redis-tasks inspect`` and the dashboard: who waits, who runs, who was refused.

With fair dispatch a task that cannot start at once waits in its tenant's queue
(a list per tenant and partition), and the tenants with tasks waiting form the
partition's ring, or its parked set while at their concurrency cap
(:mod:`redis_tasks._tenancy`). The ``inspect_queue`` script counts both sets and
reads up to ``sample`` of their tenants (the ring's next ones first), each with
its queue's length and the age of its oldest task; the stats hash counts the
tasks queued, the claims deferred by a cap and the creates refused by reason.
Who runs comes from the sampled leases: each task record names its tenant.

A tenant is shown by its digest, the only thing Redis holds of it. An operator
who knows a tenant key may name it (``redis-tasks inspect --tenant-key``): the
command line digests the key itself and passes ``names`` (digest to key) to the
renderers; nothing else ever shows a key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Protocol

from redis_tasks._stats import DEFERRED_FIELD, QUEUED_FIELD, REFUSED_FIELDS
from redis_tasks._status import TaskStatus
from redis_tasks._tenancy import tenant_digest

__all__ = [
    "TOP_TENANTS",
    "PartitionTenants",
    "SampledLease",
    "SampledPartition",
    "TenantFigures",
    "TenantQueue",
    "TenantSummary",
    "named_tenants",
]

#: Tenants listed by backlog and by running (the text and the JSON alike).
TOP_TENANTS: Final = 10
_RUNNING: Final = (TaskStatus.WORKING.value, TaskStatus.INPUT_REQUIRED.value)


def named_tenants(keys: Iterable[str], bindings: Iterable[str] = ()) -> dict[str, str]:
    """The digest of each tenant an operator names, to its name (``names`` for the
    renderers): a tenant key (its digest depends on the key alone, not on the endpoint
    or binding of its tasks), or a binding ``ENDPOINT[=PARTITION_KEY]``, the tenant of
    the tasks created under it without a key (no ``=``: the anonymous partition)."""
    names = {tenant_digest(b"", b"", key.encode("utf-8")): key for key in keys}
    for binding in bindings:
        endpoint, given, key = binding.partition("=")
        encoded = b"=" + key.encode("utf-8") if given else b"-"
        names[tenant_digest(endpoint.encode("utf-8"), encoded, None)] = binding
    return names


@dataclass(frozen=True, slots=True)
class TenantQueue:
    """One tenant waiting in one partition: its queued tasks, the age of the oldest
    (``None`` when that task is gone), and whether it is parked at its cap."""

    tenant: str
    queued: int
    oldest_ms: int | None
    parked: bool


@dataclass(frozen=True, slots=True)
class PartitionTenants:
    """One partition's tenant figures.

    ``queued`` counts the tasks in its tenant queues, ``ring`` and ``parked`` the
    tenants waiting there (parked: at their concurrency cap); ``queues`` holds up to
    ``sample`` of those tenants (``sampled`` when there were more). ``deferred``
    counts claims deferred by a cap, ``refused`` creates refused by reason, since
    the stats began.
    """

    queued: int = 0
    ring: int = 0
    parked: int = 0
    queues: tuple[TenantQueue, ...] = ()
    #: Tasks waiting for their client's input, held by no worker (parked tasks).
    waiting_for_input: int = 0
    deferred: int = 0
    refused: Mapping[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSED_FIELDS, 0))

    @classmethod
    def from_reply(
        cls, stats: Mapping[str, int], waiting: Any, flat: Any, now: int
    ) -> PartitionTenants:
        """The figures of ``inspect_queue``'s ``stats``, ``waiting`` and ``queues``."""
        queues = []
        for i in range(0, len(flat) - 3, 4):
            tenant, length, created, parked = flat[i : i + 4]
            created_ms = int(created) if created not in (b"", "") else None
            queues.append(
                TenantQueue(
                    tenant=tenant.decode() if isinstance(tenant, bytes) else str(tenant),
                    queued=int(length),
                    oldest_ms=None if created_ms is None else max(now - created_ms, 0),
                    parked=parked in (b"1", "1"),
                )
            )
        return cls(
            queued=max(stats.get(QUEUED_FIELD, 0), 0),
            ring=int(waiting[0]),
            parked=int(waiting[1]),
            waiting_for_input=int(waiting[2]) if len(waiting) > 2 else 0,
            queues=tuple(queues),
            deferred=stats.get(DEFERRED_FIELD, 0),
            refused={reason: stats.get(name, 0) for reason, name in REFUSED_FIELDS.items()},
        )

    @property
    def waiting(self) -> int:
        """Tenants with tasks waiting here (in the ring or parked)."""
        return self.ring + self.parked

    @property
    def sampled(self) -> bool:
        """Whether more tenants wait here than the inspection read."""
        return self.waiting > len(self.queues)

    @property
    def oldest_ms(self) -> int | None:
        """Age of the oldest task at the head of a read tenant queue."""
        ages = [q.oldest_ms for q in self.queues if q.oldest_ms is not None]
        return max(ages) if ages else None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict of the counts (the tenants themselves are in the summary)."""
        return {
            "queued": self.queued,
            "waiting": self.waiting,
            "parked": self.parked,
            "waiting_for_input": self.waiting_for_input,
            "sampled": self.sampled,
            "deferred": self.deferred,
            "refused": dict(self.refused),
        }


@dataclass(frozen=True, slots=True)
class TenantFigures:
    """One tenant over every inspected partition: its queued tasks (``backlog``), its
    tasks running among the sampled leases, the age of its oldest queued task, and
    whether it is parked (at its cap) anywhere."""

    tenant: str
    backlog: int = 0
    running: int = 0
    oldest_ms: int | None = None
    parked: bool = False

    def to_json(self, names: Mapping[str, str]) -> dict[str, Any]:
        """A JSON-ready dict; ``key`` is the tenant's key only where ``names`` has it."""
        return {
            "tenant": self.tenant,
            "key": names.get(self.tenant),
            "backlog": self.backlog,
            "running": self.running,
            "oldest_waiting_ms": self.oldest_ms,
            "parked": self.parked,
        }


class SampledLease(Protocol):
    """What the summary reads of a sampled lease (a ``LeaseView``)."""

    @property
    def tenant(self) -> str | None:
        """The task's tenant digest."""
        ...

    @property
    def status(self) -> str | None:
        """The task's status (``None``: it expired)."""
        ...


class SampledPartition(Protocol):
    """What the summary reads of a partition (a ``PartitionView``): its tenant
    figures, its sampled leases, and whether it had more pending entries than those.
    Named here, not imported, so that the partition's module may import this one."""

    @property
    def tenants(self) -> PartitionTenants:
        """The partition's tenant figures."""
        ...

    @property
    def leases(self) -> Sequence[SampledLease]:
        """The sampled leases."""
        ...

    @property
    def sampled(self) -> bool:
        """Whether more entries were pending than the leases read."""
        ...


class TenantSummary:
    """The tenant figures of a whole inspection: summed over partitions, and each read
    tenant's backlog and running tasks summed by digest across them."""

    def __init__(self, partitions: Iterable[SampledPartition]) -> None:
        views = list(partitions)
        parts = [p.tenants for p in views]
        #: Tasks in tenant queues, all partitions.
        self.queued = sum(t.queued for t in parts)
        #: Tenants with tasks waiting, summed over partitions: a tenant waiting in
        #: several partitions counts once in each (see :attr:`distinct`).
        self.waiting = sum(t.waiting for t in parts)
        #: Of those, the parked ones (at their concurrency cap).
        self.parked = sum(t.parked for t in parts)
        #: Tasks waiting for their client's input, held by no worker.
        self.waiting_for_input = sum(t.waiting_for_input for t in parts)
        #: Claims deferred by a cap, creates refused by reason, all partitions.
        self.deferred = sum(t.deferred for t in parts)
        self.refused = {r: sum(t.refused.get(r, 0) for t in parts) for r in REFUSED_FIELDS}
        #: Whether some partition had more tenants waiting than were read (then the
        #: backlog by tenant is partial), or more pending entries than leases read
        #: (then the running by tenant is).
        self.sampled = any(t.sampled for t in parts)
        self.leases_sampled = any(p.sampled for p in views)
        figures: dict[str, TenantFigures] = {}
        for q in (q for part in parts for q in part.queues):
            seen = figures.get(q.tenant) or TenantFigures(q.tenant)
            figures[q.tenant] = replace(
                seen,
                backlog=seen.backlog + q.queued,
                oldest_ms=_older(seen.oldest_ms, q.oldest_ms),
                parked=seen.parked or q.parked,
            )
        for lease in (lease for p in views for lease in p.leases):
            if lease.tenant and lease.status in _RUNNING:
                seen = figures.get(lease.tenant) or TenantFigures(lease.tenant)
                figures[lease.tenant] = replace(seen, running=seen.running + 1)
        #: Every tenant read, by digest.
        self.figures: Mapping[str, TenantFigures] = figures

    @property
    def distinct(self) -> int:
        """Different tenants among those read with tasks waiting (every one of them
        unless :attr:`sampled`)."""
        return sum(1 for f in self.figures.values() if f.backlog > 0)

    def by_backlog(self, top: int = TOP_TENANTS) -> list[TenantFigures]:
        """The ``top`` tenants with the most tasks queued (then oldest first)."""
        found = [f for f in self.figures.values() if f.backlog > 0]
        return sorted(found, key=lambda f: (-f.backlog, -(f.oldest_ms or 0), f.tenant))[:top]

    def by_running(self, top: int = TOP_TENANTS) -> list[TenantFigures]:
        """The ``top`` tenants with the most tasks running (among the sampled leases)."""
        found = [f for f in self.figures.values() if f.running > 0]
        return sorted(found, key=lambda f: (-f.running, -f.backlog, f.tenant))[:top]

    def named(self, names: Mapping[str, str]) -> list[tuple[str, TenantFigures]]:
        """Each named tenant (key, figures), in the order named; zeros for one not seen."""
        return [(key, self.figures.get(d) or TenantFigures(d)) for d, key in names.items()]

    def to_json(self, names: Mapping[str, str] | None = None) -> dict[str, Any]:
        """A JSON-ready dict: the totals, the top tenants, and the named ones (keys only
        for the digests ``names`` maps)."""
        names = names or {}
        return {
            "queued": self.queued,
            "waiting": self.waiting,
            "distinct": self.distinct,
            "parked": self.parked,
            "waiting_for_input": self.waiting_for_input,
            "sampled": self.sampled,
            "leases_sampled": self.leases_sampled,
            "deferred": self.deferred,
            "refused": dict(self.refused),
            "by_backlog": [f.to_json(names) for f in self.by_backlog()],
            "by_running": [f.to_json(names) for f in self.by_running()],
            "named": [f.to_json(names) for _, f in self.named(names)],
        }


def _older(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    return a if b is None else max(a, b)
