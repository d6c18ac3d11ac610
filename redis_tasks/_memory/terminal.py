"""The one terminal write of the in-memory backend: the twin of ``lua/includes/terminal.lua``.

Finishing a task (the manager's ``finish``) and settling it at a claim (cancelled,
or poisoned past its attempts: :mod:`.claim`) end it the same way, as the scripts
do with their one ``terminate()``.
"""

from __future__ import annotations

from typing import Final

from redis_tasks._ids import parse_task_id
from redis_tasks._record import (
    FIELD_LEASE_DEADLINE,
    FIELD_LEASE_OWNER,
    FIELD_OPEN_QUOTA,
    FIELD_PARKED,
    FIELD_PAYLOAD,
    FIELD_STATUS,
    FIELD_TENANT,
    FIELD_TENANT_CAP,
    FIELD_TRACE_CONTEXT,
    FIELD_WORK_ENTRY,
)

from .records import Record, TaskRecords
from .stream import Streams
from .work import Doorbell

__all__ = ["terminate"]

#: What a task keeps no longer once it ended (with its tenant's fields, read first).
_DROPPED: Final = (
    FIELD_PAYLOAD,
    FIELD_WORK_ENTRY,
    FIELD_LEASE_DEADLINE,
    FIELD_LEASE_OWNER,
    FIELD_TRACE_CONTEXT,
)


def terminate(
    records: TaskRecords,
    streams: Streams,
    record: Record,
    task_id: str,
    entry: str | None,
    status: bytes,
    message: bytes | None,
    outcome_field: str,
    outcome: bytes,
    doorbell: Doorbell,
) -> None:
    """Mirror of ``terminate()``: the one terminal write of finish and claim;
    acknowledges and deletes the work entry ``entry``; a parked tenant it lets back
    asks ``doorbell`` (rung at the caller's end). Callers hold the lock."""
    fields = record.fields
    tenant = fields.pop(FIELD_TENANT, None)
    open_counted, cap = fields.pop(FIELD_OPEN_QUOTA, None), fields.pop(FIELD_TENANT_CAP, None)
    parked = fields.pop(FIELD_PARKED, None) is not None
    for name in _DROPPED:
        fields.pop(name, None)
    fields[FIELD_STATUS] = status
    records.set_message(record, message)
    if outcome_field:
        fields[outcome_field] = outcome
    records.touch(record, records.now())
    record.requests.clear()
    record.issued.clear()
    record.answers.clear()
    record.journal.clear()
    partition = parse_task_id(task_id)
    assert partition is not None  # the record was found by this ID
    if entry is not None:
        streams.drop_entry(partition, entry)
    elif tenant is not None:  # queued (it leaves its tenant's queue) or parked
        tenants = streams.partition(partition).tenants
        if parked or not tenants.unqueue(tenant.decode(), task_id, records.now()):
            tenants.forget_waiting(tenant.decode(), task_id)
    if tenant is not None and (open_counted or cap):
        tenants = streams.partition(partition).tenants
        if open_counted:
            tenants.drop_open(tenant.decode(), task_id)
        # Only a task with an entry may hold a running place (see terminate()).
        if cap and entry is not None and tenants.release_slot(tenant.decode(), task_id):
            doorbell.due = True
    records.emit(task_id)
