"""``TaskManagerBase``: the contract's public methods, validated and encoded once.

Both backends used to open every operation with the same prologue (check the
request context, encode the status message, the fence, the origin...), seven
times over. That prologue is the contract's, not a backend's: here it runs once,
and a backend implements only the hooks, which receive input that is already
valid and encoded, so nothing a caller passes can reach storage unchecked.

Terminal transitions also get their *operation ID* here (see :class:`Outcome`).
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from ._errors import CapacityError
from ._events import TaskEventPublisher
from ._ids import MAX_PARTITIONS, new_task_id, task_ref
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
from ._plans import PlanPolicy, TenantPlan, check_policy, plan_terms, resolve_plan
from ._record import EncodedAnswer, EncodedRequest, Encoder, created_task
from ._status import TaskStatus
from ._telemetry.metrics import METRICS
from ._telemetry.traces import TRACES
from ._tenancy import Admission, admission, home_partition

__all__ = ["NewTask", "Outcome", "TaskManagerBase"]

#: Bytes of randomness in an unfenced call's operation ID.
_OPERATION_BYTES: Final = 8


@dataclass(frozen=True, slots=True)
class NewTask:
    """A task to create, validated and encoded."""

    task_id: str = field(repr=False)  # a capability: never in a repr
    endpoint: bytes
    binding: bytes
    origin: bytes = field(repr=False)
    payload: bytes = field(repr=False)
    ttl_ms: int
    poll_ms: int
    metadata: bytes = field(repr=False)
    #: The task's tenant and the limits that apply to it (digests only).
    admission: Admission = field(repr=False)
    #: The ``create_task`` span's W3C trace context, stored with the work so the
    #: worker's span can link to it (empty: none, and nothing is stored).
    trace_context: bytes = b""


@dataclass(frozen=True, slots=True)
class Outcome:
    """A terminal transition, validated and encoded.

    ``operation`` tells this call from any other: a retry of the same call (a
    lost reply, sent again with the same arguments) is accepted as done, and any
    other call finds the task terminal, even one that asks for the identical
    outcome. A worker's calls are told apart by their fence (one lease, one
    caller), so ``operation`` is empty for them and nothing more is stored; an
    unfenced call gets random bytes, which the record keeps once it wins.
    """

    status: TaskStatus
    message: bytes | None
    fence: bytes
    result_field: bytes  # where the outcome goes: b"rs" (result), b"er" (error), b"" (none)
    value: bytes = field(repr=False)
    operation: bytes


class TaskManagerBase(ABC):
    """The :class:`TaskManager` contract over backend hooks (see the module)."""

    def __init__(
        self,
        limits: Limits | None,
        partitions: int,
        *,
        fair_dispatch: bool = True,
        whole_task_ids: bool = False,
        plans: PlanPolicy | None = None,
    ) -> None:
        if not 1 <= partitions <= MAX_PARTITIONS:
            raise ValueError(f"partitions must be in 1..{MAX_PARTITIONS}")
        self._encoder = Encoder(limits or Limits())
        check_policy(self._encoder.limits, plans)
        self._plans = plans
        self._partitions = partitions
        self._fair = bool(fair_dispatch)
        self._whole_task_ids = bool(whole_task_ids)

    @property
    def limits(self) -> Limits:
        """The bounds this manager validates input against."""
        return self._encoder.limits

    @property
    def partitions(self) -> int:
        """How many partitions new tasks are spread over."""
        return self._partitions

    @property
    def fair_dispatch(self) -> bool:
        """Whether work that cannot start at once waits in its tenant's queue and is
        dispatched in weighted round-robin across tenants (the default), rather than
        first come, first served."""
        return self._fair

    @property
    def whole_task_ids(self) -> bool:
        """Whether logs and spans name tasks by their whole ID (``whole_task_ids=True``:
        for deployments where every task is bound to an authenticated principal)
        rather than by their reference, ``11.Wt0jM9`` (the default: on a server
        without authentication the ID alone reaches the task). Workers and the MCP
        extension on this manager follow it."""
        return self._whole_task_ids

    @property
    @abstractmethod
    def event_publisher(self) -> TaskEventPublisher:
        """The manager's publisher: the same instance for its whole lifetime."""

    # -- client-facing ---------------------------------------------------------------

    async def find_task(self, ctx: TaskRequestContext) -> Task | None:
        """The authorized snapshot, or ``None`` for an unknown, expired or unauthorized task."""
        endpoint, binding = self._encoder.binding(ctx.request)
        return await self._find(ctx.task_id, endpoint, binding)

    async def update_task(self, ctx: TaskUpdateContext) -> None:
        """Accept answers to outstanding input requests; others are ignored.

        Raises :class:`TaskNotFoundError` for an unknown or unauthorized task.
        """
        endpoint, binding = self._encoder.binding(ctx.request)
        answers = self._encoder.input_responses(ctx.input_responses)
        await self._update(ctx.task_id, endpoint, binding, answers)

    async def request_cancellation(self, ctx: TaskRequestContext) -> None:
        """Record durable cancellation intent; terminal tasks accept it idempotently.
        A task no worker holds (waiting for one, or whose lease ran out) ends
        ``cancelled`` at once, as the claim that met it would end it.

        Raises :class:`TaskNotFoundError` for an unknown or unauthorized task.
        """
        endpoint, binding = self._encoder.binding(ctx.request)
        if await self._request_cancel(ctx.task_id, endpoint, binding):
            METRICS.task_ended(TaskStatus.CANCELLED.value)

    # -- application-facing ----------------------------------------------------------

    async def create_task(
        self,
        request: RequestContext,
        origin: TaskOrigin,
        *,
        payload: bytes | Callable[[str], bytes] = b"",
        ttl: timedelta | None = None,
        poll_interval: timedelta | None = None,
        metadata: Mapping[str, Any] | None = None,
        tenant: str | None = None,
        weight: int | None = None,
        plan: TenantPlan | None = None,
    ) -> Task:
        """Create a ``working`` task bound to ``request`` and enqueue its work atomically.

        Returns once ``find_task`` from any process sees it. ``ttl=None`` and
        ``poll_interval=None`` take the configured defaults.

        The task counts against ``tenant`` (default: its binding, ``request``'s
        endpoint and partition key) for fair dispatch and the limits of the
        tenant's plan: ``plan`` when given, else what the manager's ``plans``
        policy gives for ``tenant``, else the default plan (the per-tenant fields
        of :class:`Limits`; see :class:`TenantPlan`). ``weight`` (default: the
        plan's) is the tenant's share of the workers while tenants compete (a
        tenant of weight 3 starts three tasks for one of a tenant of weight 1).
        Raises :class:`QuotaExceededError` when a tenant's quota or rate refuses
        the task, :class:`CapacityError` when there is no room (Redis out of
        memory), and :class:`ValidationError` or :class:`LimitExceededError` for a
        bad tenant, weight or plan; nothing is stored then. ``payload`` may be a
        callable: it is given the new task's ID, before anything is stored, and returns
        the payload (for one bound to its task, such as a seal whose associated data
        names it).
        """
        encoder = self._encoder
        endpoint, binding = encoder.binding(request)
        origin_bytes = encoder.origin(origin)
        payload_bytes = b"" if callable(payload) else encoder.payload(payload)
        ttl_ms, poll_ms = encoder.ttl_ms(ttl), encoder.poll_ms(poll_interval)
        metadata_bytes = encoder.metadata(metadata)
        limits = encoder.limits
        named_tenant = tenant if isinstance(tenant, str) else None
        chosen, named = resolve_plan(limits, self._plans, named_tenant, plan)
        terms = plan_terms(limits, chosen, weight, named=named)
        admitted = admission(limits, endpoint, binding, tenant, terms)
        partitions = self._partitions
        task_id = new_task_id(
            partitions, home_partition(admitted.tenant, partitions) if admitted.home else None
        )
        if callable(payload):
            # Made for this task's ID (a seal bound to its task): checked as any payload.
            payload_bytes = encoder.payload(payload(task_id))
        # After validation: a call that stores nothing makes no span either.
        span = TRACES.create_span(task_ref(task_id, whole=self._whole_task_ids))
        new = NewTask(
            task_id=task_id,
            endpoint=endpoint,
            binding=binding,
            origin=origin_bytes,
            payload=payload_bytes,
            ttl_ms=ttl_ms,
            poll_ms=poll_ms,
            metadata=metadata_bytes,
            admission=admitted,
            trace_context=b"" if span is None else span.carrier,
        )
        try:
            if span is None:
                created_at = await self._create(new)
            else:
                with span:
                    created_at = await self._create(new)
        except CapacityError as exc:  # refused, nothing stored: counted by reason
            METRICS.create_refused(exc.reason)
            raise
        METRICS.task_created()
        return created_task(new.task_id, created_at, new.ttl_ms, new.poll_ms, origin, new.metadata)

    async def mark_working(
        self, task_id: str, status_message: str | None = None, *, fence: int | None = None
    ) -> None:
        """Set ``working`` with ``status_message``; supersedes outstanding input requests."""
        message = self._encoder.status_message(status_message)
        await self._set_working(task_id, self._encoder.fence(fence), message)

    async def request_input(
        self,
        task_id: str,
        requests: Mapping[str, InputRequest],
        status_message: str | None = None,
        *,
        fence: int | None = None,
    ) -> dict[str, Any]:
        """Ask the client for input; returns recorded answers to keys answered before."""
        encoded = self._encoder.input_requests(requests)
        message = self._encoder.status_message(status_message)
        return await self._request_input(task_id, self._encoder.fence(fence), message, encoded)

    async def take_input_responses(
        self, task_id: str, *, fence: int | None = None
    ) -> dict[str, Any]:
        """Take the answers accepted since the last take."""
        return await self._take_answers(task_id, self._encoder.fence(fence))

    async def complete_task(
        self,
        task_id: str,
        result: dict[str, Any],
        status_message: str | None = None,
        *,
        fence: int | None = None,
    ) -> None:
        """End the task ``completed`` with ``result``."""
        value = self._encoder.result(result)
        await self._end(task_id, TaskStatus.COMPLETED, status_message, fence, b"rs", value)

    async def fail_task(
        self,
        task_id: str,
        error: JsonRpcError,
        status_message: str | None = None,
        *,
        fence: int | None = None,
    ) -> None:
        """End the task ``failed`` with a JSON-RPC ``error``."""
        value = self._encoder.error(error)
        await self._end(task_id, TaskStatus.FAILED, status_message, fence, b"er", value)

    async def cancel_task(
        self, task_id: str, status_message: str | None = None, *, fence: int | None = None
    ) -> None:
        """End the task ``cancelled``."""
        await self._end(task_id, TaskStatus.CANCELLED, status_message, fence, b"", b"")

    async def is_cancellation_requested(self, task_id: str, *, fence: int | None = None) -> bool:
        """Whether a client asked to cancel the task."""
        return await self._cancel_requested(task_id, self._encoder.fence(fence))

    async def _end(
        self,
        task_id: str,
        status: TaskStatus,
        status_message: str | None,
        fence: int | None,
        outcome_field: bytes,
        value: bytes,
    ) -> None:
        message = self._encoder.status_message(status_message)
        fence_bytes = self._encoder.fence(fence)
        operation = b"" if fence_bytes else secrets.token_hex(_OPERATION_BYTES).encode()
        outcome = Outcome(status, message, fence_bytes, outcome_field, value, operation)
        await self._finish(task_id, outcome)
        METRICS.task_ended(status.value)

    # -- the backend's hooks: input valid and encoded ------------------------------

    @abstractmethod
    async def _find(self, task_id: str, endpoint: bytes, binding: bytes) -> Task | None:
        """The snapshot if ``(endpoint, binding)`` may see the task, else ``None``."""

    @abstractmethod
    async def _update(
        self, task_id: str, endpoint: bytes, binding: bytes, answers: list[EncodedAnswer]
    ) -> None:
        """Record the answers that match an outstanding request."""

    @abstractmethod
    async def _request_cancel(self, task_id: str, endpoint: bytes, binding: bytes) -> bool:
        """Record cancellation intent, or end a task no worker holds; whether it ended."""

    @abstractmethod
    async def _create(self, new: NewTask) -> int:
        """Store, enqueue and announce ``new``; its creation time (ms since the epoch)."""

    @abstractmethod
    async def _set_working(self, task_id: str, fence: bytes, message: bytes | None) -> None:
        """Set ``working`` with ``message``."""

    @abstractmethod
    async def _request_input(
        self, task_id: str, fence: bytes, message: bytes | None, requests: list[EncodedRequest]
    ) -> dict[str, Any]:
        """Make ``requests`` the outstanding round; answers recorded before."""

    @abstractmethod
    async def _take_answers(self, task_id: str, fence: bytes) -> dict[str, Any]:
        """Take the answers accepted since the last take."""

    @abstractmethod
    async def _finish(self, task_id: str, outcome: Outcome) -> None:
        """The terminal transition."""

    @abstractmethod
    async def _cancel_requested(self, task_id: str, fence: bytes) -> bool:
        """Whether cancellation was requested."""
