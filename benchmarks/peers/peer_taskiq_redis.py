"""Benchmark adapter for taskiq with taskiq-redis's ``RedisStreamBroker``, in-process receiver.

The worker is what ``taskiq worker`` runs in each worker process: a ``taskiq.receiver.Receiver``
over the broker, awaited with ``Receiver.listen(finish_event)`` here instead of from the CLI.

Settings changed from the defaults, and why:

* ``max_async_tasks=CONCURRENCY`` (the CLI's default is 100): at most CONCURRENCY jobs run at
  once. ``max_prefetch`` stays 0 (the default): the broker already reads the stream in batches
  of ``xread_count=100``.
* ``consumer_id="0"`` (default ``"$"``): the consumer group, created by whichever process
  starts first, delivers entries added before it existed instead of skipping them, so that a
  job enqueued while the worker is still starting up is not lost. It changes nothing after.
* ``queue_name=QUEUE`` (the stream key).
* ``socket_timeout=None`` (redis-py's default before 8.0), as for BullMQ and SAQ: see
  ``_make_broker``.

Kept at their defaults: acknowledgement after the task finished and its (absent) result was
handled (``ack_type=WHEN_SAVED``), XREADGROUP blocking 2 s (a new entry wakes it at once),
re-claiming entries idle for 10 min, no stream trimming (``maxlen=None``). There is no result
backend (``RedisStreamBroker`` defaults to taskiq's dummy one), so no result is stored.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeAlias

from _peer_common import batches, glob_escape, run_until_cancelled, unlink_matching
from _protocol_path import OnJob, main
from taskiq import AsyncTaskiqDecoratedTask
from taskiq.receiver import Receiver
from taskiq_redis import RedisStreamBroker

NAME = "taskiq-redis"

TASK_NAME = "noop"
CONSUMER_GROUP = "taskiq"  # RedisStreamBroker's default

_NoopTask: TypeAlias = "AsyncTaskiqDecoratedTask[[float | None], Coroutine[Any, Any, None]]"

_BROKERS: dict[tuple[str, str], tuple[RedisStreamBroker, _NoopTask]] = {}
_ON_JOB: OnJob | None = None


async def noop(stamp: float | None) -> None:
    """The benchmark job: report its start to the harness, do nothing else."""
    if _ON_JOB is not None:
        _ON_JOB(stamp)


def _make_broker(url: str, queue: str) -> tuple[RedisStreamBroker, _NoopTask]:
    """A stream broker on ``queue`` with the no-op task registered on it."""
    # socket_timeout=None: redis-py's default before 8.0. With 8.x's 5 s, the
    # blocking XREADGROUP of a worker frozen (SIGSTOP) longer than that while the
    # harness enqueues times out on resume, and the receiver dies.
    broker = RedisStreamBroker(url, queue_name=queue, consumer_id="0", socket_timeout=None)
    task = broker.register_task(noop, task_name=TASK_NAME)
    return broker, task


async def _client_broker(url: str, queue: str) -> tuple[RedisStreamBroker, _NoopTask]:
    """The process's one started broker (one connection pool) for ``url`` and ``queue``."""
    cached = _BROKERS.get((url, queue))
    if cached is None:
        cached = _make_broker(url, queue)
        await cached[0].startup()
        _BROKERS[(url, queue)] = cached
    return cached


async def enqueue(url: str, queue: str, count: int, stamp: float | None) -> None:
    """Enqueue ``count`` no-op jobs carrying ``stamp``, 500 in flight at a time."""
    _, task = await _client_broker(url, queue)
    for size in batches(count):
        await asyncio.gather(*(task.kiq(stamp) for _ in range(size)))


async def work(url: str, queue: str, concurrency: int, on_job: OnJob) -> None:
    """Run a taskiq receiver on the ``queue`` stream at ``concurrency`` until cancelled."""
    global _ON_JOB
    _ON_JOB = on_job
    broker, _ = _make_broker(url, queue)
    broker.is_worker_process = True
    finish = asyncio.Event()
    # As the CLI does: a thread pool for sync tasks (there are none here).
    with ThreadPoolExecutor(max_workers=1) as executor:
        receiver = Receiver(broker, executor=executor, max_async_tasks=concurrency)
        try:
            # listen() runs broker.startup() first, then reads until cancelled.
            await run_until_cancelled(receiver.listen(finish))
        finally:
            finish.set()
            await broker.shutdown()


async def clean(url: str, queue: str) -> None:
    """Delete the stream (with its consumer group) and its XAUTOCLAIM lock key."""
    q = glob_escape(queue)
    await unlink_matching(url, [q, f"autoclaim:{glob_escape(CONSUMER_GROUP)}:{q}"])


if __name__ == "__main__":
    main(sys.modules[__name__])
