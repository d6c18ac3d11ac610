"""``TaskExecution``: what a handler receives; ``TaskFailed``, how it fails on purpose;
``TaskParked``, how a wait for input ends when the worker gives the task back."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._ids import task_ref
from ._models import InputRequest, JsonRpcError, RequestContext, TaskRequestContext
from ._origin import TaskOrigin
from ._replay import RecordedAnswers
from ._telemetry.metrics import METRICS

if TYPE_CHECKING:
    from ._manager import TaskManager
    from ._work_queue import WorkQueue

__all__ = ["Handler", "TaskExecution", "TaskFailed", "TaskParked"]


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


class TaskParked(BaseException):
    """Raised from a wait for input once the worker parked the task: it gave the
    task back while its client thinks, so that a person answering holds no worker
    slot, no lease and no handler. The answer that completes the round queues the
    task again, and a worker runs the handler again from the top
    (:attr:`TaskExecution.parks` then says so), where every answered round returns
    at once.

    A ``BaseException``, as :class:`asyncio.CancelledError` is, so that a handler's
    ``except Exception`` lets it through: let it propagate (a handler that catches
    ``BaseException`` must re-raise it). Nothing the handler writes after it counts:
    the lease it ran under has ended.
    """

    def __init__(self) -> None:
        super().__init__("the task was parked while it waits for input")


class TaskExecution:
    """One run of one task under a lease, handed to the handler.

    ``fence`` is the lease's fencing token, larger for every later claim (it is
    derived from the server clock, so it is a large number): a side-effect store
    that records the highest fence it has seen can refuse writes from a worker
    whose lease was taken over. ``cancelled`` is set when a client asks to cancel; a
    handler honours it by raising :class:`asyncio.CancelledError`, which ends the
    task ``cancelled`` (ignoring it is allowed: cancellation is intent, not force).
    Origin and payload never appear in ``repr``.

    **Waiting for input parks the task.** A wait for the client's answers
    (:meth:`request_input`, :meth:`wait_for_input`, and the MCP integrations' input
    rounds, which use them) that lasts ``park_after`` seconds gives the task back
    (:class:`TaskParked` ends the handler) and frees its slot; the answer that
    completes the round queues it again, and the handler runs again *from the top*.
    So code before a wait runs again on resume: keep it free of side effects that
    must happen once, or guard them (the answered rounds replay at once, with their
    recorded answers; :attr:`parks` says how many times the task was parked). A
    handler that cannot be re-run asks its waits with ``park=False``, or the
    worker is started with ``park_after=None``: it then holds its slot while it
    waits, as before.
    """

    __slots__ = (
        "_changed",
        "_fence",
        "_input_poll",
        "_manager",
        "_origin",
        "_park_after",
        "_park_not_before",
        "_park_now",
        "_payload",
        "_pressed",
        "_queue",
        "_recorded",
        "_round",
        "_task_id",
        "_waiters",
        "_waiting_since",
        "attempt",
        "cancelled",
        "parked",
        "parks",
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
        parks: int = 0,
        queue: WorkQueue | None = None,
        park_after: float | None = None,
        pressed: Callable[[], bool] | None = None,
        waiters: set[TaskExecution] | None = None,
        recorded: tuple[tuple[bytes, bytes, bytes], ...] = (),
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
        #: How many times the task was parked before this run: more than 0 when this
        #: run resumes it (the handler runs from the top; answered rounds replay).
        self.parks = parks
        #: Set once this run parked the task (:class:`TaskParked` was raised).
        self.parked = False
        # The worker's queue, which parks the task under this run's fence (none: never
        # parked), the seconds a wait for input lasts before it is asked to (None:
        # never), and since when (monotonic) this run's round has been unanswered.
        self._queue = queue
        self._park_after = park_after if queue is not None else None
        # Whether the worker wants the slot now (every slot taken): a wait parks at once;
        # and the worker's set of waiting executions, which this one joins while its
        # round is unanswered (so that a start that takes the last slot finds it).
        self._pressed = pressed
        self._waiters = waiters
        self._waiting_since: float | None = None
        # Set by park_now (the worker stops): a wait parks at once. A flag and a wake of
        # the wait (_changed), not an Event of its own: one more object every task made.
        self._park_now = False
        # The answers this replaying run's claim brought (Claim.recorded): an answered
        # round returns from them without a call, until a round is left unanswered.
        self._recorded = RecordedAnswers(recorded, manager.limits) if recorded else None
        # When a park the script refused may be asked again (monotonic): not before an
        # input poll, or a pressed worker's waits would ask it in a loop until the
        # cancellation that refused it reached the handler.
        self._park_not_before = 0.0

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

    async def bound_to(self, request: RequestContext) -> bool:
        """Whether the task is bound to ``request`` (its endpoint and partition key), as
        ``tasks/get`` decides it: a worker that restores a caller kept with the task
        checks that the caller is the task's own before acting as it."""
        task = await self._manager.find_task(TaskRequestContext(request, self._task_id))
        return task is not None

    async def report(self, status_message: str | None) -> None:
        """Publish a progress message (status ``working``)."""
        await self._manager.mark_working(self._task_id, status_message, fence=self._fence)
        self._round = None  # working supersedes the outstanding round
        self._wait_since(None)

    async def request_input(
        self,
        requests: Mapping[str, InputRequest],
        status_message: str | None = None,
        *,
        park: bool = True,
    ) -> dict[str, Any]:
        """Ask the client for input and wait until every key is answered.

        Replay-safe: keys answered before (by an earlier run that crashed, or
        before the task was parked) return their recorded answers at once. If
        cancellation is requested while waiting, raises
        :class:`asyncio.CancelledError`; once the wait parked the task, raises
        :class:`TaskParked` (``park=False``: this wait never parks it).
        """
        while True:
            answers = await self.answered_so_far(requests, status_message)
            if requests.keys() <= answers.keys():
                return {key: answers[key] for key in requests}
            await self.wait_for_input(park=park)

    async def answered_so_far(
        self, requests: Mapping[str, InputRequest], status_message: str | None = None
    ) -> dict[str, Any]:
        """Make ``requests`` the outstanding round and return the answers recorded so far
        (at once, without waiting): for a caller that takes answers as they come, key by
        key, such as several questions asked at once. Re-issuing the same round is a
        no-op that returns every recorded answer, so polling with it loses nothing even
        if a reply is lost."""
        self._changed.clear()
        answers = self._recorded.round(requests, status_message) if self._recorded else None
        if answers is None:
            answers = await self._manager.request_input(
                self._task_id, requests, status_message, fence=self._fence
            )
        # A new round is what the request_input script writes: unanswered keys (or a
        # message) other than those outstanding. This run's last round stands in
        # for the stored one, which the reply does not show.
        unanswered = requests.keys() - answers.keys()
        if not unanswered:
            self._round = None
            self._wait_since(None)
        else:
            # The task waits for input now: a later round is asked of the manager,
            # whose call may supersede this one (the recorded answers assume working).
            self._recorded = None
            asked = (frozenset(unanswered), status_message)
            if asked != self._round:
                self._round = asked
                METRICS.input_round()
            if self._waiting_since is None:
                self._wait_since(time.monotonic())
        return answers

    async def wait_for_input(self, *, park: bool = True) -> None:
        """Wait until answers may have arrived (a change event, or the input poll
        interval); raises :class:`asyncio.CancelledError` once cancellation is
        requested, and :class:`TaskParked` once the round asked last
        (:meth:`answered_so_far`) has waited ``park_after`` seconds and the task was
        parked (``park=False``: never)."""
        if not self.cancelled.is_set():
            within = self._input_poll
            park_in = self._park_in() if park else None
            if park_in is not None and park_in <= 0:
                await self._park_task()
                return  # answered meanwhile (or cancellation asked): look again
            if park_in is not None:
                within = min(within, park_in)
            await _first(self._changed.wait, self.cancelled.wait, within=within)
        if self.cancelled.is_set():
            raise asyncio.CancelledError("cancellation was requested")

    def _park_in(self) -> float | None:
        """Seconds until the outstanding round's wait parks the task (at most 0: now);
        ``None`` when it never does (no round outstanding, or no ``park_after``)."""
        if self._park_after is None or self._round is None or self._waiting_since is None:
            return None
        now = time.monotonic()
        due = self._waiting_since + self._park_after
        if self._park_now or (self._pressed is not None and self._pressed()):
            due = now
        return max(due, self._park_not_before) - now

    async def _park_task(self) -> None:
        """Park the task, and raise :class:`TaskParked` once it is; return when the
        round was answered meanwhile or cancellation was asked (nothing parked)."""
        assert self._queue is not None  # _park_in says when, only with one
        if await self._queue.park(self._task_id, fence=self._fence):
            self.parked = True
            METRICS.parked()
            raise TaskParked()
        # Not parked: the wait starts over, and the next park is asked an input poll
        # later at the soonest (see _park_not_before).
        now = time.monotonic()
        self._wait_since(now)
        self._park_not_before = now + self._input_poll

    def _wait_since(self, since: float | None) -> None:
        """This run's round has been unanswered since ``since`` (monotonic; ``None``: it
        is answered, or superseded): kept, and told to the worker's set of waiters."""
        self._waiting_since = since
        if self._waiters is not None:
            if since is None:
                self._waiters.discard(self)
            else:
                self._waiters.add(self)

    @property
    def waiting(self) -> bool:
        """Whether this run's last round is unanswered (its handler waits for input)."""
        return self._waiting_since is not None

    def park_now(self) -> None:
        """Park the task at its next wait for input, or now if it waits (the worker
        stops: a task waiting for a person must not hold its shutdown up)."""
        self._park_now = True
        self._changed.set()  # a wait in progress looks again, and parks

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
            f" fence={self._fence}, parks={self.parks})"
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
