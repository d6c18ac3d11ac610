"""What the default ``wait_replicas="auto"`` costs beside ``wait_replicas=0``, side by side.

Usage: python -m benchmarks.wait_cost [--rounds 3] [--tasks 2000] [--lone 300]
       [--topology standalone|cluster|both] [--json FILE]

Why: the default waits for one replica on every write a client is told of (a create, an
outcome, an answer, a cancellation), where a primary has one; ``0`` never waits. The
price is a ``WAIT`` round trip per pipeline batch, so it shows most on a lone create and
least on batched work. Each round, on a private standalone server with one replica and
on a private 3-primary, 3-replica cluster, each setting in turn (the order alternating
from round to round, so the machine's drift hits both alike), in this one process:

- ``create``: ``--tasks`` creates from 32 coroutines: creates/s, p50 and p99 ms;
- ``lone create``: ``--lone`` creates one after another: p50 and p99 ms;
- ``drain``: a worker (concurrency 32) runs the ``--tasks`` created above: jobs/s;
- ``pickup``: a lone create to its handler's start on an idle worker, ``--lone`` times:
  p50 and p99 ms.

Medians of the rounds, and each figure of the default over ``0`` (drain: above 0.9 is
the issue's goal; create p50: at most +0.3 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from redis_tasks import RedisTaskManager, TaskExecution, Worker
from redis_tasks._bench._adapter import ORIGIN, WHO, delete_prefix
from redis_tasks._bench._progress import Progress
from redis_tasks.testing import start_redis_cluster, start_replicated_server

SETTINGS: tuple[int | str, ...] = ("auto", 0)


def _pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


async def _round(url: str, wait: int | str, tasks: int, lone: int) -> dict[str, float]:
    prefix = f"wc-{uuid.uuid4().hex[:8]}"
    async with RedisTaskManager.from_url(url, prefix=prefix, wait_replicas=wait) as manager:  # type: ignore[arg-type]
        try:
            return await _measure(manager, tasks, lone)
        finally:
            await delete_prefix(manager)


async def _timed(call: Callable[[], Awaitable[Any]]) -> float:
    began = time.perf_counter()
    await call()
    return (time.perf_counter() - began) * 1000


async def _measure(manager: RedisTaskManager, tasks: int, lone: int) -> dict[str, float]:
    create = lambda: manager.create_task(WHO, ORIGIN)  # noqa: E731
    latencies: list[float] = []
    remaining = iter(range(tasks))

    async def creator() -> None:
        for _ in remaining:
            latencies.append(await _timed(create))

    began = time.perf_counter()
    await asyncio.gather(*(creator() for _ in range(32)))
    create_s = time.perf_counter() - began
    lone_ms = [await _timed(create) for _ in range(lone)]

    done = asyncio.Event()
    picked = asyncio.Event()
    started: dict[str, float] = {}
    count = [0]
    total = tasks + lone

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        started[execution.task_id] = time.perf_counter()
        picked.set()
        count[0] += 1
        if count[0] == total:
            done.set()
        return {}

    async with Worker(manager, handler, concurrency=32) as worker:
        running = asyncio.create_task(worker.run())
        began = time.perf_counter()
        await done.wait()
        drain_s = time.perf_counter() - began
        pickups = []
        for _ in range(lone):
            picked.clear()
            sent = time.perf_counter()
            task = await manager.create_task(WHO, ORIGIN)
            await picked.wait()
            pickups.append((started[task.task_id] - sent) * 1000)
        await worker.stop()
        await running
    return {
        "create_per_s": round(tasks / create_s),
        "create_p50": _pct(latencies, 0.5),
        "create_p99": _pct(latencies, 0.99),
        "lone_create_p50": _pct(lone_ms, 0.5),
        "lone_create_p99": _pct(lone_ms, 0.99),
        "drain_per_s": round(total / drain_s),
        "pickup_p50": _pct(pickups, 0.5),
        "pickup_p99": _pct(pickups, 0.99),
    }


async def _topology(
    name: str, url: str, rounds: int, tasks: int, lone: int, progress: Progress
) -> dict[str, Any]:
    runs: dict[str, list[dict[str, float]]] = {str(w): [] for w in SETTINGS}
    # A replica just synced may answer its first WAIT late (up to a second, seen on
    # Redis 7.0): a throwaway round first, so no measured one pays for it.
    await _round(url, "auto", 100, 5)
    for r in range(rounds):
        order = SETTINGS if r % 2 == 0 else tuple(reversed(SETTINGS))
        for wait in order:
            progress.update(f"{name} round {r + 1} wait_replicas={wait}", r, rounds)
            runs[str(wait)].append(await _round(url, wait, tasks, lone))
    medians = {
        setting: {k: statistics.median(run[k] for run in rows) for k in rows[0]}
        for setting, rows in runs.items()
    }
    auto, zero = medians["auto"], medians["0"]
    return {
        "rounds": runs,
        "medians": medians,
        "auto_over_0": {k: round(auto[k] / zero[k], 3) for k in auto if zero[k]},
        "create_p50_added_ms": round(auto["create_p50"] - zero["create_p50"], 3),
        "lone_create_p50_added_ms": round(auto["lone_create_p50"] - zero["lone_create_p50"], 3),
    }


async def main() -> None:
    """Run the comparison the arguments describe and print its table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=2_000)
    parser.add_argument("--lone", type=int, default=300)
    parser.add_argument("--topology", choices=("standalone", "cluster", "both"), default="both")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    progress = Progress()
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="redis-tasks-wait-cost-") as scratch:
        if args.topology in ("standalone", "both"):
            servers = start_replicated_server(Path(scratch) / "standalone")
            try:
                out["standalone + 1 replica"] = await _topology(
                    "standalone", servers.url, args.rounds, args.tasks, args.lone, progress
                )
            finally:
                servers.stop()
        if args.topology in ("cluster", "both"):
            cluster = start_redis_cluster(Path(scratch) / "cluster", replicas_per_primary=1)
            try:
                out["cluster 3+3"] = await _topology(
                    "cluster", cluster.url, args.rounds, args.tasks, args.lone, progress
                )
            finally:
                cluster.stop()
    for name, result in out.items():
        print(f"{name}: auto over 0 (medians of {args.rounds} rounds)")
        for key, ratio in result["auto_over_0"].items():
            a, z = result["medians"]["auto"][key], result["medians"]["0"][key]
            print(f"  {key:18} auto {a:>10}   0 {z:>10}   {ratio}x")
        print(f"  create p50 added: {result['create_p50_added_ms']} ms; lone create p50 added: "
              f"{result['lone_create_p50_added_ms']} ms")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
