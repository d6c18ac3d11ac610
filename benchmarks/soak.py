"""Soak: steady, bounded load for a long time, with memory sampled throughout.

Usage:
    python -m benchmarks.soak                       # 30 minutes on a private redis-server
    python -m benchmarks.soak --cluster --metrics --plot benchmarks/soak-cluster.svg
    python -m benchmarks.soak --minutes 2 --rate 300 --redis-url redis://127.0.0.1:6379/0

Creates ``--rate`` tasks a second (1 h would be the default TTL; here ``--ttl`` seconds,
so expiry reaches a steady state within the run), runs them on ``--workers``
``redis-tasks`` worker processes (no-op handler), polls each task once it is
created and keeps an event subscriber busy. Every ``--every`` seconds it samples
Redis ``used_memory``, the number of keys, the summed length of the work and
event streams, and the resident memory of every worker process (per primary on
a cluster: ``--cluster`` starts a private 3-primary, 3-replica one; ``--metrics``
runs the workers recording every metric, as ``--metrics-port`` does). The verdict
compares the last third of the run with the middle third (the first third is
warm-up: tasks are still accumulating until the TTL turns them over): memory and
RSS are *flat* when they grew by at most ``--tolerance`` (default 10 %), and the
streams are bounded when they stay under their MAXLEN plus a small backlog.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from redis_tasks import RedisTaskManager, TaskRequestContext
from redis_tasks._bench._adapter import ORIGIN, WHO, delete_prefix
from redis_tasks._bench._progress import Progress
from redis_tasks._bench._systems import AdapterProcess, ours
from redis_tasks.testing import start_redis_cluster, start_redis_server

from .soak_plot import plot


def rss_kib(pid: int) -> int:
    """Resident set size of process ``pid`` in KiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def sample(manager: RedisTaskManager, workers: list[AdapterProcess]) -> dict[str, Any]:
    """One reading of everything the verdict looks at (memory and keys per primary)."""
    primaries = manager.primary_clients()
    memories = await asyncio.gather(*(c.info("memory") for c in primaries))
    keys = await asyncio.gather(*(c.dbsize() for c in primaries))
    client = manager.client
    # One at a time: redis-py's cluster client failed a gather of these (a connection
    # used by two calls at once); a few dozen calls every few seconds cost nothing.
    streams = [manager.keyspace.work(p) for p in range(manager.partitions)]
    streams += [manager.keyspace.events(p) for p in range(manager.partitions)]
    lengths = [await client.xlen(stream) for stream in streams]
    half = manager.partitions
    per_primary = [int(m["used_memory"]) for m in memories]
    return {
        "t": time.monotonic(),
        "used_memory": sum(per_primary),
        "used_memory_by_primary": per_primary,
        "keys_by_primary": [int(k) for k in keys],
        "keys": sum(int(k) for k in keys),
        "work_backlog": sum(lengths[:half]),
        "events": sum(lengths[half:]),
        "worker_rss_kib": [rss_kib(w.pid) for w in workers],
    }


async def soak(url: str, args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"soak-{secrets.token_hex(3)}"
    duration = args.minutes * 60
    progress = Progress()
    samples: list[dict[str, Any]] = []
    created = polled = seen_events = 0
    log = Path(tempfile.gettempdir()) / f"soak-{os.getpid()}.log"
    with log.open("ab") as log_file:
        workers = [
            await AdapterProcess.start(
                ours(), ("worker", url, prefix, str(args.concurrency)), log_file, f"worker {i}"
            )
            for i in range(args.workers)
        ]
        try:
            async with RedisTaskManager.from_url(
                url, prefix=prefix, events_maxlen=args.events_maxlen
            ) as manager:

                def on_event(task_id: str) -> None:
                    nonlocal seen_events
                    seen_events += 1

                registration = manager.event_publisher.subscribe(on_event)
                await manager.event_publisher.wait_ready()
                started = time.monotonic()
                next_sample = started
                in_flight: set[asyncio.Task[None]] = set()

                async def one() -> None:
                    nonlocal created, polled
                    task = await manager.create_task(WHO, ORIGIN, ttl=timedelta(seconds=args.ttl))
                    created += 1
                    await manager.find_task(TaskRequestContext(WHO, task.task_id))
                    polled += 1

                tick = 1 / args.rate
                due = started
                while (now := time.monotonic()) - started < duration:
                    if now >= next_sample:
                        samples.append(await sample(manager, workers))
                        next_sample += args.every
                        progress.update("soak (seconds)", int(now - started), int(duration))
                    if len(in_flight) < args.max_in_flight:
                        job = asyncio.create_task(one())
                        in_flight.add(job)
                        job.add_done_callback(in_flight.discard)
                    due += tick
                    await asyncio.sleep(max(0.0, due - time.monotonic()))
                await asyncio.gather(*in_flight)
                samples.append(await sample(manager, workers))
                progress.update("soak (seconds)", int(duration), int(duration))
                registration.close()
                await delete_prefix(manager)
        finally:
            await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
    return verdict(samples, args, created, polled, seen_events, manager.partitions)


def verdict(
    samples: list[dict[str, Any]],
    args: argparse.Namespace,
    created: int,
    polled: int,
    events: int,
    partitions: int,
) -> dict[str, Any]:
    third = max(1, len(samples) // 3)
    middle, last = samples[third : 2 * third], samples[2 * third :]

    def growth(pick: Any) -> float:
        before = statistics.mean(pick(s) for s in middle)
        after = statistics.mean(pick(s) for s in last)
        return after / before - 1 if before else 0.0

    workers = len(samples[0]["worker_rss_kib"])
    memory_growth = growth(lambda s: s["used_memory"])
    rss_growth = [growth(lambda s, i=i: s["worker_rss_kib"][i]) for i in range(workers)]
    bound = args.events_maxlen * partitions * 1.2 + args.rate * 2  # MAXLEN ~ trims in whole nodes
    return {
        "minutes": args.minutes,
        "rate": args.rate,
        "created": created,
        "polled": polled,
        "events_delivered": events,
        "samples": len(samples),
        "used_memory_mib": [round(s["used_memory"] / 2**20, 1) for s in samples],
        "used_memory_mib_by_primary": [
            [round(m / 2**20, 1) for m in s["used_memory_by_primary"]] for s in samples
        ],
        "keys_by_primary": [s["keys_by_primary"] for s in samples],
        "events_length": [s["events"] for s in samples],
        "work_length": [s["work_backlog"] for s in samples],
        "seconds": [round(s["t"] - samples[0]["t"], 1) for s in samples],
        "worker_rss_mib": [[round(k / 1024, 1) for k in s["worker_rss_kib"]] for s in samples],
        "max_events": max(s["events"] for s in samples),
        "max_work_backlog": max(s["work_backlog"] for s in samples),
        "redis_memory_growth": round(memory_growth, 3),
        "worker_rss_growth": [round(g, 3) for g in rss_growth],
        "flat": memory_growth <= args.tolerance and all(g <= args.tolerance for g in rss_growth),
        "streams_bounded": max(s["events"] for s in samples) <= bound
        and max(s["work_backlog"] for s in samples) <= args.rate * 2,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=float, default=300, help="tasks created per second")
    parser.add_argument("--ttl", type=int, default=120, help="task TTL in seconds")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--max-in-flight", type=int, default=256)
    parser.add_argument("--events-maxlen", type=int, default=1000)
    parser.add_argument("--every", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--tolerance", type=float, default=0.10)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--cluster", action="store_true", help="a private 3+3 cluster")
    parser.add_argument("--metrics", action="store_true", help="workers record every metric")
    parser.add_argument("--plot", type=Path, default=None, help="write an SVG of the run here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        server: Any = None
        if not args.redis_url:
            directory = Path(scratch)
            server = (
                start_redis_cluster(directory) if args.cluster else start_redis_server(directory)
            )
        url = args.redis_url or server.url
        try:
            result = asyncio.run(soak(url, args))
        finally:
            if server is not None:
                server.stop()
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.plot:
        args.plot.write_text(plot(result, "cluster" if args.cluster else "standalone"))
    print(
        f"{result['minutes']} min at {result['rate']}/s: {result['created']} created, "
        f"{result['polled']} polled, {result['events_delivered']} events delivered"
    )
    print(
        f"Redis used_memory MiB: first {result['used_memory_mib'][0]}, "
        f"max {max(result['used_memory_mib'])}, last {result['used_memory_mib'][-1]}; "
        f"growth last vs middle third {result['redis_memory_growth']:+.1%}"
    )
    print(f"worker RSS growth last vs middle third: {result['worker_rss_growth']}")
    print(
        f"streams: max events {result['max_events']}, max work backlog "
        f"{result['max_work_backlog']}; flat={result['flat']} "
        f"bounded={result['streams_bounded']}"
    )
    return 0 if result["flat"] and result["streams_bounded"] else 1


if __name__ == "__main__":
    sys.exit(main())
