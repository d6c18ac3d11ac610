"""One in-memory partition's tenant queues: the twin of ``lua/includes/tenants.lua``.

What the Redis backend keeps under a partition's tag for fair dispatch and the
per-tenant limits (the ring, the parked set, the tenants hash, each tenant's
queue, run set, open set and create rate), kept here in dicts with the same
semantics, so the in-memory work queue (:mod:`.work_queue`, :mod:`.claim`,
:mod:`.dispatch`) and manager (:mod:`.manager`) follow the scripts step for step.
Sorted sets order by ``(score, member)`` as Redis does; the sets scored by a
deadline or an expiry count only members above "now", as ``ZCOUNT (now +inf``
does, and drop the rest when touched (Redis expires those keys instead: either
way nothing counts them).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from redis_tasks._tenancy import jitter, stride

__all__ = ["Tenants", "settings_of"]


def settings_of(text: str | None) -> tuple[int, int]:
    """A tenant's weight and cap from its settings (``"<weight> <cap>"``; none: 1, 0)."""
    if not text:
        return 1, 0
    weight, _, cap = text.partition(" ")
    return int(weight), int(cap)


def _live(scores: dict[str, float], now: int) -> dict[str, float]:
    """``scores`` without the members at or below ``now`` (dropped in place)."""
    for member in [m for m, score in scores.items() if score <= now]:
        del scores[member]
    return scores


@dataclass(slots=True)
class Tenants:
    """A partition's tenant state (see the module)."""

    partition: int
    #: Each waiting tenant's task IDs, oldest first (``{tag}:tq:<tenant>``).
    queues: dict[str, deque[str]] = field(default_factory=dict)
    #: When each queue expires, ms (``inf``: never): with its last task.
    queue_expiry: dict[str, float] = field(default_factory=dict)
    #: Tenants with tasks waiting, by pass (``{tag}:ring``).
    ring: dict[str, int] = field(default_factory=dict)
    #: Tenants at their cap, by when to look again (``{tag}:parked``).
    parked: dict[str, int] = field(default_factory=dict)
    #: Waiting tenants' settings, when not the defaults (``{tag}:tenants``).
    settings: dict[str, str] = field(default_factory=dict)
    #: Capped tenants' running task IDs, by lease deadline (``{tag}:run:<tenant>``).
    running: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Tenants' open task IDs, by expiry (``{tag}:open:<tenant>``).
    open: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Tenants' parked task IDs, by expiry (``{tag}:wt:<tenant>``; the partition's
    #: ``{tag}:waiting`` is their union).
    waiting: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Tenants' GCRA arrival times, µs (``{tag}:rate:<tenant>``).
    arrivals: dict[str, int] = field(default_factory=dict)
    #: Tasks waiting in the queues (the stats hash's ``queued``).
    queued: int = 0
    #: The pass the last task dispatched started at (the tenants hash's ``:vtime``).
    vtime: int = 0

    def queue(self, tenant: str, now: int) -> deque[str] | None:
        """The tenant's queue, ``None`` when it has none: an expired one is dropped,
        as Redis drops the list with its expiry (see :meth:`lives_to`)."""
        if now > self.queue_expiry.get(tenant, math.inf):
            self.queues.pop(tenant, None)
            self.queue_expiry.pop(tenant, None)
        return self.queues.get(tenant)

    def push(self, tenant: str, task_id: str, expire_at: int, now: int, *, head: bool) -> None:
        """``RPUSH`` (or ``LPUSH``, ``head``) of ``task_id`` to the tenant's queue, which
        then lives to ``expire_at`` at least: mirror of ``queue_lives_to``."""
        queue = self.queue(tenant, now)
        if queue is None:
            queue = self.queues[tenant] = deque()
            self.queue_expiry[tenant] = math.inf if expire_at == 0 else expire_at
        elif expire_at == 0:
            self.queue_expiry[tenant] = math.inf
        else:
            self.queue_expiry[tenant] = max(self.queue_expiry.get(tenant, 0), expire_at)
        if head:
            queue.appendleft(task_id)
        else:
            queue.append(task_id)

    def drop_queue(self, tenant: str) -> None:
        """The tenant's queue is empty: gone (Redis deletes an empty list)."""
        self.queues.pop(tenant, None)
        self.queue_expiry.pop(tenant, None)

    def forget_gone_head(self, now: int) -> None:
        """Mirror of ``forget_gone_head``: the ring's first tenant out when its queue
        expired; the queued count back to 0 once nothing waits."""
        lowest = self.lowest(1)
        if lowest and self.queue(lowest[0][0], now) is None:
            self.ring.pop(lowest[0][0], None)
            self.settings.pop(lowest[0][0], None)
            if not self.ring and not self.parked:
                self.queued = 0

    def lowest(self, count: int) -> list[tuple[str, int]]:
        """The ``count`` tenants of lowest pass, lowest first (``ZRANGE 0 count-1``)."""
        return sorted(self.ring.items(), key=lambda item: (item[1], item[0]))[:count]

    def join_ring(self, tenant: str, weight: int) -> None:
        """Mirror of ``join_ring``: at the virtual time plus the tenant's jitter."""
        self.ring[tenant] = self.vtime + jitter(tenant, self.partition, stride(weight))

    def live_running(self, tenant: str, now: int) -> int:
        """Mirror of ``running``: the tenant's tasks holding a live lease."""
        scores = self.running.get(tenant)
        return 0 if scores is None else len(_live(scores, now))

    def park(self, tenant: str, now: int, claiming: int | None = None) -> None:
        """Mirror of ``park``: out of the ring, looked at again at the soonest deadline
        (none live: ``claiming``, the deadline of claims about to be made, else now)."""
        scores = _live(self.running.get(tenant, {}), now)
        self.ring.pop(tenant, None)
        fallback = now if claiming is None else claiming
        self.parked[tenant] = int(min(scores.values(), default=fallback))

    def unpark(self, tenant: str) -> bool:
        """Mirror of ``unpark``: back into the ring, if parked; whether it was."""
        if self.parked.pop(tenant, None) is None:
            return False
        self.join_ring(tenant, settings_of(self.settings.get(tenant))[0])
        return True

    def release_slot(self, tenant: str, task_id: str) -> bool:
        """Mirror of ``release_tenant_slot``: the task no longer runs; whether that
        unparked the tenant (the caller rings the doorbell)."""
        scores = self.running.get(tenant)
        if scores is not None:
            scores.pop(task_id, None)
            if not scores:
                del self.running[tenant]
        return self.unpark(tenant)

    def unqueue(self, tenant: str, task_id: str, now: int) -> bool:
        """Mirror of ``unqueue``: the task out of its tenant's queue (it ended before
        any dispatch); the tenant leaves the ring and the parked set when its queue
        empties. Whether the task was there."""
        queue = self.queue(tenant, now)
        if not queue or task_id not in queue:
            return False
        queue.remove(task_id)
        self.queued -= 1
        if not queue:
            self.drop_queue(tenant)
            self.ring.pop(tenant, None)
            self.parked.pop(tenant, None)
            self.settings.pop(tenant, None)
        return True

    def hold_slot(self, tenant: str, task_id: str, deadline: int, now: int) -> None:
        """The claim's ``ZREMRANGEBYSCORE`` and ``ZADD`` on the tenant's run set."""
        _live(self.running.setdefault(tenant, {}), now)[task_id] = deadline

    def open_count(self, tenant: str, now: int) -> int:
        """Mirror of ``ZCOUNT open (now +inf``: the tenant's open tasks."""
        scores = self.open.get(tenant)
        return 0 if scores is None else len(_live(scores, now))

    def add_open(self, tenant: str, task_id: str, expires: int | None, now: int) -> None:
        """The create's trim and ``ZADD`` of the open set (no expiry: +inf)."""
        _live(self.open.setdefault(tenant, {}), now)[task_id] = (
            math.inf if expires is None else expires
        )

    def drop_open(self, tenant: str, task_id: str) -> None:
        """The terminal transition's ``ZREM`` from the open set."""
        scores = self.open.get(tenant)
        if scores is not None:
            scores.pop(task_id, None)
            if not scores:
                del self.open[tenant]

    def add_waiting(self, tenant: str, task_id: str, expires: int | None, now: int) -> None:
        """Mirror of ``add_waiting``: the task counted among the parked ones."""
        _live(self.waiting.setdefault(tenant, {}), now)[task_id] = (
            math.inf if expires is None else expires
        )

    def forget_waiting(self, tenant: str, task_id: str) -> None:
        """Mirror of ``forget_waiting``: the task no longer parked."""
        scores = self.waiting.get(tenant)
        if scores is not None:
            scores.pop(task_id, None)
            if not scores:
                del self.waiting[tenant]

    def waiting_count(self, tenant: str | None, now: int) -> int:
        """``ZCOUNT (now +inf`` of the tenant's parked tasks, or the partition's
        (``tenant`` ``None``)."""
        tenants = self.waiting if tenant is None else {tenant: self.waiting.get(tenant, {})}
        return sum(len(_live(scores, now)) for scores in tenants.values())

    def arrival(self, tenant: str, now_us: int) -> int:
        """The GCRA's arrival time of ``tenant`` (``now_us`` when it has none)."""
        stored = self.arrivals.get(tenant, 0)
        if stored < now_us:
            self.arrivals.pop(tenant, None)  # past: the Redis key has expired too
        return max(stored, now_us)
