"""redis-tasks as a system under test: the :mod:`._protocol` adapter for our own queue.

Run as ``python -m redis_tasks._bench._adapter client|worker ...``. A job is a task
created with a no-op origin; its payload is the stamp. The worker is the library's
:class:`~redis_tasks.Worker` in this process, exactly as ``redis-tasks worker`` runs it.
"""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

from redis_tasks._execution import TaskExecution
from redis_tasks._models import RequestContext
from redis_tasks._origin import TaskOrigin
from redis_tasks._redis.manager import RedisTaskManager
from redis_tasks._worker.worker import Worker

from ._protocol import OnJob, main

__all__ = ["NAME", "ORIGIN", "WHO", "claim_sizes", "clean", "enqueue", "work"]

NAME = "redis-tasks"
#: The request every benchmark task is created for.
WHO = RequestContext("/mcp", "bench")
#: A no-op tool call.
ORIGIN = TaskOrigin.from_persisted_string('{"tool":"noop","arguments":{}}')
_CHUNK = 500  # creates in flight at once: bounded, so memory and pool use stay flat

_managers: dict[tuple[str, str], RedisTaskManager] = {}
#: The worker this process runs (``work``), for its claim sizes.
_workers: list[Worker] = []


async def _manager(url: str, queue: str) -> RedisTaskManager:
    manager = _managers.get((url, queue))
    if manager is None:
        manager = RedisTaskManager.from_url(url, prefix=queue)
        await manager.__aenter__()
        _managers[(url, queue)] = manager
    return manager


async def enqueue(url: str, queue: str, count: int, stamp: float | None) -> None:
    """Create ``count`` tasks whose payload is ``stamp``."""
    manager = await _manager(url, queue)
    payload = b"" if stamp is None else repr(stamp).encode()
    for start in range(0, count, _CHUNK):
        batch = min(_CHUNK, count - start)
        await asyncio.gather(
            *(manager.create_task(WHO, ORIGIN, payload=payload) for _ in range(batch))
        )


async def work(url: str, queue: str, concurrency: int, on_job: OnJob) -> None:
    """Run a :class:`Worker` at ``concurrency`` until cancelled."""

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        payload = execution.payload
        on_job(float(payload) if payload else None)
        return {}

    async with RedisTaskManager.from_url(url, prefix=queue) as manager:
        worker = Worker(manager, handler, concurrency=concurrency)
        _workers.append(worker)
        async with worker:
            await worker.run()


def claim_sizes() -> dict[int, int]:
    """How many claim calls brought how many tasks, in this process's worker so far."""
    sizes: dict[int, int] = {}
    for worker in _workers:
        for size, count in worker.claim_sizes.items():
            sizes[size] = sizes.get(size, 0) + count
    return sizes


async def clean(url: str, queue: str) -> None:
    """Unlink every key of the prefix ``queue``."""
    manager = await _manager(url, queue)
    await delete_prefix(manager)


async def delete_prefix(manager: RedisTaskManager) -> None:
    """Unlink every key of ``manager``'s prefix, a partition (one slot) at a time."""
    pattern = manager.keyspace.pattern()
    for client in manager.primary_clients():
        keys = [k async for k in client.scan_iter(match=pattern, count=1000)]
        by_tag: dict[bytes, list[bytes]] = {}
        for key in keys:
            by_tag.setdefault(key[: key.index(b"}") + 1], []).append(key)
        for group in by_tag.values():
            for i in range(0, len(group), 1000):
                await client.unlink(*group[i : i + 1000])


if __name__ == "__main__":
    if os.environ.get("REDIS_TASKS_METRICS") == "prometheus":  # the bench's metered variant
        from redis_tasks._telemetry.prometheus import PrometheusExport

        PrometheusExport()  # recorded as a scraped worker records; nobody scrapes here
    if os.environ.get("REDIS_TASKS_BENCH_TRACES") == "1":  # the bench's traced variant
        from redis_tasks._bench._traced import install_tracing

        install_tracing()
    main(sys.modules[__name__])
