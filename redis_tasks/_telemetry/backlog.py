"""A worker's gauges: handlers running, and a cheap, demand-driven sample of queue depth.

Depth is a few O(1) counters per partition (``XLEN``, the ``XPENDING`` summary,
the stats' ``queued`` and the sizes of the ring and the parked set, one round
trip: :meth:`~redis_tasks._work_queue.WorkQueue.depth`), reported as the backlog
(:attr:`~redis_tasks._work_queue.QueueDepth.backlog`: entries not delivered and
tasks in tenant queues), the pending entries and the tenants waiting (never which
ones). It is asked at most once per :data:`SAMPLE_EVERY` seconds,
and only while someone reads the gauges: an exporter's collection marks the
sample wanted, the worker's loop takes it, and the Prometheus endpoint brings it
up to date before it renders. A fleet of workers nobody scrapes asks nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from redis_tasks._errors import RedisTasksError
from redis_tasks._work_queue import QueueDepth, WorkQueue

__all__ = ["SAMPLE_EVERY", "WorkerGauges"]

#: Seconds a depth sample stays fresh.
SAMPLE_EVERY: Final = 5.0


class WorkerGauges:
    """What one worker reports to the gauges (a :class:`~.metrics.Gauges`)."""

    def __init__(
        self,
        queue: WorkQueue,
        partitions: Iterable[int],
        running: Callable[[], int],
        every: float = SAMPLE_EVERY,
    ) -> None:
        self._queue = queue
        self._partitions = tuple(partitions)
        self._running = running
        self._every = every
        self._depths: dict[int, QueueDepth] = {}
        self._sampled_at = float("-inf")
        self._wanted = False  # until an exporter reads the gauges
        self._sampling = asyncio.Lock()

    def running(self) -> int:
        """Handlers running now."""
        return self._running()

    def depths(self) -> Mapping[int, QueueDepth]:
        """The latest sample; asks the loop for a new one (called by an exporter)."""
        self._wanted = True
        return self._depths

    async def refresh(self) -> None:
        """Sample every partition again unless the latest sample is fresh.

        Bounded by one call's deadline: Redis down costs a scrape that long once,
        then the stale sample is served until the next sampling time.
        """
        async with self._sampling:
            if time.monotonic() - self._sampled_at < self._every:
                return
            self._sampled_at = time.monotonic()
            queue = self._queue
            try:
                async with asyncio.timeout(queue.timeout):
                    depths = await asyncio.gather(*(queue.depth(p) for p in self._partitions))
            except (RedisTasksError, TimeoutError):
                return
            # One assignment: an exporter thread reading meanwhile sees either sample.
            self._depths = dict(zip(self._partitions, depths, strict=True))

    async def loop(self) -> None:
        """Take a sample whenever one was wanted since the last, until cancelled."""
        while True:
            if self._wanted:
                self._wanted = False
                await self.refresh()
            await asyncio.sleep(self._every)
