"""What a cancellation of a queued task costs: one tenant with 10,000 tasks waiting in
its queue (no worker runs), cancelled near the head, the middle and the tail of it,
against the cancellation of a task a worker holds (intent only, as before).

Usage: python -m benchmarks.cancel_queued [--queued 10000] [--cancels 200] [--json FILE]

Since ``request_cancellation`` ends a task no worker holds at once, it takes the
task out of its tenant's queue with ``LREM``, which walks the list from its head:
the further back the task, the longer the walk. Each region's cancellations run
one at a time on a private redis-server; reported: the call's latency (p50, p99)
and the server's own time for the ``EVALSHA`` calls (``INFO commandstats``,
µs per call), which is what the walk adds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from redis_tasks import RedisTaskManager, TaskRequestContext
from redis_tasks._bench._adapter import ORIGIN, WHO
from redis_tasks._bench._progress import Progress, percentile
from redis_tasks.testing import start_redis_server

_IN_FLIGHT = 500


async def _evalsha_usec(manager: RedisTaskManager) -> tuple[int, float]:
    """The server's EVALSHA calls and their total µs so far."""
    stats = await manager.client.info("commandstats")
    row = stats.get("cmdstat_evalsha", {})
    return int(row.get("calls", 0)), float(row.get("usec", 0))


async def _measure(url: str, queued: int, cancels: int) -> dict[str, Any]:
    progress = Progress()
    out: dict[str, Any] = {}
    async with RedisTaskManager.from_url(url, prefix="cq", partitions=1) as manager:
        ids: list[str] = []
        for start in range(0, queued, _IN_FLIGHT):
            made = await asyncio.gather(
                *(
                    manager.create_task(WHO, ORIGIN, ttl=timedelta(hours=1))
                    for _ in range(min(_IN_FLIGHT, queued - start))
                )
            )
            ids += [task.task_id for task in made]
            progress.update("queue", len(ids), queued)
        # The first went straight into the stream: the rest wait in the tenant's queue.
        waiting = ids[1:]
        regions = {
            "head": waiting[:cancels],
            "middle": waiting[len(waiting) // 2 : len(waiting) // 2 + cancels],
            "tail": waiting[-cancels:][::-1],  # the last first: the longest walks
        }
        for name, chosen in regions.items():
            out[name] = await _cancel_all(manager, chosen)
            progress.note(f"{name}: p50 {out[name]['p50_ms']} ms")
        # Held tasks (the queue's next ones, claimed as a worker would): intent only.
        held: list[str] = []
        while len(held) < cancels:
            claimed = await manager.work_queue.claim_next(
                0, consumer="w", count=16, lease=timedelta(minutes=5), max_attempts=5
            )
            held += [entry.task_id for entry, _ in claimed if entry.task_id is not None]
        out["held"] = await _cancel_all(manager, held[:cancels])
        out["queue_left"] = (await manager.work_queue.depth(0)).queued
        await manager.client.flushdb()
    return out


async def _cancel_all(manager: RedisTaskManager, chosen: list[str]) -> dict[str, float]:
    calls0, usec0 = await _evalsha_usec(manager)
    latencies = []
    for task_id in chosen:
        began = time.perf_counter()
        await manager.request_cancellation(TaskRequestContext(WHO, task_id))
        latencies.append((time.perf_counter() - began) * 1000)
    calls1, usec1 = await _evalsha_usec(manager)
    return {
        "p50_ms": round(statistics.median(latencies), 3),
        "p99_ms": round(percentile(latencies, 0.99), 3),
        "server_us_per_call": round((usec1 - usec0) / max(calls1 - calls0, 1), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=10_000)
    parser.add_argument("--cancels", type=int, default=200)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="redis-tasks-cancel-queued-") as scratch:
        server = start_redis_server(Path(scratch) / "redis")
        try:
            result = asyncio.run(_measure(server.url, args.queued, args.cancels))
        finally:
            server.stop()
    for name in ("head", "middle", "tail", "held"):
        row = result[name]
        print(
            f"{name:6}: p50 {row['p50_ms']:.3f} ms, p99 {row['p99_ms']:.3f} ms, "
            f"server {row['server_us_per_call']:.1f} us a call"
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"settings": vars(args), **result}, indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
