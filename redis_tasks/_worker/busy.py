"""Telling creates that this worker is saturated: the busy mark of each partition it serves.

Why: a task created into a partition where nothing waits goes straight into its
work stream, for an idle worker's blocked read to take at once. A worker whose
every slot is taken reads nothing: its partitions' read loops wait in line for a
free slot, one turn each, so a task landing in a partition whose ring had drained
waited for that partition's turn, up to a free slot per partition served (0.37 to
0.78 s behind tools of 250 to 750 ms at concurrency 16, while tenants that joined
a ring started within 0.1 s as newcomers). So while runs hold all its slots, a
worker marks each partition it serves busy (``{tag}:busy``, expiring after
:data:`MARK_FOR`); a create that goes straight into a busy partition's stream then
signals its task as a newcomer's (``lua/includes/tenants.lua``'s ``enqueue``), and
the worker starts it at its next free slot, first in line (:mod:`.intake`).

Cost: while saturated, one ``SET`` per partition served per :data:`EVERY`, none
otherwise, and a count of the runs every :data:`LOOK_EVERY`; a create that goes
straight into a stream reads the mark (one ``EXISTS``), and signals only while it
is set. A worker with a spare slot drops such a signal (its own reads meet the
task in their turn).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Final

from redis_tasks._errors import RedisTasksError
from redis_tasks._work_queue import WorkQueue

__all__ = ["EVERY", "LOOK_EVERY", "MARK_FOR", "mark_busy_loop"]

#: At most one mark of the partitions a period.
EVERY: Final = timedelta(seconds=1)
#: How long a mark lasts: past a period or two of the worker saturated no longer.
MARK_FOR: Final = 3 * EVERY
#: How often an unsaturated worker looks again (a count of its runs: nothing else).
LOOK_EVERY: Final = timedelta(milliseconds=100)


async def mark_busy_loop(
    queue: WorkQueue, holding: Callable[[], int], concurrency: int, partitions: tuple[int, ...]
) -> None:
    """Mark ``partitions`` busy while runs hold every one of the ``concurrency`` slots
    (``holding()`` of them: a batch claim's reservations, gone in a round trip, do not
    count), at most once per :data:`EVERY`, until cancelled. A failed mark is let go:
    the next will do."""
    while True:
        if holding() < concurrency:
            await asyncio.sleep(LOOK_EVERY.total_seconds())
            continue
        with contextlib.suppress(RedisTasksError):
            await queue.mark_busy(partitions, MARK_FOR)
        await asyncio.sleep(EVERY.total_seconds())
