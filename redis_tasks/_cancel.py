"""Ending background tasks whose cancellation can be lost on the way.

redis-py 8 sends every command under ``asyncio.wait_for`` (its ``socket_timeout``,
which we set to the call's deadline), and on Python before 3.12 ``wait_for``
loses a cancellation that arrives as the awaited write completes (CPython
gh-86296): the task goes on as if never cancelled. Measured here with a task
looping ``PING`` on redis-py 8.1 and Python 3.11: 256 of 400 cancellations
lost. A ``while True`` loop of ours that met one went back to sleep, and the
worker's stop, waiting for it, hung (the worker-process metrics test, about one
run in four under load).

So every loop the library stops is cancelled *until it ends*, a repeat every
50 ms; a lost cancellation then costs one more loop turn, and a repeat lands on
the loop's pause between calls, which cannot lose it (a loop that never paused
between redis-py commands could lose every one: ours all pause). The library's
hot path writes to the socket itself and never meets this. The cost is nothing
while tasks end on the first cancellation, the common case.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any, Final

__all__ = ["cancel_and_wait"]

#: Seconds between repeated cancellations of a task that went on.
REPEAT: Final = 0.05


async def cancel_and_wait(tasks: Iterable[asyncio.Future[Any]], *, every: float = REPEAT) -> None:
    """Cancel ``tasks`` and return once every one has ended, cancelling again each
    ``every`` seconds those that went on (see the module). Their outcomes and
    exceptions are left on them, retrieved."""
    every_task = list(tasks)
    pending = {task for task in every_task if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=every)
    for task in every_task:
        if not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" at exit
