"""Benchmark adapter for arq (``arq``), run with ``arq.worker.Worker`` in-process.

Settings changed from arq's defaults, and why:

* ``poll_delay=0.005`` (default 0.5 s). arq has no blocking read: an idle worker polls the
  queue's sorted set every ``poll_delay``, so pickup latency is about half of it on average.
  The default would measure the sleep, not the library; at 5 ms an idle worker sends about
  170 small ZRANGEBYSCORE calls a second (measured). The docket adapter uses the same 5 ms.
* ``keep_result=0`` (default 3600 s): store no job results (the jobs return nothing).
* ``max_jobs=CONCURRENCY`` (default 10), ``queue_name=QUEUE``, ``handle_signals=False``
  (the harness owns the process and stops the worker by cancelling it).
* Job ids are ``QUEUE:<uuid4 hex>`` instead of a bare uuid4 hex, so that ``clean`` can find
  this queue's ``arq:job:*``/``arq:in-progress:*``/``arq:retry:*``/``arq:result:*`` keys.
* The client's pool has ``max_connections=500`` (one per enqueue in flight). arq 0.28 pins
  redis-py < 6, whose pools had no cap; the peer venv has redis-py 8 (the other peers need
  it), whose pools cap at 100 and raise MaxConnectionsError past that.

Durability settings are arq's defaults: ``max_tries=5``, ``job_timeout=300``, retries on.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from typing import Any

from _peer_common import BATCH, batches, glob_escape, run_until_cancelled, unlink_matching
from _protocol_path import OnJob, main
from arq.connections import ArqRedis, RedisSettings, create_pool
from arq.worker import Worker, func

NAME = "arq"

POLL_DELAY_S = 0.005
FUNCTION = "noop"

_POOLS: dict[tuple[str, str], ArqRedis] = {}
_ON_JOB: OnJob | None = None


async def noop(ctx: dict[str, Any], stamp: float | None) -> None:
    """The benchmark job: report its start to the harness, do nothing else."""
    if _ON_JOB is not None:
        _ON_JOB(stamp)


async def _pool(url: str, queue: str) -> ArqRedis:
    """The process's one arq pool for ``url`` and ``queue``."""
    pool = _POOLS.get((url, queue))
    if pool is None:
        settings = RedisSettings.from_dsn(url)
        # redis-py 8 caps a non-blocking pool at 100 connections and raises past that; arq's own
        # pin (redis-py < 6) had no cap. Each in-flight enqueue_job holds one connection (WATCH).
        settings.max_connections = BATCH
        pool = await create_pool(settings, default_queue_name=queue)
        _POOLS[(url, queue)] = pool
    return pool


async def enqueue(url: str, queue: str, count: int, stamp: float | None) -> None:
    """Enqueue ``count`` no-op jobs carrying ``stamp``, 500 in flight at a time."""
    pool = await _pool(url, queue)
    for size in batches(count):
        await asyncio.gather(
            *(
                pool.enqueue_job(FUNCTION, stamp, _job_id=f"{queue}:{uuid.uuid4().hex}")
                for _ in range(size)
            )
        )


async def work(url: str, queue: str, concurrency: int, on_job: OnJob) -> None:
    """Run an arq worker on ``queue`` at ``max_jobs=concurrency`` until cancelled."""
    global _ON_JOB
    _ON_JOB = on_job
    worker = Worker(
        functions=[func(noop, name=FUNCTION)],
        queue_name=queue,
        redis_settings=RedisSettings.from_dsn(url),
        max_jobs=concurrency,
        poll_delay=POLL_DELAY_S,
        keep_result=0,
        handle_signals=False,
    )
    try:
        await run_until_cancelled(worker.async_run())
    finally:
        # Cancels what is still running (arq retries those jobs) and closes the pool.
        await worker.close()


async def clean(url: str, queue: str) -> None:
    """Delete the queue's sorted set, its health-check key and its jobs' keys."""
    q = glob_escape(queue)
    await unlink_matching(
        url,
        [
            q,
            f"{q}:health-check",
            f"arq:job:{q}:*",
            f"arq:in-progress:{q}:*",
            f"arq:retry:{q}:*",
            f"arq:result:{q}:*",
        ],
    )


if __name__ == "__main__":
    main(sys.modules[__name__])
