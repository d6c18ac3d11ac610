"""Task-change events: a best-effort broadcast of task IDs.

Events are hints. They carry task IDs only, may be duplicated, delayed or
lost, and polling stays authoritative: a listener that wants the task's state
looks it up through the manager, which authorizes the lookup.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

from ._errors import TaskNotFoundError
from ._ids import parse_task_id

__all__ = [
    "InMemoryEventPublisher",
    "Listener",
    "TaskEventPublisher",
    "TaskEventRegistration",
]

logger = logging.getLogger("redis_tasks.events")

#: A listener receives one task ID per event; it may return an awaitable.
Listener = Callable[[str], Awaitable[None] | None]


class TaskEventRegistration:
    """A subscription; :meth:`close` ends it and may be called any number of times."""

    __slots__ = ("_listener", "_publisher")

    def __init__(self, publisher: TaskEventPublisher, listener: Listener) -> None:
        self._publisher: TaskEventPublisher | None = publisher
        self._listener = listener

    @property
    def closed(self) -> bool:
        """Whether the registration no longer receives events."""
        return self._publisher is None

    def close(self) -> None:
        """Stop delivering events to this listener (idempotent)."""
        publisher, self._publisher = self._publisher, None
        if publisher is not None:
            publisher._remove(self)

    def __enter__(self) -> TaskEventRegistration:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class TaskEventPublisher(ABC):
    """Broadcast of task-ID hints to the listeners subscribed in this process.

    A listener that raises is logged and does not stop delivery to the others.
    """

    def __init__(self) -> None:
        self._registrations: list[TaskEventRegistration] = []
        self._pending: set[asyncio.Future[Any]] = set()

    def subscribe(self, listener: Listener) -> TaskEventRegistration:
        """Deliver every task ID this process learns of to ``listener`` until closed."""
        if not callable(listener):
            raise TypeError("listener must be callable")
        registration = TaskEventRegistration(self, listener)
        self._registrations.append(registration)
        self._on_subscribe()
        return registration

    @abstractmethod
    async def publish_task_changed(self, task_id: str) -> None:
        """Announce that ``task_id`` changed (managers do this for every durable change).

        A malformed task ID raises :class:`TaskNotFoundError`.
        """

    async def wait_ready(self) -> None:
        """Return once events published from now on will reach this process's listeners."""
        return  # in-process delivery is ready from the moment of subscribing

    async def aclose(self) -> None:
        """Stop delivering; pending asynchronous listeners are cancelled."""
        for registration in list(self._registrations):
            registration.close()
        for future in list(self._pending):
            future.cancel()
        if self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def _on_subscribe(self) -> None:
        """Hook for backends that start listening lazily."""
        return  # nothing to start for in-process delivery

    def _remove(self, registration: TaskEventRegistration) -> None:
        # Rebinding (not mutating) lets a delivery loop keep iterating its copy.
        self._registrations = [r for r in self._registrations if r is not registration]

    def _deliver(self, task_id: str) -> None:
        for registration in self._registrations:
            listener = registration._listener
            try:
                outcome = listener(task_id)
                if inspect.isawaitable(outcome):
                    future = asyncio.ensure_future(outcome)
                    self._pending.add(future)
                    future.add_done_callback(self._settled)
            except Exception:
                logger.exception("task event listener raised; other listeners still run")

    def _settled(self, future: asyncio.Future[Any]) -> None:
        self._pending.discard(future)
        if not future.cancelled() and future.exception() is not None:
            logger.error(
                "asynchronous task event listener raised",
                exc_info=future.exception(),
            )


class InMemoryEventPublisher(TaskEventPublisher):
    """In-process delivery for :class:`InMemoryTaskManager`.

    Delivery happens on the next event-loop turn, never inside the operation
    that made the change, so a listener may call back into the manager.
    """

    async def publish_task_changed(self, task_id: str) -> None:
        """Deliver ``task_id`` to this process's listeners."""
        if parse_task_id(task_id) is None:
            raise TaskNotFoundError()
        self.notify(task_id)

    def notify(self, task_id: str) -> None:
        """Schedule delivery of ``task_id`` (used by the manager, which is synchronous inside)."""
        if not self._registrations:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop, nobody can be listening asynchronously
        loop.call_soon(self._deliver, task_id)
