"""Parking: a run whose handler waits for its client's input gives its slot back.

A person answers an elicitation in seconds, minutes or never; a run waiting for one
held its slot, its lease and its renewals all that time, so four unanswered questions
stopped a worker of concurrency 4. A wait now parks its task
(:class:`~redis_tasks.TaskParked` ends the handler; the ``park`` script ends the
lease), and the answer queues it again. When: after ``park_after`` (an automated
client answers within milliseconds, and a park then would cost it a re-run per
round), at once while every slot is taken (the slot may serve another tenant's task
now), and at once when the worker stops (a stop does not wait for people).

The cost: a parked task's handler runs again from the top once answered, a claim and
a replay of its answered rounds (each returns at once), against a slot held for as
long as a person thinks. While every slot is taken, a wait parks even when nothing
else would take the slot: the worker cannot see demand it has no slot to read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from redis_tasks._execution import TaskExecution
from redis_tasks._telemetry.metrics import METRICS

from .log import log
from .run_state import Run

__all__ = ["Parking", "parked"]


class Parking:
    """When the runs of one worker park their waits (see the module)."""

    def __init__(self, active: set[Run], pressed: Callable[[], bool]) -> None:
        self._active = active
        #: Whether every handler slot is taken (the worker's slots: O(1), asked at
        #: every start and every wait).
        self.pressed = pressed
        #: The executions whose last round is unanswered (they add and remove
        #: themselves): a drain has none, and a start looks at no run.
        self.waiting: set[TaskExecution] = set()

    def took_a_slot(self) -> None:
        """A run just took a slot: if it was the last, the waiting handlers park now."""
        if self.waiting and self.pressed():
            for execution in list(self.waiting):
                execution.notify_changed()  # it looks again, and parks

    def park_all(self) -> None:
        """Park every task whose handler waits for input, now or at its next wait."""
        for run in self._active:
            run.execution.park_now()


def parked(run: Run) -> None:
    """A run that ended with its task parked: nothing to write (the lease ended with
    the park), counted, logged and its span ended; its slot comes back as it leaves."""
    METRICS.run_ended("parked", time.monotonic() - run.started)
    log(logging.INFO, "task parked", "task_parked", task=run.task, fence=run.execution.fence)
    if run.span is not None:
        run.span.end("parked", None)
