"""Can a client tell an unknown task from one it may not see, by timing ``find_task``?

Usage:
    python -m benchmarks.timing_side_channel                  # a private redis-server
    python -m benchmarks.timing_side_channel --redis-url redis://127.0.0.1:6379/0 -n 10000

Alice's tasks are created with a large origin (a worst case: an unauthorized
lookup must not read it). Then ``find_task`` runs one call at a time, alternating
in random order between a well-formed ID that was never created (unknown) and one
of Alice's tasks asked for by Bob (unauthorized), ``-n`` samples each. Reported:
the Redis commands each kind ran (``INFO commandstats``, which must be equal), the
two latency distributions, and a two-sample Kolmogorov-Smirnov test: the kinds
are indistinguishable when p >= 0.01.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from redis_tasks import RedisTaskManager, RequestContext, TaskOrigin, TaskRequestContext
from redis_tasks._bench._adapter import delete_prefix
from redis_tasks._bench._progress import Progress, percentile
from redis_tasks._ids import new_task_id
from redis_tasks.testing import start_redis_server

ALICE = RequestContext("/mcp", "alice")
BOB = RequestContext("/mcp", "bob")


def ks_two_sample(a: list[float], b: list[float]) -> tuple[float, float]:
    """The Kolmogorov-Smirnov statistic D of two samples and its asymptotic p-value."""
    xs, ys = sorted(a), sorted(b)
    n, m = len(xs), len(ys)
    i = j = 0
    d = 0.0
    while i < n and j < m:
        value = min(xs[i], ys[j])
        while i < n and xs[i] == value:
            i += 1
        while j < m and ys[j] == value:
            j += 1
        d = max(d, abs(i / n - j / m))
    effective = math.sqrt(n * m / (n + m))
    lam = (effective + 0.12 + 0.11 / effective) * d
    if lam < 0.2:
        # Q_KS is 1 to within 1e-15 here, and its series does not converge near 0.
        return d, 1.0
    # Q_KS(lambda) = 2 * sum (-1)^(k-1) exp(-2 k^2 lambda^2); terms vanish fast.
    p = 2 * sum((-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam) for k in range(1, 101))
    return d, min(1.0, max(0.0, p))


async def commands(client: Redis, action: Any, count: int) -> dict[str, float]:
    """Redis commands per call of ``action`` (INFO commandstats), averaged over ``count``."""
    await client.config_resetstat()
    for _ in range(count):
        await action()
    stats = await client.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): fields["calls"] / count
        for name, fields in stats.items()
        if name not in ("cmdstat_config|resetstat", "cmdstat_info")
    }


async def measure(url: str, samples: int, tasks: int, origin_bytes: int) -> dict[str, Any]:
    prefix = f"side-{os.getpid()}"
    origin = TaskOrigin.from_persisted_state(
        {"tool": "secret", "arguments": {"blob": "x" * origin_bytes}}
    )
    progress = Progress()
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        created = [await manager.create_task(ALICE, origin) for _ in range(tasks)]
        unknown_ids = [new_task_id(manager.partitions) for _ in range(tasks)]
        unauthorized = [TaskRequestContext(BOB, t.task_id) for t in created]
        unknown = [TaskRequestContext(BOB, task_id) for task_id in unknown_ids]
        admin = Redis.from_url(url)
        per_kind = {
            "unknown": await commands(admin, lambda: manager.find_task(unknown[0]), 200),
            "unauthorized": await commands(admin, lambda: manager.find_task(unauthorized[0]), 200),
        }
        await admin.aclose()
        timings: dict[str, list[float]] = {"unknown": [], "unauthorized": []}
        rng = random.Random(7)
        for i in range(samples):
            pair = [("unknown", unknown[i % tasks]), ("unauthorized", unauthorized[i % tasks])]
            rng.shuffle(pair)  # neither kind always goes first
            for kind, ctx in pair:
                began = time.perf_counter_ns()
                found = await manager.find_task(ctx)
                timings[kind].append((time.perf_counter_ns() - began) / 1000)
                if found is not None:
                    raise AssertionError("bob found alice's task")
            if (i + 1) % 500 == 0 or i + 1 == samples:
                progress.update("find_task pairs", i + 1, samples)
        await delete_prefix(manager)
    d, p = ks_two_sample(timings["unknown"], timings["unauthorized"])
    return {
        "samples": samples,
        "origin_bytes": origin_bytes,
        "commands": per_kind,
        "same_commands": per_kind["unknown"] == per_kind["unauthorized"],
        "latency_us": {
            kind: {
                "median": round(statistics.median(values), 1),
                "p99": round(percentile(values, 0.99), 1),
            }
            for kind, values in timings.items()
        },
        "ks_statistic": round(d, 4),
        "ks_p_value": round(p, 4),
        "indistinguishable": p >= 0.01,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    parser.add_argument("-n", "--samples", type=int, default=10_000)
    parser.add_argument("--tasks", type=int, default=200)
    parser.add_argument("--origin-bytes", type=int, default=64_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        server = None if args.redis_url else start_redis_server(Path(scratch))
        url = args.redis_url or (server.url if server else "")
        try:
            result = asyncio.run(measure(url, args.samples, args.tasks, args.origin_bytes))
        finally:
            if server is not None:
                server.stop()
    print(f"commands per find: {result['commands']}")
    for kind, row in result["latency_us"].items():
        print(f"{kind:13} median {row['median']} us, p99 {row['p99']} us")
    print(
        f"KS D={result['ks_statistic']} p={result['ks_p_value']} over {result['samples']} "
        f"samples each: {'indistinguishable' if result['indistinguishable'] else 'DISTINGUISHABLE'}"
    )
    return 0 if result["indistinguishable"] and result["same_commands"] else 1


if __name__ == "__main__":
    sys.exit(main())
