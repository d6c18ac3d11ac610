"""How a stopping worker lets its runs go: a grace period, then stop and hand back.

A graceful stop first parks the tasks whose handlers wait for their client's input
(a person may answer in minutes: a stop does not wait for one; each is queued
again by its answer, for any worker), then gives running handlers the grace
period to end on their own (their outcomes are written as usual), then stops the
rest: each stopped handler hands
its task back itself, at once, for another worker to run (``release``: no attempt
counted). A handler that ignores the stop for longer than one call's deadline has
its task handed back from here and is left to end on its own; whatever it writes
then is refused by the fence. The cost: a stop takes at most the grace period plus
two call deadlines.
"""

from __future__ import annotations

import asyncio
import logging

from .log import log
from .run_state import RunState, StopReason
from .runs import Runs

__all__ = ["drain"]


async def drain(runs: Runs, grace: float, call_deadline: float) -> None:
    """Give ``runs``' handlers ``grace`` seconds, then stop and hand back the rest
    (``call_deadline``: the seconds one backend call may take)."""
    # Claims already sent still become runs; wait for them to register.
    await runs.claims_settled()
    runs.parking.park_all()
    tasks = [r.runner for r in runs.active if r.runner]
    if tasks:
        log(
            logging.INFO,
            "waiting for running handlers",
            "draining",
            running=len(tasks),
            grace=grace,
        )
        await asyncio.wait(tasks, timeout=grace)
    for run in list(runs.active):
        run.abandon(StopReason.SHUTDOWN)
    rest = [r for r in runs.active if r.runner]
    if not rest:
        return
    # Stopped handlers hand their tasks back themselves. One that goes on past a
    # call's timeout (it ignored the cancellation) is handed back from here, and
    # left to end on its own: its outcome is refused by the fence anyway.
    await asyncio.wait([r.runner for r in rest if r.runner], timeout=call_deadline)
    stubborn = [r for r in rest if r.state is RunState.STOPPING]
    for run in stubborn:
        log(
            logging.WARNING,
            "handler went on after it was stopped; its task is handed back",
            "handler_ignored_stop",
            task=run.task,
        )
    await asyncio.gather(*(runs.stopped(run) for run in stubborn))
    # The others end once their hand-back or outcome write does (each bounded).
    ending = [r.runner for r in rest if r.runner and r not in stubborn]
    if ending:
        await asyncio.wait(ending)
