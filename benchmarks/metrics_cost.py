"""What metrics cost a ``redis-tasks worker`` process: its drain with ``--metrics-port``
against without, rounds interleaved on one private redis-server.

Usage: python -m benchmarks.metrics_cost [--tasks 40000] [--rounds 3] [--concurrency 32]

Each round enqueues ``--tasks`` no-op tasks, then starts the command-line worker (as
an operator runs it: JSON logs at INFO, here to /dev/null) with or without
``--metrics-port``, and times the drain from the first task completed to the last,
read off the partitions' stats counters, so the worker's start-up is not counted.
The two variants alternate round by round; the report gives each round, the
medians and their ratio, and the worker's CPU per task (user + system, from its
start to the last completion: start-up included).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from redis_tasks import RedisTaskManager, TaskExecution
from redis_tasks._bench._adapter import ORIGIN, WHO, delete_prefix
from redis_tasks._bench._progress import Progress
from redis_tasks._redis.keys import KeySpace
from redis_tasks._stats import TERMINAL_FIELDS
from redis_tasks.testing import start_redis_server

ROOT = Path(__file__).resolve().parent.parent
#: The manager's and the worker's default number of partitions.
PARTITIONS = 16


async def handler(execution: TaskExecution) -> dict[str, Any]:
    """The no-op handler the worker runs (``benchmarks.metrics_cost:handler``)."""
    return {}


async def _enqueue(url: str, prefix: str, count: int) -> None:
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        for start in range(0, count, 500):
            batch = min(500, count - start)
            await asyncio.gather(*(manager.create_task(WHO, ORIGIN) for _ in range(batch)))


async def _ended(client: Redis, keys: KeySpace) -> int:
    async with client.pipeline(transaction=False) as pipe:
        for partition in range(PARTITIONS):
            pipe.hmget(keys.stats(partition), list(TERMINAL_FIELDS))
        replies = await pipe.execute()
    return sum(int(v) for reply in replies for v in reply if v is not None)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (Linux: /proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _drain(url: str, count: int, concurrency: int, metered: bool) -> tuple[float, float]:
    """One round: jobs/s from the first completion to the last, and CPU µs per job."""
    prefix = f"mc{uuid.uuid4().hex[:8]}"
    await _enqueue(url, prefix, count)
    command = [
        *(sys.executable, "-m", "redis_tasks", "worker", "benchmarks.metrics_cost:handler"),
        *("--redis-url", url, "--prefix", prefix, "--concurrency", str(concurrency)),
        *(("--metrics-port", "0") if metered else ()),
    ]
    worker = await asyncio.create_subprocess_exec(
        *command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    client = Redis.from_url(url)
    keys = KeySpace(prefix)
    try:
        first: tuple[float, int] | None = None
        while True:
            done = await _ended(client, keys)
            now = time.perf_counter()
            if first is None and done > 0:
                first = (now, done)
            if done >= count:
                break
            if worker.returncode is not None:
                raise RuntimeError(f"the worker exited ({worker.returncode})")
            await asyncio.sleep(0.01)
        assert first is not None
        rate = (count - first[1]) / max(now - first[0], 1e-9)
        cpu = _cpu_seconds(worker.pid)
    finally:
        worker.terminate()
        await asyncio.wait_for(worker.wait(), 30)
        await client.aclose()
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        await delete_prefix(manager)
    return rate, cpu / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    progress = Progress()
    results: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
    with tempfile.TemporaryDirectory(prefix="redis-tasks-metrics-cost-") as scratch:
        server = start_redis_server(Path(scratch) / "redis")
        try:
            for round_ in range(args.rounds):
                for metered in (False, True) if round_ % 2 == 0 else (True, False):
                    name = "metrics" if metered else "plain"
                    progress.note(f"round {round_ + 1}/{args.rounds}: {name}")
                    sample = asyncio.run(_drain(server.url, args.tasks, args.concurrency, metered))
                    results[metered].append(sample)
                    progress.note(f"round {round_ + 1} {name}: {sample[0]:.0f} jobs/s")
        finally:
            server.stop()
    for metered, samples in results.items():
        rates = ", ".join(f"{rate:.0f}" for rate, _ in samples)
        print(
            f"{'--metrics-port' if metered else 'no metrics':15} "
            f"median {statistics.median(r for r, _ in samples):8.0f} jobs/s ({rates}); "
            f"worker CPU {statistics.median(c for _, c in samples):.0f} us/job"
        )
    ratio = statistics.median(r for r, _ in results[True]) / statistics.median(
        r for r, _ in results[False]
    )
    print(f"metrics on / off: {ratio:.2f}x")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
