"""``InMemoryTaskManager``: the process-local reference implementation.

It keeps the same record the Redis backend keeps and follows the Lua scripts
step for step (each method names the script it mirrors), so the one contract
suite holds both to the same semantics. It has no work queue, leases or
crash recovery; it is for tests, development and simulation.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any, Self

from ._codes import ReturnCode, error_for
from ._errors import CapacityError, TaskNotFoundError
from ._events import InMemoryEventPublisher, TaskEventPublisher
from ._ids import MAX_PARTITIONS, new_task_id, parse_task_id
from ._limits import Limits
from ._models import (
    InputRequest,
    JsonRpcError,
    RequestContext,
    Task,
    TaskRequestContext,
    TaskUpdateContext,
)
from ._origin import TaskOrigin
from ._record import SNAPSHOT_FIELDS, Encoder, created_task, decode_answers, decode_task
from ._status import TERMINAL_STATUSES, TaskStatus

__all__ = ["InMemoryTaskManager"]

_TERMINAL = frozenset(status.value.encode() for status in TERMINAL_STATUSES)
_WORKING = TaskStatus.WORKING.value.encode()
_INPUT_REQUIRED = TaskStatus.INPUT_REQUIRED.value.encode()


@dataclass(slots=True)
class _Record:
    fields: dict[str, bytes]
    expire_at: int | None
    requests: dict[bytes, bytes] = field(default_factory=dict)
    issued: dict[bytes, bytes] = field(default_factory=dict)
    answers: dict[bytes, bytes] = field(default_factory=dict)
    journal: dict[bytes, bytes] = field(default_factory=dict)


def _flat(pairs: Mapping[bytes, bytes]) -> list[bytes]:
    return [item for pair in pairs.items() for item in pair]


class InMemoryTaskManager:
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
    ) -> None:
        if max_tasks < 1 or not 1 <= partitions <= MAX_PARTITIONS:
            raise ValueError(f"max_tasks must be >= 1 and partitions in 1..{MAX_PARTITIONS}")
        self._encoder = Encoder(limits or Limits())
        self._max_tasks = max_tasks
        self._partitions = partitions
        self._clock = clock
        self._tasks: dict[str, _Record] = {}
        self._lock = threading.Lock()
        self._publisher = InMemoryEventPublisher()

    @property
    def limits(self) -> Limits:
        """The bounds this manager validates input against."""
        return self._encoder.limits

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

    @property
    def event_publisher(self) -> TaskEventPublisher:
        """The in-process publisher (same instance for the manager's lifetime)."""
        return self._publisher

    def __len__(self) -> int:
        """Tasks currently retained, expired ones excluded."""
        with self._lock:
            self._purge_expired()
            return len(self._tasks)

    # -- helpers -------------------------------------------------------------------

    def _now(self) -> int:
        return int(self._clock() * 1000)

    def _purge_expired(self) -> None:
        now = self._now()
        expired = [
            k for k, r in self._tasks.items() if r.expire_at is not None and now > r.expire_at
        ]
        for task_id in expired:
            del self._tasks[task_id]

    def _live(self, task_id: str) -> _Record | None:
        if parse_task_id(task_id) is None:
            return None
        record = self._tasks.get(task_id)
        if record is not None and record.expire_at is not None and self._now() > record.expire_at:
            # Like a Redis key past its PEXPIREAT: gone for every operation.
            del self._tasks[task_id]
            return None
        return record

    def _authorized(self, task_id: str, endpoint: bytes, binding: bytes) -> _Record | None:
        record = self._live(task_id)
        if record is None:
            return None
        if record.fields["ep"] != endpoint or record.fields["pk"] != binding:
            return None
        return record

    def _guarded(self, task_id: str, fence: bytes) -> _Record:
        """Mirror of ``worker_guard``: unknown, then stale fence, then terminal."""
        record = self._live(task_id)
        if record is None:
            raise TaskNotFoundError()
        if fence and fence != record.fields["fn"]:
            raise error_for(ReturnCode.LEASE_LOST)
        if record.fields["st"] in _TERMINAL:
            raise error_for(ReturnCode.TERMINAL)
        return record

    def _touch(self, record: _Record, now: int) -> None:
        previous = int(record.fields["ua"])
        record.fields["ua"] = str(max(now, previous)).encode()

    def _set_message(self, record: _Record, message: bytes | None) -> None:
        if message is None:
            record.fields.pop("sm", None)
        else:
            record.fields["sm"] = message

    def _emit(self, task_id: str) -> None:
        self._publisher.notify(task_id)

    # -- client-facing ---------------------------------------------------------------

    async def find_task(self, ctx: TaskRequestContext) -> Task | None:
        """Mirror of ``find.lua``."""
        endpoint, binding = self._encoder.binding(ctx.request)
        with self._lock:
            record = self._authorized(ctx.task_id, endpoint, binding)
            if record is None:
                return None
            fields = [record.fields.get(name) for name in SNAPSHOT_FIELDS]
            requests = _flat(record.requests) if record.fields["st"] == _INPUT_REQUIRED else []
        return decode_task(ctx.task_id, fields, requests)

    async def update_task(self, ctx: TaskUpdateContext) -> None:
        """Mirror of ``update.lua``."""
        endpoint, binding = self._encoder.binding(ctx.request)
        answers = self._encoder.input_responses(ctx.input_responses)
        with self._lock:
            record = self._authorized(ctx.task_id, endpoint, binding)
            if record is None:
                raise TaskNotFoundError()
            if record.fields["st"] != _INPUT_REQUIRED:
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
            self._touch(record, self._now())
            if not record.requests:
                record.fields["st"] = _WORKING
                record.fields.pop("sm", None)
            self._emit(ctx.task_id)

    async def request_cancellation(self, ctx: TaskRequestContext) -> None:
        """Mirror of ``request_cancel.lua``."""
        endpoint, binding = self._encoder.binding(ctx.request)
        with self._lock:
            record = self._authorized(ctx.task_id, endpoint, binding)
            if record is None:
                raise TaskNotFoundError()
            if record.fields["st"] in _TERMINAL or record.fields.get("cx") == b"1":
                return
            record.fields["cx"] = b"1"
            self._emit(ctx.task_id)

    # -- application-facing ----------------------------------------------------------

    async def create_task(
        self,
        request: RequestContext,
        origin: TaskOrigin,
        *,
        payload: bytes = b"",
        ttl: timedelta | None = None,
        poll_interval: timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Task:
        """Mirror of ``create.lua`` (without a work queue)."""
        encoder = self._encoder
        endpoint, binding = encoder.binding(request)
        origin_bytes = encoder.origin(origin)
        payload_bytes = encoder.payload(payload)
        ttl_ms = encoder.ttl_ms(ttl)
        poll_ms = encoder.poll_ms(poll_interval)
        metadata_bytes = encoder.metadata(metadata)
        with self._lock:
            if len(self._tasks) >= self._max_tasks:
                self._purge_expired()
                if len(self._tasks) >= self._max_tasks:
                    raise CapacityError(f"the manager already retains {self._max_tasks} tasks")
            task_id = new_task_id(self._partitions)
            now = self._now()
            fields = {
                "st": _WORKING,
                "ca": str(now).encode(),
                "ua": str(now).encode(),
                "ttl": str(ttl_ms).encode(),
                "pi": str(poll_ms).encode(),
                "ep": endpoint,
                "pk": binding,
                "or": origin_bytes,
                "pl": payload_bytes,
                "fn": b"0",
            }
            if metadata_bytes:
                fields["md"] = metadata_bytes
            expire_at = now + ttl_ms if ttl_ms else None
            if expire_at is not None:
                fields["ex"] = str(expire_at).encode()
            self._tasks[task_id] = _Record(fields, expire_at)
            self._emit(task_id)
        return created_task(task_id, now, ttl_ms, poll_ms, origin, metadata_bytes)

    async def mark_working(
        self, task_id: str, status_message: str | None = None, *, fence: int | None = None
    ) -> None:
        """Mirror of ``set_status.lua``."""
        message = self._encoder.status_message(status_message)
        fence_bytes = self._encoder.fence(fence)
        with self._lock:
            record = self._guarded(task_id, fence_bytes)
            status = record.fields["st"]
            if status == _WORKING and record.fields.get("sm") == message:
                return
            record.fields["st"] = _WORKING
            self._set_message(record, message)
            self._touch(record, self._now())
            record.requests.clear()
            self._emit(task_id)

    async def request_input(
        self,
        task_id: str,
        requests: Mapping[str, InputRequest],
        status_message: str | None = None,
        *,
        fence: int | None = None,
    ) -> dict[str, Any]:
        """Mirror of ``request_input.lua``."""
        encoded = self._encoder.input_requests(requests)
        message = self._encoder.status_message(status_message)
        fence_bytes = self._encoder.fence(fence)
        with self._lock:
            record = self._guarded(task_id, fence_bytes)
            for request in encoded:
                issued = record.issued.get(request.key)
                if issued is not None and issued != request.fingerprint:
                    raise error_for(ReturnCode.KEY_REUSED, request.key)
            answers: dict[bytes, bytes] = {}
            pending: dict[bytes, bytes] = {}
            for request in encoded:
                record.issued.setdefault(request.key, request.fingerprint)
                recorded = record.journal.get(request.key)
                if recorded is not None:
                    answers[request.key] = recorded
                    record.answers.pop(request.key, None)
                else:
                    pending[request.key] = request.body
            status = record.fields["st"]
            if not pending:
                if status == _INPUT_REQUIRED:
                    record.requests.clear()
                    record.fields["st"] = _WORKING
                    record.fields.pop("sm", None)
                    self._touch(record, self._now())
                    self._emit(task_id)
            elif not (
                status == _INPUT_REQUIRED
                and record.fields.get("sm") == message
                and record.requests.keys() == pending.keys()
            ):
                record.requests = pending
                record.fields["st"] = _INPUT_REQUIRED
                self._set_message(record, message)
                self._touch(record, self._now())
                self._emit(task_id)
        return decode_answers(_flat(answers))

    async def take_input_responses(
        self, task_id: str, *, fence: int | None = None
    ) -> dict[str, Any]:
        """Mirror of ``take_answers.lua``."""
        fence_bytes = self._encoder.fence(fence)
        with self._lock:
            record = self._guarded(task_id, fence_bytes)
            taken, record.answers = record.answers, {}
        return decode_answers(_flat(taken))

    async def complete_task(
        self,
        task_id: str,
        result: dict[str, Any],
        status_message: str | None = None,
        *,
        fence: int | None = None,
    ) -> None:
        """Mirror of ``finish.lua`` with ``completed``."""
        outcome = self._encoder.result(result)
        self._finish(task_id, TaskStatus.COMPLETED, status_message, fence, "rs", outcome)

    async def fail_task(
        self,
        task_id: str,
        error: JsonRpcError,
        status_message: str | None = None,
        *,
        fence: int | None = None,
    ) -> None:
        """Mirror of ``finish.lua`` with ``failed``."""
        outcome = self._encoder.error(error)
        self._finish(task_id, TaskStatus.FAILED, status_message, fence, "er", outcome)

    async def cancel_task(
        self, task_id: str, status_message: str | None = None, *, fence: int | None = None
    ) -> None:
        """Mirror of ``finish.lua`` with ``cancelled``."""
        self._finish(task_id, TaskStatus.CANCELLED, status_message, fence, None, b"")

    def _finish(
        self,
        task_id: str,
        status: TaskStatus,
        status_message: str | None,
        fence: int | None,
        outcome_field: str | None,
        outcome: bytes,
    ) -> None:
        message = self._encoder.status_message(status_message)
        fence_bytes = self._encoder.fence(fence)
        with self._lock:
            record = self._live(task_id)
            if (
                record is not None
                and (not fence_bytes or fence_bytes == record.fields["fn"])
                and record.fields["st"] == status.value.encode()
                and record.fields.get("sm") == message
                and (outcome_field is None or record.fields.get(outcome_field) == outcome)
            ):
                return  # the same transition again: a retry after a lost reply
            record = self._guarded(task_id, fence_bytes)
            record.fields["st"] = status.value.encode()
            self._set_message(record, message)
            if outcome_field is not None:
                record.fields[outcome_field] = outcome
            record.fields.pop("pl", None)
            self._touch(record, self._now())
            record.requests.clear()
            record.issued.clear()
            record.answers.clear()
            record.journal.clear()
            self._emit(task_id)

    async def is_cancellation_requested(self, task_id: str, *, fence: int | None = None) -> bool:
        """Mirror of ``cancel_requested.lua``."""
        fence_bytes = self._encoder.fence(fence)
        with self._lock:
            record = self._live(task_id)
            if record is None:
                raise TaskNotFoundError()
            if fence_bytes and fence_bytes != record.fields["fn"]:
                raise error_for(ReturnCode.LEASE_LOST)
            return record.fields.get("cx") == b"1"
