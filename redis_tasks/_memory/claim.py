"""A claim of one work entry in memory: the twin of ``lua/includes/claim.lua``.

What ``claim``, ``claim_next`` and the reclaim path share: the task's record
decides whether the entry runs (a fence, an attempt, a lease deadline), is settled
(expired, terminal, cancelled, poisoned past its attempts), is left to the lease
that holds it, or is deferred by its tenant's concurrency cap, step for step as
``claim_entry`` and ``defer`` do, on the records and streams the work queue passes.
"""

from __future__ import annotations

from redis_tasks._ids import parse_task_id
from redis_tasks._lease import Claim, ClaimOutcome
from redis_tasks._record import (
    FIELD_ATTEMPTS,
    FIELD_CANCEL_REQUESTED,
    FIELD_CLAIM_THAT_ENDED,
    FIELD_ERROR,
    FIELD_FENCE,
    FIELD_LEASE_DEADLINE,
    FIELD_LEASE_OWNER,
    FIELD_ORIGIN,
    FIELD_PARKS,
    FIELD_PAYLOAD,
    FIELD_STATUS,
    FIELD_TENANT,
    FIELD_TENANT_CAP,
    FIELD_TRACE_CONTEXT,
    FIELD_WORK_ENTRY,
    decode_origin,
)

from .records import TERMINAL, Record, TaskRecords
from .stream import Streams
from .tenants import settings_of
from .terminal import terminate
from .work import Doorbell

__all__ = ["claim_entry"]

_CANCELLED = b"cancelled"
_FAILED = b"failed"
_WORKING = b"working"


def claim_entry(
    records: TaskRecords,
    streams: Streams,
    poison_error: bytes,
    task_id: str,
    entry_id: str,
    consumer: str,
    lease_ms: int,
    max_attempts: int,
    doorbell: Doorbell,
) -> Claim:
    """Mirror of ``claim_entry``: what a claim of ``entry_id`` by ``consumer`` did
    (a doorbell it asks for is rung at the caller's end). Callers hold the lock and
    checked the task ID."""
    partition = parse_task_id(task_id)
    assert partition is not None  # the callers checked the ID
    record = records.live(task_id)
    if record is None:
        streams.drop_entry(partition, entry_id)
        return Claim(ClaimOutcome.EXPIRED)
    fields = record.fields
    if fields[FIELD_STATUS] in TERMINAL:
        streams.drop_entry(partition, entry_id)
        if fields.get(FIELD_CLAIM_THAT_ENDED) == _mark(entry_id, consumer):  # that claim again
            cancelled = fields[FIELD_STATUS] == _CANCELLED
            return Claim(ClaimOutcome.CANCELLED if cancelled else ClaimOutcome.POISONED)
        return Claim(ClaimOutcome.TERMINAL)
    now = records.now()
    deadline = fields.get(FIELD_LEASE_DEADLINE)
    if deadline is not None and int(deadline) > now:
        if (
            fields.get(FIELD_LEASE_OWNER) == consumer.encode()
            and fields.get(FIELD_WORK_ENTRY) == entry_id.encode()
        ):
            attempt = int(fields.get(FIELD_ATTEMPTS, b"0"))
            return _run(record, int(fields[FIELD_FENCE]), attempt, replays=True)
        # Dispatched in this operation yet leased (a stale holder renewed): the entry
        # is its work now, as in claim_entry.
        fields.setdefault(FIELD_WORK_ENTRY, entry_id.encode())
        return Claim(ClaimOutcome.LEASE_HELD)
    entry = fields.get(FIELD_WORK_ENTRY, entry_id.encode()).decode()
    if fields.get(FIELD_CANCEL_REQUESTED) == b"1":
        terminate(records, streams, record, task_id, entry, _CANCELLED, None, "", b"", doorbell)
        fields[FIELD_CLAIM_THAT_ENDED] = _mark(entry_id, consumer)
        return Claim(ClaimOutcome.CANCELLED)
    attempt = int(fields.get(FIELD_ATTEMPTS, b"0")) + 1
    if attempt > max_attempts:
        terminate(
            records,
            streams,
            record,
            task_id,
            entry,
            _FAILED,
            None,
            FIELD_ERROR,
            poison_error,
            doorbell,
        )
        fields[FIELD_CLAIM_THAT_ENDED] = _mark(entry_id, consumer)
        return Claim(ClaimOutcome.POISONED)
    tenant, cap = fields.get(FIELD_TENANT), fields.get(FIELD_TENANT_CAP)
    tenants = streams.partition(partition).tenants
    if cap is not None and tenant is not None:
        name = tenant.decode()
        # The tenant's current cap, where its settings are kept (see claim_entry).
        current = tenants.settings.get(name)
        limit = int(cap) if current is None else settings_of(current)[1]
        mine = tenants.running.get(name, {}).get(task_id)
        live = tenants.live_running(name, now)
        if limit > 0 and not (mine is not None and mine > now) and live >= limit:
            _defer(streams, partition, record, name, cap.decode(), task_id, entry_id, now)
            return Claim(ClaimOutcome.DEFERRED)
    # Two workers claiming in the same millisecond get different fences.
    tiebreak = 0
    for byte in consumer.encode():
        tiebreak = (tiebreak * 31 + byte) % 1024
    fence = max(int(fields[FIELD_FENCE]) + 1, now * 1024 + tiebreak)
    # Claimed before (its attempts recorded) or parked: this run replays its rounds.
    replays = FIELD_ATTEMPTS in fields or FIELD_PARKS in fields
    fields[FIELD_FENCE] = str(fence).encode()
    fields[FIELD_ATTEMPTS] = str(attempt).encode()
    fields[FIELD_LEASE_OWNER] = consumer.encode()
    fields[FIELD_LEASE_DEADLINE] = str(now + lease_ms).encode()
    fields.setdefault(FIELD_WORK_ENTRY, entry_id.encode())
    if cap is not None and tenant is not None:
        tenants.hold_slot(tenant.decode(), task_id, now + lease_ms, now)
    return _run(record, fence, attempt, replays=replays)


def _mark(entry_id: str, consumer: str) -> bytes:
    """Mirror of ``claim_mark``: the record's ``ce`` for a claim that ends its task."""
    return f"{entry_id} {consumer}".encode()


def _defer(
    streams: Streams,
    partition: int,
    record: Record,
    tenant: str,
    cap: str,
    task_id: str,
    entry_id: str,
    now: int,
) -> None:
    """Mirror of ``defer``: back to the head of its tenant's queue, the tenant parked."""
    streams.drop_entry(partition, entry_id)
    entry = record.fields.pop(FIELD_WORK_ENTRY, None)
    if entry is not None:
        streams.drop_entry(partition, entry.decode())
    tenants = streams.partition(partition).tenants
    expire_at = record.expire_at
    tenants.push(tenant, task_id, 0 if expire_at is None else expire_at, now, head=True)
    tenants.settings.setdefault(tenant, f"1 {cap}")
    tenants.park(tenant, now)
    tenants.queued += 1


def _run(record: Record, fence: int, attempt: int, *, replays: bool) -> Claim:
    """The claim that runs the task: its fence, attempt, origin, payload and trace,
    and for a run that ``replays`` its rounds the answers recorded for them."""
    fields = record.fields
    origin = decode_origin(fields[FIELD_ORIGIN])
    return Claim(
        ClaimOutcome.RUN,
        fence,
        attempt,
        origin,
        fields.get(FIELD_PAYLOAD, b""),
        fields.get(FIELD_TRACE_CONTEXT, b""),
        parks=int(fields.get(FIELD_PARKS, b"0")),
        recorded=_recorded(record) if replays else (),
    )


def _recorded(record: Record) -> tuple[tuple[bytes, bytes, bytes], ...]:
    """Mirror of ``recorded_answers``: while the task is working, every journaled
    answer not waiting untaken, with its request's fingerprint."""
    if record.fields[FIELD_STATUS] != _WORKING:
        return ()
    return tuple(
        (key, fingerprint, answer)
        for key, answer in record.journal.items()
        if (fingerprint := record.issued.get(key)) is not None and key not in record.answers
    )
