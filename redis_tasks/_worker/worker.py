"""``Worker``: runs handlers for tasks, at least once, under leases and fencing.

One worker process runs up to ``concurrency`` handlers. It reads each of its
partitions' work queues (:mod:`.intake`), claims every entry (fence bump,
attempt count, lease deadline), renews leases well before they run out
(:mod:`.renewal`: fence check, cancellation flag), and reclaims the entries of
crashed or stalled workers once they have been idle longer than a lease. A late
write from a worker whose lease was taken over is refused by the fence.

The worker talks to its backend only through the contract and a
:class:`~redis_tasks._work_queue.WorkQueue`, so it runs on Redis and in memory
alike. Logs are structured and never hold a secret (:mod:`.log`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Iterable, Mapping
from datetime import timedelta
from types import TracebackType
from typing import Any, Self

from redis_tasks._cancel import cancel_and_wait
from redis_tasks._execution import Handler
from redis_tasks._ids import parse_task_id
from redis_tasks._signals import read_signal
from redis_tasks._telemetry.backlog import WorkerGauges
from redis_tasks._telemetry.metrics import METRICS
from redis_tasks._work_queue import WorkerBackend

from .busy import mark_busy_loop
from .health import Health, HealthReport
from .intake import Intake
from .log import frames, log
from .reclaim import Reclaim
from .renewal import Renewal
from .run_state import Settings
from .runs import Runs
from .shutdown import drain
from .slots import Background, Slots

__all__ = ["Worker"]


class Worker:
    """Runs ``handler`` for tasks of ``manager``'s partitions under leases.

    ``async with Worker(manager, handler) as worker: await worker.run()``; call
    :meth:`stop` (or send SIGTERM to the CLI) for a graceful shutdown: reading
    stops, running handlers get ``grace`` seconds to finish, and the rest are
    handed back so another worker picks them up at once.

    A handler returns the result (the task ends ``completed``; ``isError: true``
    results too), raises :class:`TaskFailed` (``failed`` with its error), raises
    :class:`asyncio.CancelledError` after cancellation was requested
    (``cancelled``), or raises anything else (``failed`` with a generic internal
    error; the exception's type and location go to the log).

    The worker's logs and spans name a task by its reference (``11.Wt0jM9``),
    never its whole ID, which is a capability; ``whole_task_ids=True`` writes
    whole IDs (default: the manager's ``whole_task_ids``).

    A *newcomer* (a tenant that was not waiting in its partition and joins while
    others wait) starts at the worker's next free slot, wherever its partition's
    turn is; newcomers hold at most half the slots. ``newcomer_slots=N`` lets up
    to N newcomers' tasks start at once when every slot is busy, beyond
    ``concurrency`` (default 0: never more than ``concurrency`` handlers): with
    long tools, a busy worker's slots may free only when they end.

    A handler that waits for its client's input (an elicitation, a sampling
    request, an ``InputRequiredResult`` round) gives its slot back: after
    ``park_after`` (default 1 s), or at once while every slot is taken, its task
    is *parked* (no lease, no handler, no Redis command while it waits), and the
    answer that completes the round queues it again; its handler then runs again
    from the top, where answered rounds return at once (see
    :class:`~redis_tasks.TaskExecution`). ``park_after=None`` keeps waiting
    handlers in their slots, for handlers that cannot be re-run.
    """

    def __init__(
        self,
        manager: WorkerBackend,
        handler: Handler,
        *,
        concurrency: int = 32,
        lease: timedelta = timedelta(seconds=30),
        max_attempts: int = 5,
        partitions: Iterable[int] | None = None,
        name: str | None = None,
        read_batch: int = 16,
        cancel_hints: bool = True,
        input_poll_interval: timedelta = timedelta(seconds=1),
        whole_task_ids: bool | None = None,
        newcomer_slots: int = 0,
        park_after: timedelta | None = timedelta(seconds=1),
    ) -> None:
        if concurrency < 1 or max_attempts < 1 or read_batch < 1:
            raise ValueError("concurrency, max_attempts and read_batch must be >= 1")
        if newcomer_slots < 0:
            raise ValueError("newcomer_slots must be >= 0")
        if park_after is not None and park_after < timedelta(0):
            raise ValueError("park_after must be >= 0 (or None: never park)")
        if lease < timedelta(milliseconds=100):
            raise ValueError("lease must be at least 100 ms")
        self.manager = manager
        self.handler = handler
        self.partitions = tuple(range(manager.partitions) if partitions is None else partitions)
        if not self.partitions:
            raise ValueError("a worker needs at least one partition")
        self._served = frozenset(self.partitions)
        self.cancel_hints = cancel_hints
        queue = self._queue = manager.work_queue
        settings = self._settings = Settings(
            name=name or Settings.default_name(),
            concurrency=concurrency,
            lease=lease,
            max_attempts=max_attempts,
            read_batch=read_batch,
            input_poll=input_poll_interval.total_seconds(),
            timeout=queue.timeout,
            whole_task_ids=manager.whole_task_ids if whole_task_ids is None else whole_task_ids,
            newcomer_slots=newcomer_slots,
            park_after=None if park_after is None else park_after.total_seconds(),
        )
        self._slots = Slots(concurrency, overflow=Slots(newcomer_slots))
        self._background = Background()
        self._health = Health(
            self.partitions,
            block=settings.block.total_seconds(),
            timeout=settings.timeout,
            lease=settings.lease_s,
        )
        slots = self._slots
        self._runs = Runs(
            manager, queue, handler, settings, self._background, lambda: slots.free <= 0
        )
        self._renewal = Renewal(queue, self._runs, settings, self._background, self._health)
        self._stopping = asyncio.Event()
        self._intake = Intake(
            queue, self._runs, self._slots, settings, self._background, self._stopping, self._health
        )
        self._reclaim = Reclaim(
            queue, self._runs, self._slots, settings, self._background, self._intake.drop
        )
        self._gauges = WorkerGauges(queue, self.partitions, self._runs.handlers_running)
        self._stopped = asyncio.Event()
        self._started = False
        self._grace: float = settings.lease_s

    @property
    def name(self) -> str:
        """The consumer name: the lease owner in the task record."""
        return self._settings.name

    @property
    def concurrency(self) -> int:
        """How many handlers may run at once."""
        return self._settings.concurrency

    @property
    def lease(self) -> timedelta:
        """How long a claim or renewal holds a task."""
        return self._settings.lease

    @property
    def max_attempts(self) -> int:
        """Claims a task gets before it is failed as poison."""
        return self._settings.max_attempts

    @property
    def read_batch(self) -> int:
        """The most entries one batch claim takes."""
        return self._settings.read_batch

    @property
    def claim_sizes(self) -> Mapping[int, int]:
        """How many claim calls brought how many tasks (1 for an idle pickup), since the
        worker was made: the batch sizes ``redis-tasks bench`` shows."""
        return dict(self._intake.claim_sizes)

    @property
    def running(self) -> int:
        """How many handlers are running now."""
        return len(self._runs)

    def health(self) -> HealthReport:
        """Whether the worker is reading and keeping its leases, and why not
        (see :mod:`redis_tasks._worker.health`)."""
        return self._health.check()

    async def __aenter__(self) -> Self:
        """Make sure the work queues of this worker's partitions exist."""
        await self._queue.ensure_groups(self.partitions)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop gracefully if still running."""
        if self._started and not self._stopped.is_set():
            await self.stop()

    async def stop(self, grace: float | None = None) -> None:
        """Stop reading, give running handlers ``grace`` seconds, hand back the rest.

        Returns once the worker has shut down. ``grace`` defaults to one lease.
        """
        if grace is not None:
            self._grace = grace
        self._health.stopping()
        self._stopping.set()
        self._slots.close()
        if self._started:
            await self._stopped.wait()

    async def run(self) -> None:
        """Run until :meth:`stop` is called."""
        if self._started:
            raise RuntimeError("a Worker runs once")
        self._started = True
        log(
            logging.INFO,
            "worker started",
            "worker_started",
            worker=self.name,
            # Which application's queue it serves (a prefix is one app's; a worker
            # left on another's claims its tasks): the in-memory manager has none.
            prefix=getattr(self.manager, "prefix", None),
            partitions=len(self.partitions),
            concurrency=self.concurrency,
        )
        # The signals only: the changes a running task must see and newcomers' tasks,
        # not every create and outcome (a drain's worth of events cost a tenth of its
        # CPU). Tailed with cancel hints off too: newcomers start early either way.
        publisher = self._queue.signals
        registration = publisher.subscribe(self._on_signal)
        # Read no work before the event tail has fixed where it starts, or a
        # cancellation made in between would never reach the handler as a hint.
        try:
            async with asyncio.timeout(self._settings.timeout):
                await publisher.wait_ready()
        except TimeoutError:
            log(
                logging.WARNING,
                "event tail not ready; cancellation arrives by renewal",
                "hints_late",
                worker=self.name,
            )
        unwatch = METRICS.watch(self._gauges)
        # Sampled only when metrics are on, and then only while something collects.
        sampling = _loop(self._gauges.loop(), "redis-tasks-backlog") if METRICS.enabled else None
        self._health.started()
        readers = [_loop(self._intake.read(p), f"redis-tasks-read-{p}") for p in self.partitions]
        readers.append(_loop(self._intake.newcomers(), "redis-tasks-newcomers"))
        renewing = _loop(self._renewal.loop(), "redis-tasks-renew")
        marking = _loop(
            mark_busy_loop(
                self._queue, self._runs.holding_slots, self.concurrency, self.partitions
            ),
            "redis-tasks-busy",
        )
        reclaiming = _loop(self._reclaim.loop(self.partitions), "redis-tasks-reclaim")
        try:
            await self._stopping.wait()
        finally:
            self._health.stopping()
            self._stopping.set()
            self._slots.close()
            self._intake.close()
            # Readers blocked in an idle read were cancelled (Intake.close); the others
            # finish their claim and stop, and what they claimed is handed back like the
            # rest. An entry delivered to a cancelled read goes back in forget_consumer
            # below (the queue's hand_back_unclaimed).
            await asyncio.gather(*readers, return_exceptions=True)
            # Ended, not just cancelled: a cancellation can be lost in a Redis call
            # (redis_tasks._cancel), and the loop would then run on.
            await cancel_and_wait([reclaiming, marking])
            await drain(self._runs, self._grace, self._settings.timeout)
            # Whatever else is in flight (hint renewals, dropped entries) ends here.
            await self._background.cancel_all()
            await cancel_and_wait([renewing])
            registration.close()
            await self._reclaim.forget_consumer(self.partitions)
            if sampling is not None:
                await cancel_and_wait([sampling])
            unwatch()
            self._check_slots()
            self._health.stopped()
            self._stopped.set()
            log(logging.INFO, "worker stopped", "worker_stopped", worker=self.name)

    def _on_signal(self, text: str) -> None:
        """A signal (:mod:`redis_tasks._signals`): a newcomer's task waiting in its
        partition's tenant queues, started at the next free slot where this worker
        serves that partition; or a change, which matters only to the task's own
        worker (with cancel hints: it renews at once, and wakes the task's input wait)."""
        signal = read_signal(text)
        if signal.newcomer:
            if parse_task_id(signal.task_id) in self._served:
                self._intake.hint(signal.task_id)
        elif self.cancel_hints:
            self._renewal.on_event(signal.task_id)

    def _check_slots(self) -> None:
        """Every run has ended: every handler slot must be back (the rule of
        :class:`~.slots.SlotLease`); one that is not was lost on some path."""
        overflow = self._slots.overflow
        leaked = self._slots.out + self._intake.slots_out + (overflow.out if overflow else 0)
        if leaked:
            log(
                logging.ERROR,
                "handler slots were not given back",
                "slots_leaked",
                worker=self.name,
                slots=leaked,
            )


def _loop(coroutine: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
    """One of the worker's loops as a task whose end by an exception is logged once.

    A loop retries what Redis may outlast (``RedisTasksError``) itself; anything else
    that reaches here is a bug, and a retry would meet it again: the loop ends, the
    log names where (never the message, which may hold task data), and the health
    check reports the read loop that no longer reads.
    """
    task = asyncio.create_task(coroutine, name=name)
    task.add_done_callback(_log_failure)
    return task


def _log_failure(task: asyncio.Task[None]) -> None:
    if task.cancelled() or task.exception() is None:
        return
    exc = task.exception()
    assert exc is not None
    log(
        logging.ERROR,
        "a worker loop failed",
        "loop_failed",
        loop=task.get_name(),
        error=type(exc).__name__,
        where=frames(exc),
    )
