"""Every run in progress: claim, start, supervise, finish, park or hand back.

The pickup path is latency: a claimed task's handler starts in the step that received
the claim, and its slot is back when the handler is done, before the outcome is written.

A run takes its slot from the lease its caller took (:class:`~.slots.SlotLease`) when
it is admitted, and gives it back once its handler is done (or, if it was stopped,
once the handler gave up), as it leaves the states that hold it
(:class:`~.run_state.RunState`). It leaves the worker in one place,
:meth:`Runs.let_go`, on every path: an outcome written, a task parked or handed back,
a run that could not even start.

Each run is one asyncio task: its handler, then its outcome (or its hand-back); a
supervisor task per handler cost about a tenth of a draining worker's CPU (profiled).
The worker stops a handler by cancelling the run's task while it is in the handler
(:meth:`~.run_state.Run.abandon`); one that ignores that keeps its slot until it ends,
except at shutdown, which hands its task back after the call timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from redis_tasks._errors import RedisTasksError
from redis_tasks._execution import Handler, TaskExecution, TaskFailed, TaskParked
from redis_tasks._lease import INTERNAL_ERROR, Claim, ClaimOutcome
from redis_tasks._manager import TaskManager
from redis_tasks._telemetry.metrics import METRICS
from redis_tasks._telemetry.traces import TRACES
from redis_tasks._work_queue import WorkEntry, WorkQueue

from .finish import hand_back, record_outcome
from .log import frames, log
from .parking import Parking, parked
from .run_state import Run, RunOutcome, RunState, Settings, StopReason
from .slots import Background, SlotLease

__all__ = ["Runs"]


class Runs:
    """The runs of one worker (see the module)."""

    def __init__(
        self,
        manager: TaskManager,
        queue: WorkQueue,
        handler: Handler,
        settings: Settings,
        background: Background,
        pressed: Callable[[], bool],
    ) -> None:
        self._manager = manager
        self._queue = queue
        self._handler = handler
        self._settings = settings
        self._background = background
        self.active: set[Run] = set()  # every run in progress
        self.latest: dict[str, Run] = {}  # the newest run of each task
        self._claiming = 0  # claims sent and not yet answered
        self._claims_settled = asyncio.Event()
        self._claims_settled.set()
        #: When waits for input park their tasks (:mod:`.parking`).
        self.parking = Parking(self.active, pressed)

    def __len__(self) -> int:
        return len(self.active)

    def handlers_running(self) -> int:
        """Handlers not yet done (safe from an exporter's thread: a copy is counted)."""
        return sum(1 for run in tuple(self.active) if run.state.in_handler)

    def holding_slots(self) -> int:
        """Runs that hold a handler slot (not the slots reserved for a claim in flight)."""
        return sum(1 for run in self.active if run.holds_slot)

    # -- claiming and starting --------------------------------------------------------

    async def claim(self, entry: WorkEntry) -> Claim | None:
        """Claim ``entry``'s task; ``None`` when the claim failed (the entry stays
        pending with this worker and is reclaimed after a lease)."""
        self._claiming += 1
        self._claims_settled.clear()
        settings = self._settings
        try:
            return await self._queue.claim(
                entry,
                consumer=settings.name,
                lease=settings.lease,
                max_attempts=settings.max_attempts,
            )
        except RedisTasksError as exc:
            log(
                logging.WARNING,
                "claim failed",
                "claim_failed",
                task=settings.ref(entry.task_id),
                error=type(exc).__name__,
            )
            return None
        finally:
            self._claiming -= 1
            if self._claiming == 0:
                self._claims_settled.set()

    def start_claimed(
        self, claimed: Sequence[tuple[WorkEntry, Claim | None]], slots: SlotLease
    ) -> None:
        """Start the runs of tasks claimed for ``slots``, those that run: each takes
        one of them (the caller gives back the rest).

        A start that fails (a bug, or a tracer's: logged) hands its task and the rest
        of the batch back at once: claimed and never started, they would otherwise
        wait out a lease while other workers have slots for them.
        """
        for index, (entry, claim) in enumerate(claimed):
            try:
                self._start(entry, claim, slots, reclaimed=False)
            except Exception as exc:
                self._internal_error(self._settings.ref(entry.task_id), exc)
                for left, left_claim in claimed[index:]:
                    self._give_up_claim(left, left_claim)
                return

    def _start(
        self, entry: WorkEntry, claim: Claim | None, slots: SlotLease, *, reclaimed: bool
    ) -> None:
        run = self._admit(entry, claim, slots, reclaimed=reclaimed)
        if run is not None:
            self._launch(run)

    def _give_up_claim(self, entry: WorkEntry, claim: Claim | None) -> None:
        """Hand back a task this worker claimed and will not run (its start failed)."""
        task_id = entry.task_id
        if claim is None or claim.outcome is not ClaimOutcome.RUN or task_id is None:
            return  # nothing leased to this worker
        held = self.latest.get(task_id)
        if held is not None and held.execution.fence == claim.fence:
            return  # started after all (a run holds this very lease)
        self._background.spawn(hand_back(self._queue, self._settings, task_id, claim.fence))

    def start_reclaimed(self, entry: WorkEntry, slot: SlotLease) -> None:
        """Claim and run a reclaimed entry for ``slot``, a lease of one slot the caller
        took for it (given back here, or by the run that takes it)."""
        self._background.spawn(self._claim_and_run(entry, slot))

    async def _claim_and_run(self, entry: WorkEntry, slot: SlotLease) -> None:
        claim: Claim | None = None
        try:
            claim = await self.claim(entry)
            self._start(entry, claim, slot, reclaimed=True)
        except Exception as exc:
            self._internal_error(self._settings.ref(entry.task_id), exc)
            self._give_up_claim(entry, claim)
        finally:
            slot.give_back()  # nothing left once a run took it

    def _admit(
        self, entry: WorkEntry, claim: Claim | None, slots: SlotLease, *, reclaimed: bool
    ) -> Run | None:
        """A run for ``claim`` with one of ``slots``, registered at once (so a shutdown
        sees it), or ``None``."""
        if claim is None:
            return None
        task_id = entry.task_id
        settings = self._settings
        task = settings.ref(task_id)
        if claim.outcome is not ClaimOutcome.RUN or task_id is None or task is None:
            if claim.outcome is not ClaimOutcome.LEASE_HELD:
                METRICS.claim_settled(claim.outcome.value)
            poisoned = claim.outcome is ClaimOutcome.POISONED
            level = logging.WARNING if poisoned or claim.unconfirmed else logging.INFO
            log(
                level,
                f"task not run: {claim.outcome.value}",
                f"claim_{claim.outcome.value}",
                task=task,
                reclaimed=reclaimed,
                # The ending stands on the primary; a failover before its replica
                # caught up may roll it back (the task is then claimed again).
                unconfirmed=claim.unconfirmed,
            )
            return None
        held = self.latest.get(task_id)
        if held is not None and held.execution.fence == claim.fence and held in self.active:
            # The claim handed back the very lease a run of ours holds: the claim of a
            # lease its holder asks for again is answered as a retry. That happens
            # when our own reclaim takes over our entry (XAUTOCLAIM found it idle for
            # a lease) and a late renewal of that run lands before the claim: the
            # run goes on, and a second one would run the task twice at once.
            log(
                logging.INFO,
                "task not run: already running here",
                "claim_held_here",
                task=task,
                fence=claim.fence,
                reclaimed=reclaimed,
            )
            return None
        assert claim.origin is not None
        if claim.unconfirmed:  # held for its replica as long as the lease allowed
            log(logging.WARNING, "task started unconfirmed", "claim_unconfirmed", task=task)
        lease_until = time.monotonic() + settings.lease_s
        execution = TaskExecution(
            self._manager,
            task_id,
            origin=claim.origin,
            payload=claim.payload,
            attempt=claim.attempt,
            fence=claim.fence,
            input_poll=settings.input_poll,
            parks=claim.parks,
            recorded=claim.recorded,
            queue=self._queue,
            park_after=settings.park_after,
            pressed=self.parking.pressed,
            waiters=self.parking.waiting,
        )
        # From the claim that gave this worker the lease (None: no tracer).
        span = TRACES.run_span(task, entry.partition, claim.attempt, reclaimed, claim.trace_context)
        METRICS.claimed(entry.partition)
        # The slot last, when nothing can fail before the run holds it.
        run = Run(
            execution,
            task,
            entry.partition,
            lease_until,
            slots.split(),
            entry_id=entry.entry_id,
            reclaimed=reclaimed,
            span=span,
        )
        self.active.add(run)
        # A task handed back and claimed again by this worker has two runs for a
        # while; hints and lookups go to the newest.
        self.latest[task_id] = run
        return run

    def _launch(self, run: Run) -> None:
        """Start ``run``'s task now, in the caller's step: its handler's first step is
        then scheduled before whatever the caller does next (pickup latency)."""
        execution = run.execution
        log(
            logging.INFO,
            "task started",
            "task_started",
            task=run.task,
            fence=execution.fence,
            attempt=execution.attempt,
        )
        run.started = time.monotonic()
        span = run.span
        body = self._run(run)
        try:
            # Held by the run (in ``active``) until it ends: not a background task,
            # since a handler that ignores cancellation must not hold up a stop.
            run.runner = asyncio.ensure_future(body) if span is None else span.spawn(body)
        except BaseException:
            body.close()
            self.let_go(run)  # no task: the slot comes back, the run is forgotten
            raise
        if METRICS.enabled and not run.reclaimed:
            # A reclaimed entry waited out a lease as well: that is no pickup.
            METRICS.pickup(run.enqueued_ago())
        self.parking.took_a_slot()

    # -- running ----------------------------------------------------------------------

    @staticmethod
    def _internal_error(task: str | None, exc: Exception) -> None:
        # ``task``: the task's reference (Settings.ref), never its ID.
        # Never die silently: the lease runs out and the task is run again.
        log(
            logging.ERROR,
            "internal error running a task",
            "internal_error",
            task=task,
            error=type(exc).__name__,
            where=frames(exc),
        )

    async def _run(self, run: Run) -> None:
        """The run's task: its handler, then its outcome; an unexpected error is
        logged, not raised, and the run is forgotten whichever way it ends."""
        try:
            await self._handle(run)
        except Exception as exc:
            self._internal_error(run.task, exc)
        finally:
            self.let_go(run)  # on every path out: a cancelled task's slot too
            if run.span is not None:
                run.span.end()  # once: unless _handle ended it, an error did

    async def _handle(self, run: Run) -> None:
        """Run the handler, give its slot back, then write its outcome; or, when the
        worker abandoned it, hand the task back (at shutdown) instead; or nothing, when
        the handler's wait parked its task.

        The slot comes back as soon as the handler is done, before its outcome is
        written: ``concurrency`` bounds handlers, and a write in flight is no handler.
        The next task starts one round trip sooner (latency, not CPU, is what a worker
        waits on); writes in flight stay bounded, since every task needs a claim first.
        """
        execution = run.execution
        outcome = RunOutcome.FAILED
        value: Any = INTERNAL_ERROR
        error: str | None = None
        if run.state is RunState.STARTING:  # else stopped before it started: no handler
            run.move(RunState.HANDLING)
            try:
                value = await self._handler(execution)
                outcome = RunOutcome.COMPLETED
            except TaskParked:
                pass  # see below
            except asyncio.CancelledError:
                task = asyncio.current_task()
                # Parked (an integration's wait may turn the park into a cancellation),
                # or stopped by the worker: see below.
                if execution.parked or not run.handling:
                    pass
                elif task is not None and task.cancelling():
                    raise  # the run itself is cancelled from outside: nothing is written
                elif execution.cancelled.is_set():
                    outcome, value = RunOutcome.CANCELLED, None
                else:
                    log(
                        logging.ERROR,
                        "handler raised CancelledError without a cancellation request;"
                        " failing the task",
                        "handler_cancelled_itself",
                        task=run.task,
                        fence=execution.fence,
                        attempt=execution.attempt,
                    )
                    error = "CancelledError"
            except TaskFailed as exc:
                value, error = exc.error, "TaskFailed"
            except Exception as exc:
                log(
                    logging.ERROR,
                    "handler raised",
                    "handler_error",
                    exception=type(exc).__name__,
                    where=frames(exc),
                    attempt=execution.attempt,
                    task=run.task,
                    fence=execution.fence,
                )
                error = type(exc).__name__
        if execution.parked:
            parked(run)  # given back while it waits for input: its answer queues it again
            return
        if not run.handling:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                task.uncancel()  # our own stop, delivered (or swallowed) in the handler
            await self.stopped(run)
            return
        METRICS.run_ended(outcome.ended, time.monotonic() - run.started)
        run.move(RunState.FINISHING)  # the slot back before the outcome is written
        written, refused = await record_outcome(self._manager, run, outcome, value)
        if run.span is not None:
            if written is not outcome:
                error = "result_invalid"  # the result could not be stored: failed instead
            run.span.end(written.ended, refused or error)

    def let_go(self, run: Run) -> None:
        """The one exit of a run: its slot back if it still holds it, and the run
        forgotten (``active``, ``latest``); once, however many paths ask."""
        if run.state is RunState.ENDED:
            return
        run.move(RunState.ENDED)
        self.active.discard(run)
        self.parking.waiting.discard(run.execution)
        task_id = run.execution.task_id
        if self.latest.get(task_id) is run:
            del self.latest[task_id]

    async def claims_settled(self) -> None:
        """Wait until every claim sent has been answered (each then is a run, or none)."""
        await self._claims_settled.wait()

    async def stopped(self, run: Run) -> None:
        """A run the worker stopped: its slot back and, at shutdown, its task handed
        back; once, from its own task or from a stop it held up."""
        if run.state is not RunState.STOPPING:
            return
        METRICS.run_ended("abandoned", time.monotonic() - run.started)
        run.move(RunState.HANDING_BACK)
        if run.stop_reason is StopReason.SHUTDOWN:
            execution = run.execution
            await hand_back(self._queue, self._settings, execution.task_id, execution.fence)
        if run.span is not None:
            # Handed back at shutdown is no error; a lease lost is.
            lost = run.stop_reason is StopReason.LEASE
            run.span.end("abandoned", "lease_lost" if lost else None)
