"""The in-memory backend's task records, and the one lock and clock over them.

A :class:`Record` holds what the Redis backend keeps in a task's hash and in its
four input-round hashes (requests, issued keys, answers, the journal).
:class:`TaskRecords` holds every record with what both the manager and its work
queue need to read and write them as the scripts do: the lock that guards the
records and the streams together, the clock, the lookups every script starts with
(``live``; ``guarded``, the mirror of ``worker_guard``) and the event hint. The
manager makes it and hands it to the queue, which so reaches the records through
it rather than through the manager.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from redis_tasks._codes import ReturnCode, error_for
from redis_tasks._errors import TaskNotFoundError
from redis_tasks._events import InMemoryEventPublisher
from redis_tasks._ids import parse_task_id
from redis_tasks._record import FIELD_FENCE, FIELD_MESSAGE, FIELD_STATUS, FIELD_UPDATED_AT
from redis_tasks._status import TERMINAL_STATUSES

__all__ = ["TERMINAL", "Record", "TaskRecords"]

#: Stored status values that are terminal.
TERMINAL: Final = frozenset(status.value.encode() for status in TERMINAL_STATUSES)


@dataclass(slots=True)
class Record:
    """One task: its hash's fields and its input rounds, and when it expires (ms)."""

    fields: dict[str, bytes]
    expire_at: int | None
    requests: dict[bytes, bytes] = field(default_factory=dict)
    issued: dict[bytes, bytes] = field(default_factory=dict)
    answers: dict[bytes, bytes] = field(default_factory=dict)
    journal: dict[bytes, bytes] = field(default_factory=dict)


class TaskRecords:
    """Every retained task's :class:`Record`, by ID, with the lock, the clock and the
    event publisher of one in-memory manager (see the module).

    Callers hold :attr:`lock` around every method but :meth:`now`.
    """

    __slots__ = ("clock", "lock", "publisher", "signals", "tasks")

    def __init__(
        self,
        clock: Callable[[], float],
        publisher: InMemoryEventPublisher,
        signals: InMemoryEventPublisher,
    ) -> None:
        #: Seconds since the epoch (replaceable to drive time in tests).
        self.clock = clock
        #: Guards the records and the work streams together.
        self.lock = threading.Lock()
        self.publisher = publisher
        #: The work queue's signals: the changes a running task's worker must see.
        self.signals = signals
        self.tasks: dict[str, Record] = {}

    def now(self) -> int:
        """The clock in ms."""
        return int(self.clock() * 1000)

    def purge_expired(self) -> None:
        """Forget every record past its expiry."""
        now = self.now()
        expired = [
            k for k, r in self.tasks.items() if r.expire_at is not None and now > r.expire_at
        ]
        for task_id in expired:
            del self.tasks[task_id]

    def live(self, task_id: str) -> Record | None:
        """The task's record, ``None`` for a malformed, unknown or expired ID."""
        if parse_task_id(task_id) is None:
            return None
        record = self.tasks.get(task_id)
        if record is not None and record.expire_at is not None and self.now() > record.expire_at:
            # Like a Redis key past its PEXPIREAT: gone for every operation.
            del self.tasks[task_id]
            return None
        return record

    def guarded(self, task_id: str, fence: bytes) -> Record:
        """Mirror of ``worker_guard``: unknown, then stale fence, then terminal."""
        record = self.live(task_id)
        if record is None:
            raise TaskNotFoundError()
        if fence and fence != record.fields[FIELD_FENCE]:
            raise error_for(ReturnCode.LEASE_LOST)
        if record.fields[FIELD_STATUS] in TERMINAL:
            raise error_for(ReturnCode.TERMINAL)
        return record

    @staticmethod
    def touch(record: Record, now: int) -> None:
        """Move the record's update time to ``now``, never back."""
        previous = int(record.fields[FIELD_UPDATED_AT])
        record.fields[FIELD_UPDATED_AT] = str(max(now, previous)).encode()

    @staticmethod
    def set_message(record: Record, message: bytes | None) -> None:
        """Set the status message, or remove it (``None``)."""
        if message is None:
            record.fields.pop(FIELD_MESSAGE, None)
        else:
            record.fields[FIELD_MESSAGE] = message

    def emit(self, task_id: str) -> None:
        """The task changed: hint its listeners (delivered on a later loop turn)."""
        self.publisher.notify(task_id)

    def signal(self, signal: str) -> None:
        """A signal, as the scripts that write the signal stream send it: a task's ID
        (it changed in a way its running worker must see: a cancellation asked,
        answers accepted, an outcome written by another caller), or a newcomer's
        (:func:`redis_tasks._signals.newcomer_signal`)."""
        self.signals.notify(signal)
