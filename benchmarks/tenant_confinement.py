"""One tenant's ceiling on a 3+3 cluster: its create and drain rates with per-tenant
limits on (every task in its home partition, one primary) against off (its tasks
spread over the 16 partitions and the three primaries), side by side in one run.

Usage: python -m benchmarks.tenant_confinement [--tasks 20000] [--rounds 3]
       [--workers 2] [--concurrency 32] [--json FILE]

Each round and mode, one tenant (``tenant="org:big"``) creates ``--tasks`` no-op
tasks, 256 in flight from this process, timed from the first create to the last;
then ``--workers`` command-line worker processes start and drain them, timed from
the first completion to the last off the partitions' stats counters (their
start-up is not counted). Limits on: ``Limits(max_open_tasks_per_tenant=10**9,
max_running_tasks_per_tenant=10**9)``, bounds that never refuse, so only the
confinement (and the limits' own bookkeeping) differs. Each primary's CPU
(``INFO cpu``, user + system) is read around both phases: where the load lands.
Modes alternate round by round; the report gives medians and on/off ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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

from redis_tasks import Limits, RedisTaskManager, TaskExecution
from redis_tasks._bench._adapter import ORIGIN, WHO, delete_prefix
from redis_tasks._bench._progress import Progress
from redis_tasks._stats import TERMINAL_FIELDS
from redis_tasks.testing import start_redis_cluster

ROOT = Path(__file__).resolve().parent.parent
#: The manager's and the worker's default number of partitions.
PARTITIONS = 16
_IN_FLIGHT = 256
LIMITED = Limits(max_open_tasks_per_tenant=10**9, max_running_tasks_per_tenant=10**9)


async def handler(execution: TaskExecution) -> dict[str, Any]:
    """The no-op handler the workers run (``benchmarks.tenant_confinement:handler``)."""
    return {}


async def _cpu(primaries: list[Redis]) -> list[float]:
    """Each primary's CPU seconds so far (user + system)."""
    infos = await asyncio.gather(*(p.info("cpu") for p in primaries))
    return [float(i["used_cpu_user"]) + float(i["used_cpu_sys"]) for i in infos]


async def _ended(manager: RedisTaskManager) -> int:
    keys = manager.keyspace

    async def of(partition: int) -> int:
        stream = keys.stats(partition)
        reply = await manager.client.hmget(stream, list(TERMINAL_FIELDS))
        return sum(int(v) for v in reply if v is not None)

    return sum(await asyncio.gather(*(of(p) for p in range(PARTITIONS))))


def _spent(before: list[float], after: list[float]) -> list[float]:
    return [round(b - a, 3) for a, b in zip(before, after, strict=True)]


async def _round(
    url: str, primaries: list[Redis], count: int, workers: int, concurrency: int, limited: bool
) -> dict[str, Any]:
    prefix = f"tc{uuid.uuid4().hex[:8]}"
    limits = LIMITED if limited else None
    async with RedisTaskManager.from_url(url, prefix=prefix, limits=limits) as manager:
        cpu0 = await _cpu(primaries)
        began = time.perf_counter()
        for start in range(0, count, _IN_FLIGHT):
            batch = min(_IN_FLIGHT, count - start)
            await asyncio.gather(
                *(manager.create_task(WHO, ORIGIN, tenant="org:big") for _ in range(batch))
            )
        created = time.perf_counter() - began
        cpu1 = await _cpu(primaries)
        command = [
            *(sys.executable, "-m", "redis_tasks", "worker"),
            "benchmarks.tenant_confinement:handler",
            *("--prefix", prefix, "--concurrency", str(concurrency), "--log-level", "warning"),
        ]
        env = {**os.environ, "REDIS_URL": url}  # never on a command line
        procs = [
            await asyncio.create_subprocess_exec(
                *command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            for _ in range(workers)
        ]
        try:
            first: tuple[float, int, list[float]] | None = None
            while True:
                done = await _ended(manager)
                now = time.perf_counter()
                if first is None and done > 0:
                    first = (now, done, await _cpu(primaries))
                if done >= count:
                    break
                if any(p.returncode is not None for p in procs):
                    raise RuntimeError("a worker exited; run one by hand to see why")
                await asyncio.sleep(0.01)
            cpu2 = await _cpu(primaries)
        finally:
            for proc in procs:
                proc.terminate()
            await asyncio.gather(*(asyncio.wait_for(p.wait(), 30) for p in procs))
        assert first is not None
        drain = (count - first[1]) / max(now - first[0], 1e-9)
        await delete_prefix(manager)
    return {
        "creates_per_s": round(count / created, 1),
        "drain_per_s": round(drain, 1),
        "create_cpu_s_by_primary": _spent(cpu0, cpu1),
        "drain_cpu_s_by_primary": _spent(first[2], cpu2),
    }


def _busiest_share(spent: list[float]) -> float:
    """The busiest primary's share of the primaries' CPU."""
    total = sum(spent)
    return round(max(spent) / total, 3) if total else 0.0


async def _run(args: argparse.Namespace, url: str, ports: list[int]) -> dict[str, list[Any]]:
    primaries = [Redis(host="127.0.0.1", port=port) for port in ports]
    progress = Progress()
    rows: dict[str, list[Any]] = {"off": [], "on": []}
    try:
        for round_ in range(args.rounds):
            modes = ("off", "on") if round_ % 2 == 0 else ("on", "off")
            for mode in modes:
                progress.note(f"round {round_ + 1}/{args.rounds}: limits {mode}")
                row = await _round(
                    url, primaries, args.tasks, args.workers, args.concurrency, mode == "on"
                )
                rows[mode].append(row)
                progress.note(
                    f"round {round_ + 1} limits {mode}: {row['creates_per_s']:.0f} creates/s, "
                    f"{row['drain_per_s']:.0f} jobs/s"
                )
    finally:
        await asyncio.gather(*(p.aclose() for p in primaries))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", default=None, help="write the rounds and medians here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="redis-tasks-confinement-") as scratch:
        cluster = start_redis_cluster(Path(scratch) / "cluster")
        try:
            ports = [server.port for server in cluster.primaries]
            rows = asyncio.run(_run(args, cluster.url, ports))
        finally:
            cluster.stop()
    summary: dict[str, Any] = {"settings": vars(args), "rounds": rows, "median": {}}
    for mode, samples in rows.items():
        median = {
            "creates_per_s": statistics.median(s["creates_per_s"] for s in samples),
            "drain_per_s": statistics.median(s["drain_per_s"] for s in samples),
            "busiest_primary_create_share": statistics.median(
                _busiest_share(s["create_cpu_s_by_primary"]) for s in samples
            ),
            "busiest_primary_drain_share": statistics.median(
                _busiest_share(s["drain_cpu_s_by_primary"]) for s in samples
            ),
        }
        summary["median"][mode] = median
        print(
            f"limits {mode:3}: creates {median['creates_per_s']:8.0f}/s, drain "
            f"{median['drain_per_s']:8.0f} jobs/s; busiest primary's share of the primaries' "
            f"CPU: create {median['busiest_primary_create_share']:.2f}, drain "
            f"{median['busiest_primary_drain_share']:.2f}"
        )
    on, off = summary["median"]["on"], summary["median"]["off"]
    summary["ratio_on_off"] = {
        "creates": round(on["creates_per_s"] / off["creates_per_s"], 3),
        "drain": round(on["drain_per_s"] / off["drain_per_s"], 3),
    }
    print(
        f"on / off: creates {summary['ratio_on_off']['creates']:.2f}x, "
        f"drain {summary['ratio_on_off']['drain']:.2f}x"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
