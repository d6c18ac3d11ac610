"""Fair dispatch in memory: ``enqueue`` and ``dispatch`` of ``lua/includes/tenants.lua``.

A new task goes straight into its partition's stream while nothing waits there;
otherwise it joins its tenant's queue (:mod:`.tenants`), and a batch claim that
ran out of entries dispatches the waiting tasks into the stream in weighted
round-robin, each tenant within its concurrency cap. The work queue calls these
with itself as the :class:`~.stream.Streams`; callers hold the lock.
"""

from __future__ import annotations

from collections import deque

from redis_tasks._ids import parse_task_id
from redis_tasks._record import FIELD_STATUS, FIELD_TENANT, FIELD_WORK_ENTRY
from redis_tasks._signals import newcomer_signal
from redis_tasks._tenancy import Head, plan_picks, stride

from .records import TERMINAL, TaskRecords
from .stream import Streams, id_text
from .tenants import Tenants, settings_of
from .work import add_work

__all__ = ["dispatch", "dispatch_first", "enqueue", "runnable_head"]


def enqueue(
    streams: Streams,
    partition: int,
    tenant: str,
    settings: str,
    task_id: str,
    expire_at: int,
    now: int,
    fields: dict[str, bytes],
    *,
    fair: bool,
) -> bool:
    """Mirror of ``enqueue``: the task goes straight into the stream (its entry
    recorded in ``fields``, the new record's), or joins its tenant's queue, which
    lives to the task's ``expire_at`` (0: never); whether the create signals it as a
    newcomer's (its tenant was not waiting and joined a ring where others wait, or
    it went straight into the stream of a partition a saturated worker marked busy)."""
    if not fair:
        add_work(streams, partition, task_id, fields)
        return False
    state = streams.partition(partition)
    tenants = state.tenants
    queue = tenants.queue(tenant, now)
    newcomer = False
    if not queue:
        if tenants.ring:
            tenants.forget_gone_head(now)
        others = bool(tenants.ring)
        if not others and not state.undelivered():
            add_work(streams, partition, task_id, fields)
            return now < state.busy_until
        tenants.join_ring(tenant, settings_of(settings)[0])
        newcomer = others
        if not settings:
            tenants.settings.pop(tenant, None)
    tenants.push(tenant, task_id, expire_at, now, head=False)
    if settings:
        tenants.settings[tenant] = settings
    tenants.queued += 1
    return newcomer


def runnable_head(tenants: Tenants, want: int, now: int) -> list[Head]:
    """Mirror of ``runnable_head``: the first ``want`` tenants in pass order that may
    run a task now; those found at their cap on the way are parked."""
    heads: list[Head] = []
    while len(heads) < want:
        top = tenants.lowest(want)[len(heads) :]
        if not top:
            break
        for name, pass_ in top:
            weight, cap = settings_of(tenants.settings.get(name))
            room = cap - tenants.live_running(name, now) if cap > 0 else want
            if room > 0:
                queued = len(tenants.queue(name, now) or ())
                heads.append(Head(name, pass_, stride(weight), room, queued, cap > 0))
            else:
                tenants.park(name, now)
    return heads


def dispatch(
    streams: Streams, partition: int, count: int, now: int, claiming: int
) -> list[tuple[str, str]]:
    """Mirror of ``dispatch``: up to ``count`` waiting tasks into the stream, in
    weighted round-robin, for the caller to claim at once (a tenant parked at its cap
    until ``claiming`` at the latest); the entries it added, ``(entry ID, task ID)``."""
    tenants = streams.partition(partition).tenants
    due = sorted((at, name) for name, at in tenants.parked.items() if at <= now)
    for _, name in due[:count]:
        tenants.unpark(name)
    heads = runnable_head(tenants, count, now)
    started = plan_picks(heads, count)
    if started is not None:
        tenants.vtime = started
    added: list[tuple[str, str]] = []
    left = False
    for head in heads:
        name = head.name
        if head.picks > 0:
            queue = tenants.queue(name, now) or deque()
            for _ in range(head.picks):
                task_id = queue.popleft()
                added.append((add_work(streams, partition, task_id, None), task_id))
            if not queue:
                tenants.drop_queue(name)
        if head.queued == head.picks:  # its queue is empty, or went with its tasks
            tenants.ring.pop(name, None)
            tenants.settings.pop(name, None)
            left = True
        elif head.capped and head.picks >= head.room:
            tenants.park(name, now, claiming)
        elif head.picks > 0:
            tenants.ring[name] = head.pass_
    if left and not tenants.ring and not tenants.parked:
        tenants.queued = 0  # nothing waits: none is queued
    else:
        tenants.queued -= len(added)
    return added


def dispatch_first(records: TaskRecords, streams: Streams, partition: int, task_id: str) -> bool:
    """Mirror of ``dispatch_first``: the newcomer's queued task ``task_id`` out of its
    tenant's queue ahead of the ring's order (the tenant's next task signalled when it
    may go first too); whether it went. The script claims it directly, before the
    stream's entries; here it goes into the stream with every undelivered entry moved
    behind it, unchanged (a doorbell, a gone task's, a stale one's), so the batch
    reads them as the script does (a record that names its entry names the new one)."""
    record = records.live(task_id)
    if record is None:
        return False
    fields = record.fields
    tenant_bytes = fields.get(FIELD_TENANT)
    if fields[FIELD_STATUS] in TERMINAL or FIELD_WORK_ENTRY in fields or tenant_bytes is None:
        return False
    tenant = tenant_bytes.decode()
    state = streams.partition(partition)
    tenants = state.tenants
    queue = tenants.queue(tenant, records.now())
    pass_ = tenants.ring.get(tenant)
    if pass_ is None or not queue or queue[0] != task_id:
        return False
    step = stride(settings_of(tenants.settings.get(tenant))[0])
    ahead = [e for e in state.fresh if e in state.entries]
    queue.popleft()
    add_work(streams, partition, task_id, None)
    for entry_id in ahead:
        moved_task = state.entries.pop(entry_id)
        # Only this partition's tasks: another's record is under another tag.
        mine = bool(moved_task) and parse_task_id(moved_task) == partition
        moved_record = records.live(moved_task) if mine else None
        named = None if moved_record is None else moved_record.fields
        if named is not None and named.get(FIELD_WORK_ENTRY) != id_text(entry_id).encode():
            named = None  # a stale entry: kept, its record left as it is
        add_work(streams, partition, moved_task, named)
    if not queue:
        tenants.drop_queue(tenant)
        tenants.ring.pop(tenant, None)
        tenants.settings.pop(tenant, None)
    else:
        tenants.ring[tenant] = pass_ + step
        if pass_ <= tenants.lowest(1)[0][1] + step:
            records.signal(newcomer_signal(queue[0]))
    tenants.queued -= 1
    return True
