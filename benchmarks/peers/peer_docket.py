"""Benchmark adapter for docket (PyPI ``pydocket``), run with ``docket.Worker`` in-process.

Settings changed from docket's defaults, and why:

* ``execution_ttl=0`` on the ``Docket`` (default 15 min): docket keeps each finished task's
  execution record (state, and a result when the task returns one) for ``execution_ttl``;
  0 deletes it when the task finishes, i.e. nothing is stored for finished jobs.
* ``minimum_check_interval=5 ms`` (constructor default 250 ms; ``docket worker``, the CLI,
  uses 100 ms). It is the XREADGROUP block time (a new task wakes a blocked read at once, so
  it hardly matters for pickup) and also how long the loop sleeps whenever all
  ``concurrency`` slots are busy, which caps drain throughput: 5000 no-op jobs at
  concurrency 32 drained at ~126 jobs/s with 250 ms, ~310 with 100 ms, ~1000 with 5 ms.
  5 ms is the same interval the arq adapter polls at; an idle worker then sends Redis
  about 30 commands a second.
* ``concurrency=CONCURRENCY`` (default 10); the docket ``name=QUEUE`` (the key prefix).

Kept at their defaults: redelivery of unacknowledged tasks after 5 min, lease renewal,
heartbeats every 2 s, ``scheduling_resolution`` 250 ms (only moves *future* tasks to the
stream; tasks due now are added to it directly), no retries unless a task asks for them.
Jobs are enqueued with ``Docket.add_many`` (pipelined, 500 per call).
"""

from __future__ import annotations

import sys
from datetime import timedelta

from _peer_common import batches, glob_escape, run_until_cancelled, unlink_matching
from _protocol_path import OnJob, main
from docket import Docket, Worker

NAME = "docket"

MINIMUM_CHECK_INTERVAL = timedelta(milliseconds=5)
EXECUTION_TTL = timedelta(0)

_DOCKETS: dict[tuple[str, str], Docket] = {}
_ON_JOB: OnJob | None = None


async def noop(stamp: float | None) -> None:
    """The benchmark job: report its start to the harness, do nothing else."""
    if _ON_JOB is not None:
        _ON_JOB(stamp)


def _docket(url: str, queue: str) -> Docket:
    """A docket named ``queue`` with the no-op task registered (not yet entered)."""
    docket = Docket(name=queue, url=url, execution_ttl=EXECUTION_TTL)
    docket.register(noop)
    return docket


async def _client_docket(url: str, queue: str) -> Docket:
    """The process's one entered (connected) docket for ``url`` and ``queue``."""
    docket = _DOCKETS.get((url, queue))
    if docket is None:
        docket = _docket(url, queue)
        # Kept open for the life of the process (the harness's client runs until stdin ends).
        await docket.__aenter__()
        _DOCKETS[(url, queue)] = docket
    return docket


async def enqueue(url: str, queue: str, count: int, stamp: float | None) -> None:
    """Enqueue ``count`` no-op tasks carrying ``stamp`` with ``add_many``, 500 per call."""
    docket = await _client_docket(url, queue)
    for size in batches(count):
        calls = [docket.call(noop)(stamp) for _ in range(size)]
        await docket.add_many(calls, chunk_size=None)


async def work(url: str, queue: str, concurrency: int, on_job: OnJob) -> None:
    """Run a docket worker on the docket ``queue`` at ``concurrency`` until cancelled."""
    global _ON_JOB
    _ON_JOB = on_job
    async with (
        _docket(url, queue) as docket,
        Worker(
            docket, concurrency=concurrency, minimum_check_interval=MINIMUM_CHECK_INTERVAL
        ) as worker,
    ):
        # Cancelling run_forever() lets running tasks finish, then the contexts close.
        await run_until_cancelled(worker.run_forever())


async def clean(url: str, queue: str) -> None:
    """Delete every ``QUEUE:*`` key of the docket."""
    await unlink_matching(url, [f"{glob_escape(queue)}:*"])


if __name__ == "__main__":
    main(sys.modules[__name__])
