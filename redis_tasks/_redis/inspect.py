"""Reading the queues and one task for an operator: the ``inspect_queue`` and
``inspect_task`` scripts, and their replies as :mod:`redis_tasks._inspection` values;
and the tasks a reference (``11.Wt0jM9``) matches, by ``SCAN``.

Each partition is read by one read-only script call on the node that owns it,
all partitions at once; a cluster answers per primary, each on its own clock.
What the scripts leave out (origin, payload, answers, result, status message)
never reaches this process, so nothing here can leak it. The manager passes its
script runner and key space: nothing here needs more of it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any, Final

from redis.asyncio import Redis

from redis_tasks._codes import ReturnCode, error_for
from redis_tasks._errors import InternalError
from redis_tasks._ids import parse_task_id, parse_task_ref, task_ref
from redis_tasks._inspection import (
    ConsumerView,
    Inspection,
    LeaseView,
    PartitionView,
    PickupHistogram,
    TaskInspection,
    TaskMatches,
    ended_counts,
    stats_counts,
)
from redis_tasks._inspection.tenant_report import TenantReport, TenantRow
from redis_tasks._inspection.tenants import PartitionTenants
from redis_tasks._json import unpack
from redis_tasks._stats import CREATED_FIELD, TERMINAL_FIELDS

from . import scripts as lua
from .keys import TASK_INFIX, KeySpace
from .replies import flat_records, shaped
from .runner import ScriptRunner
from .topology import Topology

__all__ = [
    "MAX_MATCHES",
    "MAX_SAMPLE",
    "SCAN_BUDGET",
    "inspect_partitions",
    "inspect_task",
    "inspect_tenants",
    "match_tasks",
]

#: The most pending entries (and consumers, and waiting tenants) one partition's
#: inspection reports: it bounds the script's time on the server (two lookups per
#: entry, three per tenant).
MAX_SAMPLE: Final = 10_000
#: The most tasks a reference lookup lists (it stops at one more).
MAX_MATCHES: Final = 20
#: The most keys a reference lookup asks ``SCAN`` to look at: on a server (or a
#: node) of millions of keys it stops there rather than walk them all.
SCAN_BUDGET: Final = 1_000_000
_SCAN_COUNT: Final = 1000


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _int(value: Any) -> int | None:
    """An integer reply or decimal text; ``None`` for ``''`` (absent)."""
    if value in (b"", ""):
        return None
    return int(value)


def _age(entry_id: Any, now: int) -> int | None:
    """Milliseconds since the entry ``entry_id`` was added (its ID's stamp), or ``None``."""
    text = _text(entry_id)
    if not text:
        return None
    return max(now - int(text.split("-", 1)[0]), 0)


def _leases(partition: int, flat: Sequence[Any], now: int) -> tuple[LeaseView, ...]:
    leases = []
    flat = flat_records(flat, "inspect_queue", 11)
    for i in range(0, len(flat), 11):
        (_, consumer, idle, deliveries, task_id, status, owner, deadline, fence, attempts) = flat[
            i : i + 10
        ]
        tenant = flat[i + 10]
        status_text = _text(status) or None
        deadline_ms = _int(deadline)
        leases.append(
            LeaseView(
                partition=partition,
                # The reference only: an inspection holds no task's ID (see LeaseView).
                task=task_ref(_text(task_id)),
                consumer=_text(consumer),
                entry_idle_ms=int(idle),
                deliveries=int(deliveries),
                status=status_text,
                lease_owner=_text(owner) or None,
                fence=_int(fence) or 0,
                attempt=_int(attempts) or 0,
                # A hand-back leaves ld at 0: no lease, not one that ran out in 1970.
                remaining_ms=deadline_ms - now if deadline_ms else None,
                tenant=_text(tenant) or None,
            )
        )
    return tuple(leases)


def _consumers(flat: Sequence[Any]) -> tuple[ConsumerView, ...]:
    flat = flat_records(flat, "inspect_queue", 3)
    return tuple(
        ConsumerView(_text(flat[i]), int(flat[i + 1]), int(flat[i + 2]))
        for i in range(0, len(flat), 3)
    )


async def _partition(
    runner: ScriptRunner, keys: KeySpace, partition: int, sample: int
) -> PartitionView:
    work = keys.work(partition)
    reply = await runner.run(
        lua.inspect_queue(
            work=work,
            stats=keys.stats(partition),
            ring=keys.ring(partition),
            parked=keys.parked(partition),
            tag=keys.tag(partition),
            sample=sample,
        )
    )
    # {RC_OK, now, length, pending, oldest waiting, oldest pending, consumers, leases,
    # stats, waiting tenants, queues}: see lua/inspect_queue.lua's header.
    (_, now, length, pending, waiting, oldest, consumers, leases, stats, tenants, queues) = shaped(
        reply, "inspect_queue", int, int, int, int, bytes, bytes, *(list,) * 5
    )
    counts = stats_counts(stats)
    lease_views = _leases(partition, leases, now)
    tenant_view = PartitionTenants.from_reply(counts, tenants, queues, int(now))
    # The oldest waiting task is an entry no worker read, or a tenant queue's head.
    ages = [a for a in (_age(waiting, now), tenant_view.oldest_ms) if a is not None]
    return PartitionView(
        partition=partition,
        node=runner.topology.node_for(work).name,
        server_ms=int(now),
        entries=int(length),
        pending=int(pending),
        created=counts.get(CREATED_FIELD, 0),
        oldest_waiting_ms=max(ages) if ages else None,
        oldest_pending_ms=_age(oldest, now),
        consumers=_consumers(consumers),
        leases=lease_views,
        sampled=int(pending) > len(lease_views),
        ended=ended_counts(counts),
        pickup=PickupHistogram.from_stats(counts),
        tenants=tenant_view,
    )


async def inspect_partitions(
    runner: ScriptRunner, keys: KeySpace, partitions: Iterable[int], *, sample: int = 256
) -> Inspection:
    """Every partition of ``partitions``, read at once."""
    if not isinstance(sample, int) or isinstance(sample, bool) or not 0 <= sample <= MAX_SAMPLE:
        raise ValueError(f"sample must be an int from 0 to {MAX_SAMPLE}")
    chosen = sorted(set(partitions))
    views = await asyncio.gather(*(_partition(runner, keys, p, sample) for p in chosen))
    return Inspection(tuple(views), cluster=runner.topology.is_cluster, sample=sample)


async def _tenants_of(
    runner: ScriptRunner, keys: KeySpace, partition: int, sample: int
) -> tuple[list[TenantRow], bool]:
    """One partition's ``inspect_tenants``: its tenants' rows, and whether all were read."""
    tenant = keys.tenant(partition, "")
    reply = await runner.run_raw(
        lua.inspect_tenants(
            seen=tenant.seen,
            ring=tenant.ring,
            parked=keys.parked(partition),
            tag=keys.tag(partition),
            sample=sample,
        )
    )
    _, _, complete, flat = shaped(reply, "inspect_tenants", int, int, int, list)
    return TenantReport.parse(list(flat_records(flat, "inspect_tenants", 9))), complete == 1


async def inspect_tenants(
    runner: ScriptRunner, keys: KeySpace, partitions: Iterable[int], *, sample: int = 256
) -> TenantReport:
    """Every tenant of ``partitions`` an operator may need (``lua/inspect_tenants.lua``),
    read at once; up to ``sample`` of each partition's seen, waiting and parked ones."""
    if not isinstance(sample, int) or isinstance(sample, bool) or not 1 <= sample <= MAX_SAMPLE:
        raise ValueError(f"sample must be an int from 1 to {MAX_SAMPLE}")
    chosen = sorted(set(partitions))
    read = await asyncio.gather(*(_tenants_of(runner, keys, p, sample) for p in chosen))
    return TenantReport(
        (row for rows, _ in read for row in rows),
        complete=all(complete for _, complete in read),
        partitions=len(chosen),
    )


def _error_code(packed: Any) -> int | None:
    """The JSON-RPC code of a stored error (msgpack), nothing else of it."""
    if not packed:
        return None
    try:
        code = unpack(bytes(packed)).get("code")
    except (ValueError, TypeError, AttributeError) as exc:
        raise InternalError("a stored error could not be decoded") from exc
    return code if isinstance(code, int) else None


async def inspect_task(runner: ScriptRunner, keys: KeySpace, task_id: str) -> TaskInspection | None:
    """One task's bookkeeping, or ``None`` when it is unknown, expired or malformed."""
    partition = parse_task_id(task_id)
    if partition is None:
        return None
    task_keys = keys.task(partition, task_id)
    reply = await runner.run_raw(
        lua.inspect_task(task=task_keys.task, requests=task_keys.requests, work=task_keys.work)
    )
    if reply[0] == ReturnCode.NOT_FOUND:
        return None
    if reply[0] != ReturnCode.OK:
        raise error_for(reply[0])
    text_or_int = (bytes, int)
    _, now, record, requests, state, consumer, idle, deliveries = shaped(
        reply, "inspect_task", int, int, list, int, bytes, *(text_or_int,) * 3
    )
    if len(record) != 15:
        raise InternalError("unexpected reply from lua/inspect_task.lua")
    status, created, updated, expires, poll, fence, attempts, owner, deadline = record[:9]
    cancel, entry, error, tenant, parked, parks = record[9:15]
    entry_state = _text(state) or None
    if entry_state is None and not _text(entry) and _text(status) not in TERMINAL_FIELDS:
        # A live task with no work entry is parked (waiting for input, held by no
        # worker) or waits in its tenant's queue.
        entry_state = "parked" if _text(parked) == "1" else "queued"
    poll_ms = _int(poll)
    deadline_ms = _int(deadline)
    return TaskInspection(
        task_id=task_id,
        partition=partition,
        server_ms=int(now),
        status=_text(status),
        created_ms=_int(created) or 0,
        updated_ms=_int(updated) or 0,
        expires_ms=_int(expires),
        poll_interval_ms=poll_ms or None,
        fence=_int(fence) or 0,
        attempts=_int(attempts) or 0,
        lease_owner=_text(owner) or None,
        lease_deadline_ms=deadline_ms or None,
        cancellation_requested=_text(cancel) == "1",
        input_requests=int(requests),
        error_code=_error_code(error),
        entry_id=None if entry_state == "leased" else _text(entry) or None,
        entry_state=entry_state,
        entry_consumer=_text(consumer) or None,
        entry_idle_ms=_int(idle),
        entry_deliveries=_int(deliveries),
        tenant=_text(tenant) or None,
        parks=_int(parks) or 0,
    )


async def _scan(client: Redis, *, cursor: int, match: str) -> tuple[int, list[Any]]:
    reply: tuple[int, list[Any]] = await client.scan(cursor, match=match, count=_SCAN_COUNT)
    return reply


def _glob(text: str) -> str:
    """``text`` as a literal in a ``SCAN MATCH`` pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


async def match_tasks(
    topology: Topology,
    keys: KeySpace,
    ref: str,
    *,
    limit: int = MAX_MATCHES,
    budget: int = SCAN_BUDGET,
) -> TaskMatches | None:
    """The live tasks whose ID starts with ``ref`` (a task reference, or any longer
    prefix of an ID); ``None`` when ``ref`` is neither.

    ``SCAN`` with a ``MATCH`` pattern within the partition's hash tag, on the node
    that serves it, until the scan ends, more than ``limit`` tasks matched, or
    ``budget`` keys were asked for (``complete`` says which). A server whose SCAN
    honours the hash tag (Redis 8 in cluster mode) looks at that one slot only;
    others walk the node's keys, hence the budget. Needs ``+scan``, which no
    other part of the library does.
    """
    parsed = parse_task_ref(ref)
    if parsed is None:
        return None
    partition, start = parsed
    head = keys.tag(partition) + TASK_INFIX
    pattern = f"{_glob(head)}{partition}.{_glob(start)}*"
    found: set[str] = set()
    cursor, asked = 0, 0
    while True:
        cursor, names = await topology.execute(head, partial(_scan, cursor=cursor, match=pattern))
        asked += _SCAN_COUNT
        for name in names:
            # A task's other keys (its requests, answers...) match too: the record's
            # key is the tag, the infix and a whole ID, nothing after it.
            task_id = _text(name)[len(head) :]
            if parse_task_id(task_id) == partition:
                found.add(task_id)
        if int(cursor) == 0 or len(found) > limit or asked >= budget:
            break
    ids = tuple(sorted(found))
    complete = int(cursor) == 0 and len(ids) <= limit
    return TaskMatches(partition, ids[:limit], complete)
