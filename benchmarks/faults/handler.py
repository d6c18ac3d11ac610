"""The workers' side: the handler each ``redis-tasks worker`` process runs, and
where it records its runs."""

from __future__ import annotations

import asyncio
import functools
import os
from typing import Any

from redis.asyncio import Redis

from redis_tasks import TaskExecution
from redis_tasks._ids import parse_task_id
from redis_tasks._redis.keys import KeySpace

from .records import BACKOFF


@functools.cache
def _keyspace(prefix: str) -> KeySpace:
    return KeySpace(prefix)


def runs_key(prefix: str, task_id: str) -> str:
    """The set of fences whose handler ran for ``task_id``.

    It carries the task's partition tag, so it lives in the task's slot, and starts
    with the prefix's pattern, so :func:`delete_prefix` removes it with the rest.
    """
    partition = parse_task_id(task_id)
    if partition is None:
        raise ValueError("not a task ID")
    return f"{_keyspace(prefix).tag(partition)}:faults-runs:{task_id}"


_handler_client: Redis | None = None


def _handler_redis() -> Redis:
    global _handler_client
    if _handler_client is None:
        timeout = float(os.environ["FAULTS_TIMEOUT"])
        _handler_client = Redis.from_url(
            os.environ["REDIS_URL"], socket_timeout=timeout, socket_connect_timeout=timeout
        )
    return _handler_client


async def handler(execution: TaskExecution) -> dict[str, Any]:
    """The workers' handler (``benchmarks.faults:handler``): record the run, then complete.

    The run is recorded first (``SADD`` of its fence to :func:`runs_key`), so every stored
    result names a recorded run. Both calls are idempotent and retried until they succeed:
    a fault must not fail the task, and if the lease runs out meanwhile the worker stops
    this handler and another runs the task. Configured by the worker's environment:
    ``REDIS_URL``, ``FAULTS_PREFIX``, ``FAULTS_TIMEOUT``, ``FAULTS_TTL_MS`` and
    ``FAULTS_HANDLER_MS`` (how long the "work" takes).
    """
    client = _handler_redis()
    key = runs_key(os.environ["FAULTS_PREFIX"], execution.task_id)
    timeout = float(os.environ["FAULTS_TIMEOUT"])
    delay = BACKOFF
    while True:
        try:
            async with asyncio.timeout(timeout), client.pipeline(transaction=True) as pipe:
                pipe.sadd(key, execution.fence)
                # The record expires with its task, so nothing outlives the run.
                pipe.pexpire(key, int(os.environ["FAULTS_TTL_MS"]))
                await pipe.execute()  # one round trip, applied whole or not at all
            break
        except Exception:  # any failure of these calls (a fault): try again
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
    work_ms = float(os.environ.get("FAULTS_HANDLER_MS", "0"))
    if work_ms > 0:
        await asyncio.sleep(work_ms / 1000)
    return {"fence": execution.fence, "pid": os.getpid(), "attempt": execution.attempt}
