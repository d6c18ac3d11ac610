"""Worker throughput and pickup latency: one worker process, no-op tasks.

Usage:
    python -m benchmarks.worker_bench --redis-url redis://127.0.0.1:6379/0
    python -m benchmarks.worker_bench --start-server          # a private redis-server

drain:  N tasks are created while the worker process is stopped (SIGSTOP), then it
        is resumed; tasks/s = N / (time until every work stream is empty). The
        median of --rounds rounds is reported.
pickup: the worker idles; M tasks are created one at a time, each after the
        previous finished; latency = handler start - create call start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from redis_tasks import RedisTaskManager, RequestContext, TaskOrigin, TaskRequestContext
from redis_tasks.testing import start_redis_server

ROOT = Path(__file__).resolve().parent.parent
WHO = RequestContext("/mcp", "bench")
ORIGIN = TaskOrigin.from_persisted_string('{"tool":"noop","arguments":{}}')


def progress(label: str, done: int, total: int) -> None:
    """A one-line progress bar on stderr."""
    width = 30
    filled = width * done // max(total, 1)
    sys.stderr.write(f"\r{label:14} [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
    if done >= total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_worker(url: str, prefix: str, handler: str, concurrency: int, log: Path) -> Any:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "redis_tasks",
            "worker",
            f"benchmarks.handlers:{handler}",
            "--redis-url",
            url,
            "--prefix",
            prefix,
            "--concurrency",
            str(concurrency),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


async def wait_idle(manager: RedisTaskManager) -> None:
    """Until a probe task completes: the worker is up and reading."""
    probe = await manager.create_task(WHO, ORIGIN)
    while True:
        task = await manager.find_task(TaskRequestContext(WHO, probe.task_id))
        if task is not None and task.is_terminal:
            return
        await asyncio.sleep(0.01)


async def backlog(manager: RedisTaskManager) -> int:
    async with manager.client.pipeline(transaction=False) as pipe:
        for partition in range(manager.partitions):
            pipe.xlen(manager.keyspace.work(partition))
        lengths = await pipe.execute()
    return sum(lengths)


async def drain_round(url: str, n: int, concurrency: int, log: Path) -> float:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        worker = start_worker(url, prefix, "noop", concurrency, log)
        try:
            await wait_idle(manager)
            worker.send_signal(signal.SIGSTOP)
            created = 0
            while created < n:
                batch = min(500, n - created)
                await asyncio.gather(*(manager.create_task(WHO, ORIGIN) for _ in range(batch)))
                created += batch
                progress("create", created, n)
            started = time.perf_counter()
            worker.send_signal(signal.SIGCONT)
            left = n
            while left:
                left = await backlog(manager)
                progress("drain", n - left, n)
                if left:
                    await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - started
        finally:
            worker.send_signal(signal.SIGCONT)
            worker.terminate()
            worker.wait(timeout=30)
            await _cleanup(manager)
    return n / elapsed


async def pickup(url: str, m: int, concurrency: int, log: Path) -> list[float]:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    latencies = []
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        worker = start_worker(url, prefix, "stamp", concurrency, log)
        try:
            await wait_idle(manager)
            for i in range(m):
                before = time.time()
                task = await manager.create_task(WHO, ORIGIN)
                while True:
                    found = await manager.find_task(TaskRequestContext(WHO, task.task_id))
                    if found is not None and found.is_terminal:
                        break
                    await asyncio.sleep(0.002)
                assert found.result is not None
                latencies.append((found.result["started"] - before) * 1000)
                progress("pickup", i + 1, m)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
            await _cleanup(manager)
    return latencies


async def _cleanup(manager: RedisTaskManager) -> None:
    keys = [k async for k in manager.client.scan_iter(match=manager.keyspace.pattern(), count=1000)]
    for i in range(0, len(keys), 1000):
        await manager.client.delete(*keys[i : i + 1000])


async def main(args: argparse.Namespace) -> dict[str, Any]:
    log = Path(tempfile.gettempdir()) / f"worker-bench-{os.getpid()}.log"
    rates = []
    for _ in range(args.rounds):
        rates.append(await drain_round(args.redis_url, args.tasks, args.concurrency, log))
    latencies = await pickup(args.redis_url, args.pickups, args.concurrency, log)
    return {
        "concurrency": args.concurrency,
        "drain_tasks": args.tasks,
        "drain_rounds_tasks_per_s": [round(r) for r in rates],
        "drain_median_tasks_per_s": round(statistics.median(rates)),
        "pickup_samples": len(latencies),
        "pickup_p50_ms": round(percentile(latencies, 0.50), 2),
        "pickup_p99_ms": round(percentile(latencies, 0.99), 2),
        "worker_log": str(log),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    parser.add_argument(
        "--start-server",
        action="store_true",
        help="start a private redis-server on a free loopback port",
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pickups", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", action="store_true", help="print JSON only")
    arguments = parser.parse_args()
    server = None
    with tempfile.TemporaryDirectory() as data:
        if arguments.start_server:
            server = start_redis_server(Path(data))
            arguments.redis_url = server.url
        if not arguments.redis_url:
            raise SystemExit("give --redis-url, REDIS_URL or --start-server")
        try:
            result = asyncio.run(main(arguments))
        finally:
            if server is not None:
                server.stop()
    if arguments.json:
        print(json.dumps(result))
    else:
        print(f"one worker process, concurrency {result['concurrency']}, no-op tasks")
        print(
            f"  drain  {result['drain_median_tasks_per_s']:>8} tasks/s (median of "
            f"{result['drain_rounds_tasks_per_s']}, {result['drain_tasks']} tasks each)"
        )
        print(
            f"  pickup p50 {result['pickup_p50_ms']} ms, p99 {result['pickup_p99_ms']} ms "
            f"({result['pickup_samples']} tasks one at a time)"
        )
