"""Answers and parked tasks in memory: the twin of ``lua/update.lua`` (past its
authorization), ``lua/park.lua`` and ``lua/includes/waiting.lua``.

A task whose handler waits for its client's input is given back by its worker
(:func:`park`): its lease ends, it holds no slot of its tenant's cap, and it is
counted among its tenant's parked tasks. The answer that completes its round
(:func:`accept_answers`) resumes it (:func:`resume`): it goes back to the head of its
tenant's queue, or straight into the stream where nothing waits. Callers hold the lock.
"""

from __future__ import annotations

from redis_tasks._ids import parse_task_id
from redis_tasks._record import (
    FIELD_ATTEMPTS,
    FIELD_CANCEL_REQUESTED,
    FIELD_FENCE,
    FIELD_LEASE_DEADLINE,
    FIELD_LEASE_OWNER,
    FIELD_MESSAGE,
    FIELD_PARKED,
    FIELD_PARKS,
    FIELD_STATUS,
    FIELD_TENANT,
    FIELD_TENANT_CAP,
    FIELD_WORK_ENTRY,
    EncodedAnswer,
)
from redis_tasks._signals import newcomer_signal
from redis_tasks._status import TaskStatus

from .records import Record, TaskRecords
from .stream import Streams
from .tenants import settings_of
from .work import Doorbell, add_work

__all__ = ["accept_answers", "park", "resume"]

_INPUT_REQUIRED = TaskStatus.INPUT_REQUIRED.value.encode()
_WORKING = TaskStatus.WORKING.value.encode()


def park(records: TaskRecords, streams: Streams, record: Record, task_id: str) -> bool:
    """Mirror of ``park.lua`` past its guard: whether the task is parked now."""
    fields = record.fields
    if (
        fields[FIELD_STATUS] != _INPUT_REQUIRED
        or fields.get(FIELD_CANCEL_REQUESTED) == b"1"
        or not record.requests
    ):
        return False
    partition = parse_task_id(task_id)
    assert partition is not None  # the record was found by this ID
    entry = fields.pop(FIELD_WORK_ENTRY, None)
    if entry is not None:
        streams.drop_entry(partition, entry.decode())
    fields.pop(FIELD_LEASE_OWNER, None)
    attempts = max(int(fields.get(FIELD_ATTEMPTS, b"1")) - 1, 0)
    fields[FIELD_FENCE] = str(int(fields.get(FIELD_FENCE, b"0")) + 1).encode()
    fields[FIELD_ATTEMPTS] = str(attempts).encode()
    fields[FIELD_LEASE_DEADLINE] = b"0"
    fields[FIELD_PARKED] = b"1"
    fields[FIELD_PARKS] = str(int(fields.get(FIELD_PARKS, b"0")) + 1).encode()
    tenant = fields.get(FIELD_TENANT)
    doorbell = Doorbell()
    if tenant is not None:
        tenants = streams.partition(partition).tenants
        tenants.add_waiting(tenant.decode(), task_id, record.expire_at, records.now())
        if FIELD_TENANT_CAP in fields:
            doorbell.due = tenants.release_slot(tenant.decode(), task_id)
    doorbell.ring(streams, partition)
    return True


def accept_answers(
    records: TaskRecords,
    streams: Streams,
    record: Record,
    task_id: str,
    answers: list[EncodedAnswer],
    *,
    fair: bool,
) -> None:
    """Mirror of ``update.lua`` past its authorization: the answers to outstanding
    requests of their kind accepted; the last one returns the task to working, and
    resumes it when parked (:func:`resume`, its answers not yet taken dropped: the next
    run replays them from the journal); its worker, if one holds it, signalled."""
    if record.fields[FIELD_STATUS] != _INPUT_REQUIRED:
        return
    accepted = [
        a
        for a in answers
        if (request := record.requests.get(a.key)) is not None
        and chr(request[0]).encode() in a.kinds
    ]
    if not accepted:
        return
    for answer in accepted:
        del record.requests[answer.key]
        record.answers[answer.key] = answer.body
        record.journal[answer.key] = answer.body
    records.touch(record, records.now())
    parked = FIELD_PARKED in record.fields
    if parked and not record.requests:
        # The next run replays every round from the journal: nothing is left to take.
        record.answers.clear()
    if not record.requests:
        record.fields[FIELD_STATUS] = _WORKING
        record.fields.pop(FIELD_MESSAGE, None)
        if parked:
            resume(records, streams, record, task_id, fair=fair)
    records.emit(task_id)
    if not parked:
        records.signal(task_id)


def resume(
    records: TaskRecords, streams: Streams, record: Record, task_id: str, *, fair: bool
) -> None:
    """Mirror of ``resume_task``: the parked task, whose round was just completed,
    no longer parked and queued again (:func:`_enqueue_first`)."""
    fields = record.fields
    del fields[FIELD_PARKED]
    partition = parse_task_id(task_id)
    assert partition is not None  # the record was found by this ID
    tenant = fields.get(FIELD_TENANT)
    if tenant is None:
        add_work(streams, partition, task_id, fields)
        return
    streams.partition(partition).tenants.forget_waiting(tenant.decode(), task_id)
    _enqueue_first(records, streams, partition, record, task_id, tenant.decode(), fair=fair)


def _enqueue_first(
    records: TaskRecords,
    streams: Streams,
    partition: int,
    record: Record,
    task_id: str,
    tenant: str,
    *,
    fair: bool,
) -> None:
    """Mirror of ``enqueue_first``: at the head of the tenant's queue, or straight
    into the stream where nothing waits (or ``fair`` is off)."""
    fields = record.fields
    if not fair:
        add_work(streams, partition, task_id, fields)
        return
    now = records.now()
    state = streams.partition(partition)
    tenants = state.tenants
    if not tenants.queue(tenant, now) and tenant not in tenants.parked:
        if tenants.ring:
            tenants.forget_gone_head(now)
        others = bool(tenants.ring)
        if not others and not state.undelivered():
            add_work(streams, partition, task_id, fields)
            if now < state.busy_until:
                records.signal(newcomer_signal(task_id))
            return
        settings = tenants.settings.get(tenant)
        cap = fields.get(FIELD_TENANT_CAP)
        if settings is None and cap is not None:
            settings = tenants.settings[tenant] = f"1 {cap.decode()}"
        tenants.join_ring(tenant, settings_of(settings)[0])
        if others:
            records.signal(newcomer_signal(task_id))
    tenants.push(tenant, task_id, record.expire_at or 0, now, head=True)
    tenants.queued += 1
