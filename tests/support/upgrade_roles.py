"""One role of a rolling upgrade, run by whichever revision of redis-tasks is first on
``PYTHONPATH`` (this file imports nothing from the tests, and only the API that
0.2.0, revision ``f470e92``, and this checkout share).

    python upgrade_roles.py URL PREFIX create KIND:COUNT:TENANT ...
        creates COUNT tasks of payload KIND (``run``, ``hold``, ``ask``) for TENANT, an
        hour's retention, for each argument in turn; prints the version, where the
        package was imported from, and the new IDs of each argument, as JSON
    python upgrade_roles.py URL PREFIX worker NAME CONCURRENCY HOLD
        runs a worker until SIGTERM (a stop with a short grace: what it holds goes
        back), printing ``ready`` once it reads; ``hold`` tasks block while HOLD is 1

A task's result names the worker that completed it, and an ``ask`` task's the answer
it got, so the test can tell who ran what.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import signal
import sys
from datetime import timedelta
from typing import Any

import redis_tasks
from redis_tasks import (
    InputRequest,
    RedisTaskManager,
    RequestContext,
    TaskExecution,
    TaskOrigin,
    Worker,
)

WHO = RequestContext("/mcp", "upgrader")
ORIGIN = TaskOrigin.from_persisted_string('{"tool": "upgrade", "arguments": {}}')
ELICIT = InputRequest(
    method="elicitation/create",
    params={
        "mode": "form",
        "message": "Your name?",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
)
#: Short, so a stopped worker's leftovers are reclaimed within the test.
LEASE = timedelta(seconds=2)


def _result(text: str) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": False}


async def _create(url: str, prefix: str, specs: list[str]) -> None:
    made: list[list[str]] = []
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        for spec in specs:
            kind, count, tenant = spec.split(":")
            made.append(
                [
                    (
                        await manager.create_task(
                            WHO,
                            ORIGIN,
                            payload=kind.encode(),
                            tenant=tenant,
                            ttl=timedelta(hours=1),
                        )
                    ).task_id
                    for _ in range(int(count))
                ]
            )
    report = {"version": redis_tasks.__version__, "file": redis_tasks.__file__, "ids": made}
    print(json.dumps(report), flush=True)


async def _work(url: str, prefix: str, name: str, concurrency: int, hold: bool) -> None:
    async def handler(execution: TaskExecution) -> dict[str, Any]:
        if execution.payload == b"hold" and hold:
            await asyncio.Event().wait()  # until the stop cancels it: handed back
        if execution.payload == b"ask":
            answers = await execution.request_input({"q": ELICIT}, "asking")
            answer = answers["q"]  # the client's answer as JSON: an elicitation result
            content = answer.get("content") if isinstance(answer, dict) else None
            return _result(f"{name} {json.dumps(content, sort_keys=True)}")
        return _result(name)

    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        options: dict[str, Any] = {"concurrency": concurrency, "lease": LEASE, "name": name}
        if "park_after" in inspect.signature(Worker).parameters:
            options["park_after"] = timedelta(milliseconds=100)  # park soon: resumes are tested
        async with Worker(manager, handler, **options) as worker:
            loop = asyncio.get_running_loop()
            loop.add_signal_handler(
                signal.SIGTERM, lambda: loop.create_task(worker.stop(grace=0.2))
            )
            running = loop.create_task(worker.run())
            print("ready", flush=True)
            await running


def main(argv: list[str]) -> None:
    url, prefix, role, *args = argv
    if role == "create":
        asyncio.run(_create(url, prefix, args))
    elif role == "worker":
        name, concurrency, hold = args
        asyncio.run(_work(url, prefix, name, int(concurrency), hold == "1"))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
