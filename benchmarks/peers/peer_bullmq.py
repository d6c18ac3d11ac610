"""Benchmark adapter for BullMQ for Python (``bullmq``), run with ``bullmq.Worker`` in-process.

Settings changed from BullMQ's defaults, and why:

* ``removeOnComplete: True`` in the queue's ``defaultJobOptions`` (default: keep every
  completed job, with its return value, in the ``completed`` set): no stored results.
* ``concurrency=CONCURRENCY`` (default 1); ``autorun: False`` so that ``work`` awaits
  ``Worker.run()`` itself and can shut it down on cancellation.
* The worker's connections get ``socket_timeout=None`` (redis-py's default before 8.0; 8.x
  defaults to 5 s). An idle BullMQ worker blocks in BZPOPMIN for up to ``drainDelay`` = 5 s,
  which races redis-py 8's 5 s read timeout: measured here, a job enqueued after the worker
  had idled for a few seconds then started ~26 ms later instead of ~3 ms.

Everything else is BullMQ's default, which is already its low-latency setup: an idle worker
blocks in BZPOPMIN on the queue's marker key (``drainDelay`` 5 s is only that block's timeout),
jobs are locked for 30 s and renewed, stalled jobs are checked every 30 s
(``maxStalledCount=1``), failed jobs are kept, and ``attempts`` defaults to one. Jobs are
enqueued with ``Queue.addBulk`` (one MULTI pipeline of ``addStandardJob`` scripts per 500).
"""

from __future__ import annotations

import sys
from typing import Any

from _peer_common import batches, glob_escape, run_until_cancelled, unlink_matching
from _protocol_path import OnJob, main
from bullmq import Job, Queue, Worker  # type: ignore[import-untyped]
from redis.asyncio.connection import parse_url

NAME = "bullmq"

JOB_NAME = "noop"

_QUEUES: dict[tuple[str, str], Queue] = {}
_ON_JOB: OnJob | None = None


async def noop(job: Job, token: str) -> None:
    """The benchmark job: report its start to the harness, do nothing else."""
    if _ON_JOB is not None:
        _ON_JOB(job.data["stamp"])


def _queue(url: str, queue: str) -> Queue:
    """The process's one BullMQ ``Queue`` (one Redis connection) for ``url`` and ``queue``."""
    q = _QUEUES.get((url, queue))
    if q is None:
        options: Any = {"connection": url, "defaultJobOptions": {"removeOnComplete": True}}
        q = _QUEUES[(url, queue)] = Queue(queue, options)
    return q


async def enqueue(url: str, queue: str, count: int, stamp: float | None) -> None:
    """Enqueue ``count`` no-op jobs carrying ``stamp`` with ``addBulk``, 500 per call."""
    q = _queue(url, queue)
    for size in batches(count):
        await q.addBulk([{"name": JOB_NAME, "data": {"stamp": stamp}} for _ in range(size)])


async def work(url: str, queue: str, concurrency: int, on_job: OnJob) -> None:
    """Run a BullMQ worker on ``queue`` at ``concurrency`` until cancelled."""
    global _ON_JOB
    _ON_JOB = on_job
    connection = {**parse_url(url), "socket_timeout": None}
    options: Any = {"connection": connection, "concurrency": concurrency, "autorun": False}
    worker = Worker(queue, noop, options)
    try:
        # On cancellation run() cancels its fetches and running jobs (their locks lapse and
        # the stalled-job check puts them back) before re-raising.
        await run_until_cancelled(worker.run())
    finally:
        await worker.close()


async def clean(url: str, queue: str) -> None:
    """Delete every ``bull:QUEUE:*`` key."""
    await unlink_matching(url, [f"bull:{glob_escape(queue)}:*"])


if __name__ == "__main__":
    main(sys.modules[__name__])
