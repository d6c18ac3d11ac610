"""The library's own part of one ``tasks/get`` in the ``mcp`` scenario, timed in this process.

The authorizer, ``find_task`` at the per-server concurrency of the ``tasks/get``
phase, and the reply's rendering: over that phase's server CPU per poll, the
library's share of a ``tasks/get`` (the rest is the SDK and HTTP).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

from redis_tasks._models import TaskRequestContext
from redis_tasks._redis.manager import RedisTaskManager

from ._mcp_settings import McpSettings
from ._progress import Progress
from ._systems import AdapterError

__all__ = ["library_timing"]


async def library_timing(
    url: str, prefix: str, task_ids: list[str], settings: McpSettings, progress: Progress
) -> dict[str, Any]:
    """CPU µs of the library's own part of one ``tasks/get``, in this process.

    The authorizer (:class:`~redis_tasks.mcp.PrincipalAuthorizer`), ``find_task``
    from ``pollers / servers`` concurrent callers (what one server saw in the
    ``tasks/get`` phase) and the reply's rendering, each timed on its own.
    """
    from mcp.server.auth.middleware.auth_context import auth_context_var
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser

    from redis_tasks.mcp import PrincipalAuthorizer
    from redis_tasks.mcp._wire import get_result

    from ._mcp_app import access_token

    token = access_token("bench-token")
    assert token is not None
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        authorize = PrincipalAuthorizer(endpoint="/mcp")
        rounds = 2_000
        cpu = time.process_time()
        for _ in range(rounds):
            who = authorize(None)  # type: ignore[arg-type]  # a fixed endpoint needs no request
        authorize_us = (time.process_time() - cpu) / rounds * 1e6
    finally:
        auth_context_var.reset(reset)
    calls = settings.polls
    concurrency = max(1, settings.pollers // settings.servers)
    label = "mcp find_task (in-process)"
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        found = await manager.find_task(TaskRequestContext(who, task_ids[0]))
        if found is None or found.status != "completed":
            raise AdapterError("the in-process find_task did not see the benchmark's task")
        for _ in range(rounds):
            get_result(found)  # warm
        cpu = time.process_time()
        for _ in range(rounds):
            get_result(found)
        render_us = (time.process_time() - cpu) / rounds * 1e6
        numbers = itertools.count()
        misses = 0

        async def poll(task_id: str) -> None:
            nonlocal misses
            ctx = TaskRequestContext(who, task_id)
            while (n := next(numbers)) < calls:
                if await manager.find_task(ctx) is None:
                    misses += 1
                if n % 500 == 0:
                    progress.update(label, n, calls)

        ids = [task_ids[i % len(task_ids)] for i in range(concurrency)]
        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(poll(task_id) for task_id in ids))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        progress.update(label, calls, calls)
    if misses:
        raise AdapterError("the in-process find_task lost the benchmark's tasks")
    find_us = cpu / calls * 1e6
    return {
        "concurrency": concurrency,
        "calls": calls,
        "find_task_us": round(find_us, 1),
        "find_task_rate": round(calls / elapsed),
        "authorize_us": round(authorize_us, 1),
        "render_us": round(render_us, 1),
        "library_us": round(authorize_us + find_us + render_us, 1),
    }
