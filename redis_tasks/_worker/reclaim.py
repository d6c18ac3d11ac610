"""Taking over the work of workers that died, and forgetting their consumers.

Why: an entry a worker read or claimed stays pending with its consumer until the
task ends; a worker that died (SIGKILL, a lost host) leaves its entries there, and
nobody else would ever read them. Every half lease, each partition's entries idle
longer than a lease are taken over (``XAUTOCLAIM``, from a cursor kept per
partition) and claimed like new ones, up to ``read_batch`` free slots a partition;
the claim checks the task's own lease deadline, so a live lease (a stalled but
living worker, renewing) is left alone and its run goes on. Every hundredth pass
(and the first) removes other consumers idle a day with nothing pending; a
stopping worker removes its own where it left nothing pending.

Cost: one ``expired_leases`` script call (the leases of direct claims, which have no
entry: by deadline) and one ``XAUTOCLAIM`` per partition every half lease, whether or
not anything is there; a claim per entry or lease taken over.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from datetime import timedelta
from typing import Any, Final

from redis_tasks._errors import RedisTasksError
from redis_tasks._telemetry.metrics import METRICS
from redis_tasks._work_queue import WorkEntry, WorkQueue

from .run_state import Settings
from .runs import Runs
from .slots import Background, Slots

__all__ = ["Reclaim"]

# A consumer with nothing pending that has been idle this long belongs to a
# worker that is gone; its entry in the group is removed.
_STALE_CONSUMER: Final = timedelta(hours=24)


class Reclaim:
    """A worker's reclaim loop and consumer housekeeping (see the module)."""

    def __init__(
        self,
        queue: WorkQueue,
        runs: Runs,
        slots: Slots,
        settings: Settings,
        background: Background,
        drop: Callable[[WorkEntry], Coroutine[Any, Any, None]],
    ) -> None:
        self._queue = queue
        self._runs = runs
        self._slots = slots
        self._settings = settings
        self._background = background
        self._drop = drop

    async def loop(self, partitions: tuple[int, ...]) -> None:
        """Every half lease, take over entries idle longer than a lease, until cancelled."""
        settings = self._settings
        every = max(settings.lease_s / 2, 0.05)
        cursors = dict.fromkeys(partitions, "0-0")
        passes = 0
        while True:
            await asyncio.sleep(every)
            passes += 1
            for partition in partitions:
                reserved = self._slots.take_up_to(settings.read_batch)
                if reserved is None:
                    break
                try:
                    cursor, entries = await self._queue.reclaim(
                        partition,
                        consumer=settings.name,
                        idle=settings.lease,
                        cursor=cursors[partition],
                        count=reserved.count,
                    )
                except RedisTasksError:
                    continue
                else:
                    # Keep the cursor: the next pass continues where this one stopped.
                    cursors[partition] = cursor
                    if entries:
                        METRICS.reclaimed(partition, len(entries))
                    for entry in entries:
                        if entry.task_id is None:
                            # A doorbell, or not an entry redis-tasks wrote: drop it, or
                            # it would be reclaimed forever.
                            self._background.spawn(self._drop(entry))
                        else:
                            self._runs.start_reclaimed(entry, reserved.split())
                finally:
                    # What no run took, on every path out (a stop cancels this loop).
                    reserved.give_back()
            if passes % 100 == 1:
                await self._remove_stale_consumers(partitions)

    async def _remove_stale_consumers(self, partitions: tuple[int, ...]) -> None:
        for partition in partitions:
            try:
                await self._queue.remove_stale_consumers(
                    partition, keep=self._settings.name, idle=_STALE_CONSUMER
                )
            except RedisTasksError:
                return

    async def forget_consumer(self, partitions: tuple[int, ...]) -> None:
        """Hand back what was delivered to this worker and never claimed (a read its
        stop cancelled), then remove its consumer from each group it left nothing
        pending in."""
        name = self._settings.name
        for partition in partitions:
            try:
                await self._queue.hand_back_unclaimed(partition, name)
                await self._queue.forget_consumer(partition, name)
            except RedisTasksError:
                # Best effort: an entry left pending is reclaimed after a lease, and a
                # stale consumer is removed by others later.
                return
