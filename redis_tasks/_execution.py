"""``TaskExecution``: what a handler receives, and ``TaskFailed``, how it fails on purpose."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._ids import task_ref
from ._models import InputRequest, JsonRpcError
from ._origin import TaskOrigin
from ._telemetry.metrics import METRICS

if TYPE_CHECKING:
    from ._manager import TaskManager

__all__ = ["Handler", "TaskExecution", "TaskFailed"]


class TaskFailed(Exception):
    """Raise from a handler to end the task ``failed`` with this JSON-RPC ``error``.

    Any other exception also fails the task, but with a generic internal error,
    so that exception text (which may hold secrets) never reaches the client.
    """

    def __init__(self, error: JsonRpcError) -> None:
        if not isinstance(error, JsonRpcError):
            raise TypeError("TaskFailed takes a JsonRpcError")
        super().__init__("task failed")
        self.error = error


class TaskExecution:
    """One run of one task under a lease, handed to the handler.

    ``fence`` is the lease's fencing token, larger for every later claim (it is
    derived from the server clock, so it is a large number): a side-effect store
    that records the highest fence it has seen can refuse writes from a worker
    whose lease was taken over. ``cancelled`` is set when a client asks to cancel; a
    handler honours it by raising :class:`asyncio.CancelledError`, which ends the
    task ``cancelled`` (ignoring it is allowed: cancellation is intent, not force).
    Origin and payload never appear in ``repr``.
    """

    __slots__ = (
        "_changed",
        "_fence",
        "_input_poll",
        "_manager",
        "_origin",
        "_payload",
        "_round",
        "_task_id",
        "attempt",
        "cancelled",
    )

    def __init__(
        self,
        manager: TaskManager,
        task_id: str,
        *,
        origin: TaskOrigin,
        payload: bytes,
        attempt: int,
        fence: int,
        input_poll: float,
    ) -> None:
        self._manager = manager
        self._task_id = task_id
        self._origin = origin
        self._payload = payload
        self._fence = fence
        self._input_poll = input_poll
        #: How many times this task has been claimed, this run included.
        self.attempt = attempt
        #: Set once a client asked to cancel the task.
        self.cancelled = asyncio.Event()
        # Set by notify_changed (a change hint for this task): answers may have arrived.
        self._changed = asyncio.Event()
        # The unanswered keys and message of the round this run asked last: asking
        # them again is a poll, not a new round (see answered_so_far).
        self._round: tuple[frozenset[str], str | None] | None = None

    @property
    def task_id(self) -> str:
        """The task's ID."""
        return self._task_id

    @property
    def origin(self) -> TaskOrigin:
        """What the task was created for (opaque framework data)."""
        return self._origin

    @property
    def payload(self) -> bytes:
        """The work payload given to ``create_task``."""
        return self._payload

    @property
    def fence(self) -> int:
        """The lease's fencing token; larger for every later claim of this task."""
        return self._fence

    async def report(self, status_message: str | None) -> None:
        """Publish a progress message (status ``working``)."""
        await self._manager.mark_working(self._task_id, status_message, fence=self._fence)
        self._round = None  # working supersedes the outstanding round

    async def request_input(
        self, requests: Mapping[str, InputRequest], status_message: str | None = None
    ) -> dict[str, Any]:
        """Ask the client for input and wait until every key is answered.

        Replay-safe: keys answered before (by an earlier run that crashed) return
        their recorded answers at once. If cancellation is requested while
        waiting, raises :class:`asyncio.CancelledError`.
        """
        while True:
            answers = await self.answered_so_far(requests, status_message)
            if requests.keys() <= answers.keys():
                return {key: answers[key] for key in requests}
            await self.wait_for_input()

    async def answered_so_far(
        self, requests: Mapping[str, InputRequest], status_message: str | None = None
    ) -> dict[str, Any]:
        """Make ``requests`` the outstanding round and return the answers recorded so far
        (at once, without waiting): for a caller that takes answers as they come, key by
        key, such as several questions asked at once. Re-issuing the same round is a
        no-op that returns every recorded answer, so polling with it loses nothing even
        if a reply is lost."""
        self._changed.clear()
        answers = await self._manager.request_input(
            self._task_id, requests, status_message, fence=self._fence
        )
        # A new round is what the request_input script writes: unanswered keys (or a
        # message) other than those outstanding. This run's last round stands in
        # for the stored one, which the reply does not show.
        unanswered = requests.keys() - answers.keys()
        if not unanswered:
            self._round = None
        else:
            asked = (frozenset(unanswered), status_message)
            if asked != self._round:
                self._round = asked
                METRICS.input_round()
        return answers

    async def wait_for_input(self) -> None:
        """Wait until answers may have arrived (a change event, or the input poll
        interval); raises :class:`asyncio.CancelledError` once cancellation is requested."""
        if not self.cancelled.is_set():
            await _first(self._changed.wait, self.cancelled.wait, within=self._input_poll)
        if self.cancelled.is_set():
            raise asyncio.CancelledError("cancellation was requested")

    def notify_changed(self) -> None:
        """The task changed (answers may have arrived): wake :meth:`wait_for_input` now
        rather than at the next poll.

        The worker calls this on a change hint for the task; a handler has no need to
        (waking early only polls sooner).
        """
        self._changed.set()

    def __repr__(self) -> str:
        return (
            f"TaskExecution(task={task_ref(self._task_id)!r}, attempt={self.attempt},"
            f" fence={self._fence})"
        )


async def _first(*waits: Callable[[], Awaitable[Any]], within: float) -> None:
    """Return when any of ``waits`` completes or ``within`` seconds pass."""
    tasks = [asyncio.ensure_future(wait()) for wait in waits]
    try:
        await asyncio.wait(tasks, timeout=within, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


#: A handler runs one task and returns its result (a JSON object).
Handler = Callable[[TaskExecution], Awaitable[dict[str, Any]]]
