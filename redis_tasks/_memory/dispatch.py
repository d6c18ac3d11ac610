"""Fair dispatch in memory: ``enqueue`` and ``dispatch`` of ``lua/includes/tenants.lua``.

A new task goes straight into its partition's stream while nothing waits there;
otherwise it joins its tenant's queue (:mod:`.tenants`), and a batch claim that
ran out of entries dispatches the waiting tasks into the stream in weighted
round-robin, each tenant within its concurrency cap. The work queue calls these
with itself as the :class:`~.stream.Streams`; callers hold the lock.
"""

from __future__ import annotations

from collections import deque

from redis_tasks._tenancy import stride

from .stream import Streams
from .tenants import settings_of

__all__ = ["dispatch", "enqueue"]


def enqueue(
    streams: Streams, partition: int, tenant: str, settings: str, task_id: str, *, fair: bool
) -> str | None:
    """Mirror of ``enqueue``: the entry ID when the task went straight into the
    stream, else ``None`` (it joined its tenant's queue)."""
    if not fair:
        return streams.append(partition, task_id)
    state = streams.partition(partition)
    tenants = state.tenants
    queue = tenants.queues.get(tenant)
    if not queue:
        if not tenants.ring and not state.undelivered():
            return streams.append(partition, task_id)
        queue = tenants.queues[tenant] = deque()
        tenants.join_ring(tenant, settings_of(settings)[0])
        if not settings:
            tenants.settings.pop(tenant, None)
    queue.append(task_id)
    if settings:
        tenants.settings[tenant] = settings
    tenants.queued += 1
    return None


def dispatch(streams: Streams, partition: int, count: int, now: int) -> int:
    """Mirror of ``dispatch``: up to ``count`` waiting tasks into the stream, in
    weighted round-robin; how many it added."""
    tenants = streams.partition(partition).tenants
    due = sorted((at, name) for name, at in tenants.parked.items() if at <= now)
    for _, name in due[:count]:
        tenants.unpark(name)
    top = tenants.lowest(count + 1)
    if not top:
        return 0
    names = [name for name, _ in top]
    passes = [score for _, score in top]
    strides, rooms, capped, picks = [], [], [], [0] * len(names)
    for name in names:
        weight, cap = settings_of(tenants.settings.get(name))
        strides.append(stride(weight))
        capped.append(cap > 0)
        rooms.append(cap - tenants.live_running(name, now) if cap > 0 else count)
    for _ in range(count):
        best = None
        for i in range(len(names)):
            if picks[i] < rooms[i] and (best is None or passes[i] < passes[best]):
                best = i
        if best is None:
            break
        picks[best] += 1
        tenants.vtime = passes[best]
        passes[best] += strides[best]
    added = 0
    for i, name in enumerate(names):
        waiting = True
        if picks[i] > 0:
            queue = tenants.queues.get(name, deque())
            got = [queue.popleft() for _ in range(min(picks[i], len(queue)))]
            for task_id in got:
                streams.append(partition, task_id)
            added += len(got)
            waiting = bool(queue)
            if not queue:
                tenants.queues.pop(name, None)
        if not waiting:
            tenants.ring.pop(name, None)
            tenants.settings.pop(name, None)
        elif capped[i] and picks[i] >= rooms[i]:
            tenants.park(name, now)
        elif picks[i] > 0:
            tenants.ring[name] = passes[i]
    tenants.queued -= added
    return added
