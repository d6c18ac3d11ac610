"""Benchmark adapter for SAQ (``saq``), Redis queue, run with ``saq.Worker`` in-process.

Settings changed from SAQ's defaults, and why:

* ``ttl=-1`` on every job (default 600 s): SAQ keeps a finished job's record (with its result)
  for ``ttl`` seconds; ``-1`` deletes it when the job finishes, i.e. no stored results.
* ``concurrency=CONCURRENCY`` (default 10), queue ``name=QUEUE``.
* The worker's redis-py client gets ``socket_timeout=None``. SAQ declares ``redis<8``, whose
  default that is; redis-py 8 defaults to 5 s, which aborts each of the worker's
  indefinitely blocking BLMOVE calls every 5 s (a reconnect, HELLO and a new BLMOVE each).

Everything else is SAQ's default, which is already the low-latency setup: the worker's
``dequeue_timeout=0`` makes each of its ``concurrency`` dequeue loops block in BLMOVE (no
polling), and durability defaults are kept (``retries=1``, ``timeout=10``, the sweep of stuck
jobs every 60 s, ``max_concurrent_ops=20`` for client operations).
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from _peer_common import batches, glob_escape, run_until_cancelled, unlink_matching
from _protocol_path import OnJob, main
from redis.asyncio import Redis
from saq import Queue, Worker
from saq.queue.redis import RedisQueue

NAME = "saq"

FUNCTION = "noop"

_QUEUES: dict[tuple[str, str], Queue] = {}
_ON_JOB: OnJob | None = None


async def noop(ctx: Any, *, stamp: float | None) -> None:
    """The benchmark job: report its start to the harness, do nothing else."""
    if _ON_JOB is not None:
        _ON_JOB(stamp)


async def _queue(url: str, queue: str) -> Queue:
    """The process's one SAQ queue (one redis-py client) for ``url`` and ``queue``."""
    q = _QUEUES.get((url, queue))
    if q is None:
        q = Queue.from_url(url, name=queue)
        await q.connect()
        _QUEUES[(url, queue)] = q
    return q


async def enqueue(url: str, queue: str, count: int, stamp: float | None) -> None:
    """Enqueue ``count`` no-op jobs carrying ``stamp``, 500 in flight at a time."""
    q = await _queue(url, queue)
    for size in batches(count):
        await asyncio.gather(*(q.enqueue(FUNCTION, stamp=stamp, ttl=-1) for _ in range(size)))


async def work(url: str, queue: str, concurrency: int, on_job: OnJob) -> None:
    """Run a SAQ worker on ``queue`` at ``concurrency`` until cancelled."""
    global _ON_JOB
    _ON_JOB = on_job
    q = RedisQueue(Redis.from_url(url, socket_timeout=None), name=queue)
    await q.connect()
    worker = Worker(q, functions=[(FUNCTION, noop)], concurrency=concurrency)
    try:
        # start() swallows its cancellation and stops the worker in its own ``finally``:
        # stop() cancels the dequeue loops and running jobs (SAQ retries those).
        await run_until_cancelled(worker.start())
    finally:
        await worker.stop()
        await q.disconnect()


async def clean(url: str, queue: str) -> None:
    """Delete the queue's ``saq:QUEUE:*`` keys and its jobs' ``saq:job:QUEUE:*`` records."""
    q = glob_escape(queue)
    await unlink_matching(url, [f"saq:{q}:*", f"saq:job:{q}:*"])


if __name__ == "__main__":
    main(sys.modules[__name__])
