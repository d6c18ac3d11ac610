"""Lease renewal: three times per lease, and at once on a change hint.

Two renewals may fail before a lease runs out. A renewal also reports whether a
client asked to cancel: without event hints, cancellation reaches a handler
within one renewal interval; with them (a hint for the task's ID), at once. A
lease found lost, expired or ended stops the handler: another worker may be
running the task, and this one's writes would be refused by the fence anyway.
"""

from __future__ import annotations

import asyncio
import logging
import time

from redis_tasks._errors import BackendError, LeaseLostError, TaskNotFoundError, TaskTerminalError
from redis_tasks._telemetry.metrics import METRICS
from redis_tasks._work_queue import WorkQueue

from .health import Health
from .log import log
from .run_state import Run, Settings, StopReason
from .runs import Runs
from .slots import Background

__all__ = ["Renewal"]


class Renewal:
    """Keeps the leases of a worker's runs (see the module)."""

    def __init__(
        self,
        queue: WorkQueue,
        runs: Runs,
        settings: Settings,
        background: Background,
        health: Health,
    ) -> None:
        self._queue = queue
        self._health = health
        self._runs = runs
        self._settings = settings
        self._background = background
        self._every = settings.lease_s / 3

    async def loop(self) -> None:
        """Renew every running lease, every third of a lease, until cancelled."""
        while True:
            await asyncio.sleep(self._every)
            runs = [r for r in self._runs.active if r.renewable]
            if runs:
                await asyncio.gather(*(self.renew(r) for r in runs))
            else:
                self._health.renewed()  # nothing to renew: nothing failing

    def on_event(self, task_id: str) -> bool:
        """A change hint: answers may have arrived, or a cancellation request.
        Whether it was for a task this worker runs."""
        run = self._runs.latest.get(task_id)
        if run is None:
            return False
        if run.renewable:
            run.execution.notify_changed()
            # A change may be a cancellation request: renewing now reports it.
            self._background.spawn(self.renew(run))
        return True

    async def renew(self, run: Run) -> None:
        """Renew ``run``'s lease once (unless one is in flight or it needs none)."""
        if run.renewing or not run.renewable:
            return
        run.renewing = True
        execution = run.execution
        settings = self._settings
        asked_at = time.monotonic()
        try:
            cancel = await self._queue.renew(
                execution.task_id,
                fence=execution.fence,
                consumer=settings.name,
                lease=settings.lease,
            )
        except (LeaseLostError, TaskNotFoundError, TaskTerminalError) as exc:
            if not run.renewable or execution.parked:
                # The handler's own outcome was written meanwhile, or its wait parked the
                # task (the park ended the lease): no lease was lost.
                return
            METRICS.lease_lost()
            log(
                logging.WARNING,
                "lease ended; stopping the handler",
                "lease_ended",
                task=run.task,
                fence=execution.fence,
                reason=type(exc).__name__,
            )
            run.abandon(StopReason.LEASE)
            return
        except BackendError as exc:
            self._health.renew_failed()
            if time.monotonic() > run.lease_until:
                METRICS.lease_lost()
                log(
                    logging.WARNING,
                    "lease ran out while Redis was unreachable; stopping the handler",
                    "lease_expired",
                    task=run.task,
                    fence=execution.fence,
                    error=type(exc).__name__,
                )
                run.abandon(StopReason.LEASE)
            return
        finally:
            run.renewing = False
        run.lease_until = asked_at + settings.lease_s
        self._health.renewed()
        if cancel and not execution.cancelled.is_set():
            log(
                logging.INFO,
                "cancellation requested",
                "cancel_requested",
                task=run.task,
                fence=execution.fence,
            )
            execution.cancelled.set()
