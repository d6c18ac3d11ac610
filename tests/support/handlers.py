"""Handlers the worker-process tests run (``tests.support.handlers:handler``).

The payload is JSON saying what to do; the handler reports to Redis lists under
``$RT_TEST_NS`` so a test can wait for "started" and say "go" without sleeping.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

from redis.asyncio import Redis, RedisCluster

from redis_tasks import InputRequest, JsonRpcError, TaskExecution, TaskFailed

_client: Redis | RedisCluster | None = None


def _redis() -> Redis | RedisCluster:
    global _client
    if _client is None:
        # No socket timeout: BLPOP waits as long as the test wants.
        url = os.environ["RT_TEST_REDIS_URL"]
        cluster = os.environ.get("RT_TEST_CLUSTER")
        _client = (
            RedisCluster.from_url(url, socket_timeout=None)
            if cluster
            else Redis.from_url(url, socket_timeout=None)
        )
    return _client


def _ns() -> str:
    return os.environ["RT_TEST_NS"]


ASK = {
    "name": InputRequest(
        method="elicitation/create",
        params={"message": "Your name?", "requestedSchema": {"type": "object"}},
    ),
    "dirs": InputRequest(method="roots/list", params={}),
}


async def handler(execution: TaskExecution) -> dict[str, Any]:
    """Do what the payload says; report progress to the test."""
    spec = json.loads(execution.payload or b"{}")
    mode = spec.get("mode", "noop")
    if mode == "noop":
        return {"ok": True}
    if mode == "count":  # restart test: touches no Redis of its own while it is down
        await asyncio.sleep(spec.get("seconds", 0))
        return {"fence": execution.fence, "pid": os.getpid()}
    me = {
        "task": execution.task_id,
        "fence": execution.fence,
        "attempt": execution.attempt,
        "pid": os.getpid(),
    }
    client = _redis()
    await client.rpush(f"{_ns()}:started", json.dumps(me))
    if mode == "hold":  # run until the test says go
        await client.blpop([f"{_ns()}:go:{execution.task_id}:{execution.fence}"], timeout=0)
        return me
    if mode == "crash":  # the process dies mid-handler, every time
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "ask":
        answers = await execution.request_input(ASK, "waiting for you")
        await client.rpush(f"{_ns()}:answered", json.dumps({**me, "answers": answers}))
        await client.blpop([f"{_ns()}:go:{execution.task_id}:{execution.fence}"], timeout=0)
        return {**me, "answers": answers}
    if mode == "until_cancelled":  # honours cancellation; reports when it saw it
        await execution.cancelled.wait()
        await client.rpush(f"{_ns()}:saw_cancel", json.dumps(me))
        raise asyncio.CancelledError
    if mode == "fail":
        raise TaskFailed(JsonRpcError(code=-32001, message="chosen failure"))
    if mode == "secrets":  # every kind of task data carries the marker
        answers = await execution.request_input(ASK, f"status {spec['secret']}")
        if spec.get("explode"):
            raise ValueError(f"boom {spec['secret']} {answers}")
        return {"secret": spec["secret"], "answers": answers}
    raise ValueError(f"unknown mode {mode}")
