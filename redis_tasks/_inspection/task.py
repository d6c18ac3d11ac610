"""One task's bookkeeping, as ``inspect TASK_ID`` shows it (``inspect_task``'s reply),
and the tasks a reference matches (``inspect REFERENCE``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["TaskInspection", "TaskMatches"]


@dataclass(frozen=True, slots=True)
class TaskInspection:
    """One task's bookkeeping, as an operator needs it to tell what happens to it.

    Times are ms on the server's clock. ``entry_state`` is ``"waiting"`` (no
    worker read it yet), ``"delivered"`` (pending with ``entry_consumer``),
    ``"leased"`` (a batch claim took it straight from its tenant's queue: no work
    entry, its lease held by ``entry_consumer`` in the partition's lease set),
    ``"queued"`` (in its tenant's queue, no entry yet), ``"parked"`` (waiting for
    its client's input, held by no worker: the answer queues it again) or ``None``
    (no work entry: the task ended, or it is gone); ``tenant`` is its tenant's
    digest, ``parks`` how many times it was parked. Never the
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
    parks: int = 0

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


@dataclass(frozen=True, slots=True)
class TaskMatches:
    """The live tasks whose ID starts with a reference (``11.Wt0jM9``), in its partition.

    ``task_ids`` are whole IDs, sorted; the lookup runs with Redis credentials, which
    reach every task anyway. ``complete`` is ``False`` when the lookup stopped
    before it had looked at every key of the partition (too many matches, or its
    budget of keys spent): more tasks may match, and a longer prefix narrows it.
    """

    partition: int
    task_ids: tuple[str, ...]
    complete: bool
