"""``TaskManager``: the contract both backends implement."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any, Protocol, Self, runtime_checkable

from ._events import TaskEventPublisher
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
from ._plans import TenantPlan

__all__ = ["TaskManager"]


@runtime_checkable
class TaskManager(Protocol):
    """Owns task IDs, persistence, retention, binding and every state transition.

    Client-facing operations (``find_task``, ``update_task``,
    ``request_cancellation``) authorize atomically against the task's binding:
    unknown and unauthorized tasks are indistinguishable. Application-facing
    operations are trusted; the worker operations each accept ``fence=`` and
    refuse a stale one with :class:`LeaseLostError`. Every durable change emits
    one task-ID event on :attr:`event_publisher`.

    Use as ``async with manager:``; entering starts what it needs and leaving
    closes it.
    """

    async def __aenter__(self) -> Self:
        """Start the manager (connections, event tail)."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close everything the manager started."""
        ...

    @property
    def limits(self) -> Limits:
        """The bounds the manager validates input against."""
        ...

    @property
    def event_publisher(self) -> TaskEventPublisher:
        """The manager's publisher: the same instance for its whole lifetime."""
        ...

    # -- client-facing ---------------------------------------------------------------

    async def find_task(self, ctx: TaskRequestContext) -> Task | None:
        """The authorized snapshot, or ``None`` for an unknown, expired or unauthorized task."""
        ...

    async def update_task(self, ctx: TaskUpdateContext) -> None:
        """Accept answers to outstanding input requests; others are ignored.

        Raises :class:`TaskNotFoundError` for an unknown or unauthorized task.
        """
        ...

    async def request_cancellation(self, ctx: TaskRequestContext) -> None:
        """Record durable cancellation intent; terminal tasks accept it idempotently.

        Raises :class:`TaskNotFoundError` for an unknown or unauthorized task.
        """
        ...

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
        ``poll_interval=None`` take the configured defaults. The task counts against
        ``tenant`` (default: its binding) with ``weight`` (default: its plan's), for
        fair dispatch and the limits of its plan (``plan``, else the manager's
        policy's for ``tenant``, else the default); a refusal raises
        :class:`QuotaExceededError` (a tenant's quota or rate) or
        :class:`CapacityError` (no room) and stores nothing. ``payload`` may be a
        callable: it is given the new task's ID and returns the payload (for one bound
        to its task, such as a seal whose associated data names it).
        """
        ...

    async def mark_working(
        self, task_id: str, status_message: str | None = None, *, fence: int | None = None
    ) -> None:
        """Set ``working`` with ``status_message``; supersedes outstanding input requests."""
        ...

    async def request_input(
        self,
        task_id: str,
        requests: Mapping[str, InputRequest],
        status_message: str | None = None,
        *,
        fence: int | None = None,
    ) -> dict[str, Any]:
        """Ask the client for input; returns recorded answers to keys answered before."""
        ...

    async def take_input_responses(
        self, task_id: str, *, fence: int | None = None
    ) -> dict[str, Any]:
        """Take the answers accepted since the last take."""
        ...

    async def complete_task(
        self,
        task_id: str,
        result: dict[str, Any],
        status_message: str | None = None,
        *,
        fence: int | None = None,
    ) -> None:
        """End the task ``completed`` with ``result``."""
        ...

    async def fail_task(
        self,
        task_id: str,
        error: JsonRpcError,
        status_message: str | None = None,
        *,
        fence: int | None = None,
    ) -> None:
        """End the task ``failed`` with a JSON-RPC ``error``."""
        ...

    async def cancel_task(
        self, task_id: str, status_message: str | None = None, *, fence: int | None = None
    ) -> None:
        """End the task ``cancelled``."""
        ...

    async def is_cancellation_requested(self, task_id: str, *, fence: int | None = None) -> bool:
        """Whether a client asked to cancel the task."""
        ...
