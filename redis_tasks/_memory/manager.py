"""``InMemoryTaskManager``: the process-local reference implementation.

It keeps the same record the Redis backend keeps and follows the Lua scripts
step for step (each method names the script it mirrors), so the one contract
suite holds both to the same semantics. Its work queue
(:class:`~.work_queue.InMemoryWorkQueue`) does the same for the work streams,
claims and leases, on the records the manager hands it (:mod:`.records`), so a
:class:`Worker` runs on it as on Redis, reclaim and fencing included. It keeps
nothing across a restart; it is for tests, development and simulation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, Self

from redis_tasks._base import NewTask, Outcome, TaskManagerBase
from redis_tasks._codes import ReturnCode, error_for
from redis_tasks._errors import CapacityError, TaskNotFoundError
from redis_tasks._events import InMemoryEventPublisher, TaskEventPublisher
from redis_tasks._ids import parse_task_id
from redis_tasks._limits import Limits
from redis_tasks._models import Task
from redis_tasks._plans import PlanPolicy
from redis_tasks._record import (
    FIELD_BINDING,
    FIELD_CANCEL_REQUESTED,
    FIELD_CREATED_AT,
    FIELD_ENDPOINT,
    FIELD_EXPIRES_AT,
    FIELD_FENCE,
    FIELD_LEASE_DEADLINE,
    FIELD_MESSAGE,
    FIELD_METADATA,
    FIELD_OPEN_QUOTA,
    FIELD_OPERATION,
    FIELD_ORIGIN,
    FIELD_PAYLOAD,
    FIELD_POLL_INTERVAL,
    FIELD_STATUS,
    FIELD_TENANT,
    FIELD_TENANT_CAP,
    FIELD_TRACE_CONTEXT,
    FIELD_TTL,
    FIELD_UPDATED_AT,
    FIELD_WORK_ENTRY,
    SNAPSHOT_FIELDS,
    EncodedAnswer,
    EncodedRequest,
    decode_answers,
    decode_task,
)
from redis_tasks._signals import newcomer_signal
from redis_tasks._status import TaskStatus
from redis_tasks._work_queue import WorkQueue

from .records import TERMINAL as _TERMINAL
from .records import Record, TaskRecords
from .waiting import accept_answers
from .work_queue import InMemoryWorkQueue

__all__ = ["InMemoryTaskManager"]

_WORKING = TaskStatus.WORKING.value.encode()
_INPUT_REQUIRED = TaskStatus.INPUT_REQUIRED.value.encode()
_CANCELLED = TaskStatus.CANCELLED.value.encode()


def _flat(pairs: Mapping[bytes, bytes]) -> list[bytes]:
    return [item for pair in pairs.items() for item in pair]


class InMemoryTaskManager(TaskManagerBase):
    """A process-local task manager with bounded defaults.

    Defaults: 1,024 retained tasks, 1 h TTL, 1 s poll interval. A live task is
    never evicted: creating one more than ``max_tasks`` raises
    :class:`CapacityError` (expired tasks are purged first). ``clock`` returns
    seconds since the epoch and can be replaced to drive time in tests.
    Not thread-safe across event loops beyond the internal lock; one loop is
    the intended use.
    """

    def __init__(
        self,
        *,
        limits: Limits | None = None,
        max_tasks: int = 1024,
        partitions: int = 16,
        clock: Callable[[], float] = time.time,
        fair_dispatch: bool = True,
        whole_task_ids: bool = False,
        plans: PlanPolicy | None = None,
    ) -> None:
        super().__init__(
            limits,
            partitions,
            fair_dispatch=fair_dispatch,
            whole_task_ids=whole_task_ids,
            plans=plans,
        )
        if max_tasks < 1:
            raise ValueError("max_tasks must be >= 1")
        self._max_tasks = max_tasks
        self._publisher = InMemoryEventPublisher()
        self._signals = InMemoryEventPublisher()
        self._records = records = TaskRecords(clock, self._publisher, self._signals)
        # The same dict and lock as the records' (tests look at _tasks directly).
        self._tasks = records.tasks
        self._lock = records.lock
        # After the encoder: the queue encodes its poison error once.
        self._queue = InMemoryWorkQueue(records, self._encoder)

    async def __aenter__(self) -> Self:
        """Nothing to start; provided for symmetry with the Redis backend."""
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop event delivery."""
        await self._publisher.aclose()
        await self._signals.aclose()

    @property
    def event_publisher(self) -> TaskEventPublisher:
        """The in-process publisher (same instance for the manager's lifetime)."""
        return self._publisher

    @property
    def work_queue(self) -> WorkQueue:
        """The work queue workers read and claim from (same instance for the lifetime)."""
        return self._queue

    def __len__(self) -> int:
        """Tasks currently retained, expired ones excluded."""
        with self._lock:
            self._records.purge_expired()
            return len(self._tasks)

    # -- helpers -------------------------------------------------------------------

    def _live(self, task_id: str) -> Record | None:
        # The record as every operation sees it (tests look at the reference's state).
        return self._records.live(task_id)

    def _authorized(self, task_id: str, endpoint: bytes, binding: bytes) -> Record | None:
        record = self._records.live(task_id)
        if record is None:
            return None
        if record.fields[FIELD_ENDPOINT] != endpoint or record.fields[FIELD_BINDING] != binding:
            return None
        return record

    # -- the contract's hooks (input valid and encoded: see redis_tasks._base) ---------

    async def _find(self, task_id: str, endpoint: bytes, binding: bytes) -> Task | None:
        """Mirror of ``find.lua``."""
        with self._lock:
            record = self._authorized(task_id, endpoint, binding)
            if record is None:
                return None
            fields = [record.fields.get(name) for name in SNAPSHOT_FIELDS]
            requests = (
                _flat(record.requests) if record.fields[FIELD_STATUS] == _INPUT_REQUIRED else []
            )
        return decode_task(task_id, fields, requests)

    async def _update(
        self, task_id: str, endpoint: bytes, binding: bytes, answers: list[EncodedAnswer]
    ) -> None:
        """Mirror of ``update.lua``."""
        with self._lock:
            record = self._authorized(task_id, endpoint, binding)
            if record is None:
                raise TaskNotFoundError()
            accept_answers(self._records, self._queue, record, task_id, answers, fair=self._fair)

    async def _request_cancel(self, task_id: str, endpoint: bytes, binding: bytes) -> bool:
        """Mirror of ``request_cancel.lua``; whether it ended the task."""
        with self._lock:
            record = self._authorized(task_id, endpoint, binding)
            if record is None:
                raise TaskNotFoundError()
            if (
                record.fields[FIELD_STATUS] in _TERMINAL
                or record.fields.get(FIELD_CANCEL_REQUESTED) == b"1"
            ):
                return False
            record.fields[FIELD_CANCEL_REQUESTED] = b"1"
            deadline = record.fields.get(FIELD_LEASE_DEADLINE)
            if deadline is not None and int(deadline) > self._records.now():
                self._records.emit(task_id)  # a worker holds it: it hears of it
                self._records.signal(task_id)
                return False
            # Nobody holds it: ended here, as the claim that met it would end it.
            entry = record.fields.get(FIELD_WORK_ENTRY)
            self._queue.terminate(
                record,
                task_id,
                None if entry is None else entry.decode(),
                _CANCELLED,
                None,
                "",
                b"",
            )
            return True

    async def _create(self, new: NewTask) -> int:
        """Mirror of ``create.lua``."""
        with self._lock:
            if len(self._tasks) >= self._max_tasks:
                self._records.purge_expired()
                if len(self._tasks) >= self._max_tasks:
                    raise CapacityError(f"the manager already retains {self._max_tasks} tasks")
            partition = parse_task_id(new.task_id)
            assert partition is not None  # the base generated it
            now = self._records.now()
            admitted = new.admission
            tenants = self._queue.partition(partition).tenants
            tenant = admitted.tenant
            if admitted.max_open and tenants.open_count(tenant, now) >= admitted.max_open:
                raise error_for(ReturnCode.QUOTA)
            arrival = 0
            if admitted.rate_us:
                now_us = int(self._records.clock() * 1_000_000)
                arrival = tenants.arrival(tenant, now_us)
                early = arrival - now_us - admitted.burst_us
                if early > 0:
                    raise error_for(ReturnCode.RATE, str(-(-early // 1000)).encode())
            fields = {
                FIELD_STATUS: _WORKING,
                FIELD_CREATED_AT: str(now).encode(),
                FIELD_UPDATED_AT: str(now).encode(),
                FIELD_TTL: str(new.ttl_ms).encode(),
                FIELD_POLL_INTERVAL: str(new.poll_ms).encode(),
                FIELD_ENDPOINT: new.endpoint,
                FIELD_BINDING: new.binding,
                FIELD_ORIGIN: new.origin,
                FIELD_PAYLOAD: new.payload,
                FIELD_FENCE: b"0",
                FIELD_TENANT: tenant.encode(),
            }
            newcomer = self._queue.enqueue(
                partition,
                tenant,
                admitted.settings,
                new.task_id,
                now + new.ttl_ms if new.ttl_ms else None,
                fields,
                fair=self._fair,
            )
            if admitted.max_open:
                fields[FIELD_OPEN_QUOTA] = b"1"
                expire = now + new.ttl_ms if new.ttl_ms else None
                tenants.add_open(tenant, new.task_id, expire, now)
            if admitted.cap:
                fields[FIELD_TENANT_CAP] = str(admitted.cap).encode()
            if admitted.rate_us:
                tenants.arrivals[tenant] = arrival + admitted.rate_us
            if new.metadata:
                fields[FIELD_METADATA] = new.metadata
            if new.trace_context:
                fields[FIELD_TRACE_CONTEXT] = new.trace_context
            expire_at = now + new.ttl_ms if new.ttl_ms else None
            if expire_at is not None:
                fields[FIELD_EXPIRES_AT] = str(expire_at).encode()
            self._tasks[new.task_id] = Record(fields, expire_at)
            self._records.emit(new.task_id)
            if newcomer:
                self._records.signal(newcomer_signal(new.task_id))
        return now

    async def _set_working(self, task_id: str, fence: bytes, message: bytes | None) -> None:
        """Mirror of ``set_status.lua``."""
        with self._lock:
            record = self._records.guarded(task_id, fence)
            status = record.fields[FIELD_STATUS]
            if status == _WORKING and record.fields.get(FIELD_MESSAGE) == message:
                return
            record.fields[FIELD_STATUS] = _WORKING
            self._records.set_message(record, message)
            self._records.touch(record, self._records.now())
            record.requests.clear()
            self._records.emit(task_id)

    async def _request_input(
        self, task_id: str, fence: bytes, message: bytes | None, requests: list[EncodedRequest]
    ) -> dict[str, Any]:
        """Mirror of ``request_input.lua``."""
        with self._lock:
            record = self._records.guarded(task_id, fence)
            for request in requests:
                issued = record.issued.get(request.key)
                if issued is not None and issued != request.fingerprint:
                    raise error_for(ReturnCode.KEY_REUSED, request.key)
            answers: dict[bytes, bytes] = {}
            pending: dict[bytes, bytes] = {}
            for request in requests:
                record.issued.setdefault(request.key, request.fingerprint)
                recorded = record.journal.get(request.key)
                if recorded is not None:
                    answers[request.key] = recorded
                    record.answers.pop(request.key, None)
                else:
                    pending[request.key] = request.body
            status = record.fields[FIELD_STATUS]
            if not pending:
                if status == _INPUT_REQUIRED:
                    record.requests.clear()
                    record.fields[FIELD_STATUS] = _WORKING
                    record.fields.pop(FIELD_MESSAGE, None)
                    self._records.touch(record, self._records.now())
                    self._records.emit(task_id)
            elif not (
                status == _INPUT_REQUIRED
                and record.fields.get(FIELD_MESSAGE) == message
                and record.requests.keys() == pending.keys()
            ):
                record.requests = pending
                record.fields[FIELD_STATUS] = _INPUT_REQUIRED
                self._records.set_message(record, message)
                self._records.touch(record, self._records.now())
                self._records.emit(task_id)
        return decode_answers(_flat(answers))

    async def _take_answers(self, task_id: str, fence: bytes) -> dict[str, Any]:
        """Mirror of ``take_answers.lua``."""
        with self._lock:
            record = self._records.guarded(task_id, fence)
            taken, record.answers = record.answers, {}
        return decode_answers(_flat(taken))

    async def _finish(self, task_id: str, outcome: Outcome) -> None:
        """Mirror of ``finish.lua``."""
        status = outcome.status.value.encode()
        field = outcome.result_field.decode()
        with self._lock:
            record = self._records.live(task_id)
            if record is not None and record.fields[FIELD_STATUS] in _TERMINAL:
                stored = record.fields.get(FIELD_OPERATION)
                if outcome.operation:
                    if stored == outcome.operation:
                        return  # this very call again: a retry after a lost reply
                elif (
                    stored is None
                    and outcome.fence == record.fields[FIELD_FENCE]
                    and record.fields[FIELD_STATUS] == status
                    and record.fields.get(FIELD_MESSAGE) == outcome.message
                    and (not field or record.fields.get(field) == outcome.value)
                ):
                    return  # the lease holder's same transition again
            record = self._records.guarded(task_id, outcome.fence)
            entry = record.fields.get(FIELD_WORK_ENTRY)
            self._queue.terminate(
                record,
                task_id,
                None if entry is None else entry.decode(),
                status,
                outcome.message,
                field,
                outcome.value,
            )
            if outcome.operation:
                record.fields[FIELD_OPERATION] = outcome.operation
            if not outcome.fence:
                self._records.signal(task_id)  # not the lease holder's: stop its run

    async def _cancel_requested(self, task_id: str, fence: bytes) -> bool:
        """Mirror of ``cancel_requested.lua``."""
        with self._lock:
            record = self._records.live(task_id)
            if record is None:
                raise TaskNotFoundError()
            if fence and fence != record.fields[FIELD_FENCE]:
                raise error_for(ReturnCode.LEASE_LOST)
            return record.fields.get(FIELD_CANCEL_REQUESTED) == b"1"
