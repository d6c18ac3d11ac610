"""Worker throughput and pickup latency on no-op tasks.

Usage:
    python -m benchmarks.worker_bench --redis-url redis://127.0.0.1:6379/0
    python -m benchmarks.worker_bench --start-server          # a private redis-server
    python -m benchmarks.worker_bench --start-server --start-cluster --workers 1,2,4

drain:  N tasks are created while the worker processes are stopped (SIGSTOP), then
        they resume; tasks/s = N / (time until every work stream is empty). The
        median of --rounds rounds is reported, per target and worker count.
pickup: one worker idles; M tasks are created one at a time, each after the
        previous finished; latency = handler start - create call start.
With --start-server and --start-cluster, both targets run in the same invocation,
side by side.
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

from redis_tasks import RedisTaskManager, RequestContext, Task, TaskOrigin, TaskRequestContext
from redis_tasks.testing import start_redis_cluster, start_redis_server

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


async def until_terminal(manager: RedisTaskManager, task_id: str, every: float) -> Task:
    """Poll ``task_id`` every ``every`` seconds until it is terminal."""
    while True:
        task = await manager.find_task(TaskRequestContext(WHO, task_id))
        if task is not None and task.is_terminal:
            return task
        await asyncio.sleep(every)


async def wait_idle(manager: RedisTaskManager) -> None:
    """Until a probe task completes: the worker is up and reading."""
    probe = await manager.create_task(WHO, ORIGIN)
    await until_terminal(manager, probe.task_id, 0.01)


async def backlog(manager: RedisTaskManager) -> int:
    lengths = await asyncio.gather(
        *(manager.client.xlen(manager.keyspace.work(p)) for p in range(manager.partitions))
    )
    return sum(lengths)


async def drain_round(url: str, n: int, concurrency: int, workers: int, log: Path) -> float:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        processes = [start_worker(url, prefix, "noop", concurrency, log) for _ in range(workers)]
        try:
            for _ in processes:
                await wait_idle(manager)
            for process in processes:
                process.send_signal(signal.SIGSTOP)
            created = 0
            while created < n:
                batch = min(500, n - created)
                await asyncio.gather(*(manager.create_task(WHO, ORIGIN) for _ in range(batch)))
                created += batch
                progress("create", created, n)
            started = time.perf_counter()
            for process in processes:
                process.send_signal(signal.SIGCONT)
            left = n
            while left:
                left = await backlog(manager)
                progress("drain", n - left, n)
                if left:
                    await asyncio.sleep(0.01)
            elapsed = time.perf_counter() - started
        finally:
            for process in processes:
                process.send_signal(signal.SIGCONT)
                process.terminate()
            for process in processes:
                process.wait(timeout=30)
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
                found = await until_terminal(manager, task.task_id, 0.002)
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
    # A partition's keys share one hash tag, hence one slot: unlink them together.
    by_tag: dict[bytes, list[bytes]] = {}
    for key in keys:
        by_tag.setdefault(key[: key.index(b"}") + 1], []).append(key)
    for group in by_tag.values():
        for i in range(0, len(group), 1000):
            await manager.client.unlink(*group[i : i + 1000])


async def measure(url: str, args: argparse.Namespace, log: Path) -> dict[str, Any]:
    drains = {}
    for workers in args.worker_counts:
        rates = [
            await drain_round(url, args.tasks, args.concurrency, workers, log)
            for _ in range(args.rounds)
        ]
        drains[workers] = {
            "rounds": [round(r) for r in rates],
            "median": round(statistics.median(rates)),
        }
    latencies = await pickup(url, args.pickups, args.concurrency, log)
    return {
        "drain": drains,
        "pickup_p50_ms": round(percentile(latencies, 0.50), 2),
        "pickup_p99_ms": round(percentile(latencies, 0.99), 2),
    }


def main(arguments: argparse.Namespace) -> dict[str, Any]:
    log = Path(tempfile.gettempdir()) / f"worker-bench-{os.getpid()}.log"
    results: dict[str, Any] = {
        "concurrency": arguments.concurrency,
        "tasks": arguments.tasks,
        "pickups": arguments.pickups,
        "targets": {},
        "worker_log": str(log),
    }
    with tempfile.TemporaryDirectory() as data:
        targets: list[tuple[str, str, Any]] = []
        if arguments.redis_url:
            targets.append(("given", arguments.redis_url, None))
        if arguments.start_server:
            server = start_redis_server(Path(data) / "standalone")
            targets.append(("standalone", server.url, server))
        if arguments.start_cluster:
            cluster = start_redis_cluster(Path(data) / "cluster")
            targets.append(("cluster", cluster.url, cluster))
        if not targets:
            raise SystemExit("give --redis-url, REDIS_URL, --start-server or --start-cluster")
        try:
            for name, url, _ in targets:
                results["targets"][name] = asyncio.run(measure(url, arguments, log))
        finally:
            for _, _, running in targets:
                if running is not None:
                    running.stop()
    return results


def report(result: dict[str, Any]) -> None:
    print(
        f"no-op tasks, worker processes at concurrency {result['concurrency']}; "
        f"drain of {result['tasks']} tasks, median tasks/s (rounds)"
    )
    counts = list(next(iter(result["targets"].values()))["drain"])
    print(
        f"  {'target':11}"
        + "".join(f"{f'{w} worker' + ('s' if w > 1 else ''):>24}" for w in counts)
        + f"{'pickup p50/p99 ms':>22}"
    )
    for name, target in result["targets"].items():
        cells = "".join(
            f"{str(target['drain'][w]['median']) + ' ' + str(target['drain'][w]['rounds']):>24}"
            for w in counts
        )
        print(f"  {name:11}{cells}{target['pickup_p50_ms']:>14} / {target['pickup_p99_ms']}")


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
    parser.add_argument(
        "--start-cluster",
        action="store_true",
        help="start a private 3-primary, 3-replica cluster on loopback",
    )
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pickups", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--workers", default="1", help="worker process counts, e.g. 1,2,4")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    arguments = parser.parse_args()
    arguments.worker_counts = [int(w) for w in arguments.workers.split(",")]
    outcome = main(arguments)
    if arguments.json:
        print(json.dumps(outcome))
    else:
        report(outcome)
