"""Redis commands per task-manager operation, from ``INFO commandstats``.

Usage: python -m benchmarks.commands_per_op --redis-url redis://127.0.0.1:6379/0 [-n 200]

Runs each operation N times on a fresh prefix and reports, per operation, the
client round trips (EVALSHA calls) and every command Redis executed, including
those inside the script. Use a Redis no one else is using while it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from redis_tasks import (
    InputRequest,
    RedisTaskManager,
    RequestContext,
    TaskOrigin,
    TaskRequestContext,
    TaskUpdateContext,
)

WHO = RequestContext("/mcp", "alice")
ORIGIN = TaskOrigin.from_persisted_string('{"tool":"bench","arguments":{}}')
ASK = InputRequest(method="elicitation/create", params={"message": "ok?"})
ANSWER = {"action": "accept", "content": {}}


async def _counts(client: Redis) -> Counter[str]:
    stats = await client.info("commandstats")
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()})


async def _measure(
    client: Redis, n: int, op: Callable[[int], Awaitable[Any]]
) -> tuple[float, dict[str, float]]:
    before = await _counts(client)
    for i in range(n):
        await op(i)
    delta = (await _counts(client)) - before
    delta["info"] -= 1
    per_op = {name: calls / n for name, calls in sorted(delta.items()) if calls > 0}
    return sum(per_op.values()), per_op


async def main(url: str, n: int) -> None:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    async with RedisTaskManager.from_url(url, prefix=prefix, cluster=False) as m:
        client = m.client
        assert isinstance(client, Redis)  # INFO commandstats of one server
        ids = [(await m.create_task(WHO, ORIGIN)).task_id for _ in range(n)]
        for task_id in ids:
            await m.request_input(task_id, {"k": ASK})
        rows: list[tuple[str, Callable[[int], Awaitable[Any]]]] = [
            ("create", lambda i: m.create_task(WHO, ORIGIN)),
            ("find (input_required)", lambda i: m.find_task(TaskRequestContext(WHO, ids[i]))),
            (
                "update (last answer)",
                lambda i: m.update_task(TaskUpdateContext(WHO, ids[i], {"k": ANSWER})),
            ),
            ("find (working)", lambda i: m.find_task(TaskRequestContext(WHO, ids[i]))),
            (
                "find (unauthorized)",
                lambda i: m.find_task(TaskRequestContext(RequestContext("/mcp", "bob"), ids[i])),
            ),
            ("take_input_responses", lambda i: m.take_input_responses(ids[i])),
            ("complete", lambda i: m.complete_task(ids[i], {"ok": True})),
        ]
        print(f"{'operation':24} {'round trips':>11} {'commands':>9}  breakdown per op")
        for name, op in rows:
            total, per_op = await _measure(client, n, op)
            trips = per_op.get("evalsha", 0) + per_op.get("eval", 0)
            detail = " ".join(f"{k}={v:g}" for k, v in per_op.items())
            print(f"{name:24} {trips:11g} {total:9g}  {detail}")
        keys = [k async for k in client.scan_iter(match="{" + prefix + ":*", count=1000)]
        if keys:
            await client.delete(*keys)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("-n", type=int, default=200)
    args = parser.parse_args()
    asyncio.run(main(args.redis_url, args.n))
