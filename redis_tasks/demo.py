"""A short scripted demo of the task manager: two server processes' worth of managers
sharing one Redis, a worker's side of three tasks, and a client's polling, answers and
cancellation.

Runs on ``--redis-url`` / ``REDIS_URL`` when given, else on an embedded in-process Redis.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import timedelta

from ._embedded import embedded_client, embedded_server
from ._models import (
    InputRequest,
    JsonRpcError,
    RequestContext,
    TaskRequestContext,
    TaskUpdateContext,
)
from ._origin import TaskOrigin
from ._redis import RedisTaskManager

__all__ = ["run_demo"]

ALICE = RequestContext("/mcp", "alice")
BOB = RequestContext("/mcp", "bob")


def _managers(url: str | None, prefix: str) -> tuple[RedisTaskManager, RedisTaskManager, str]:
    if url:
        return (
            RedisTaskManager.from_url(url, prefix=prefix),
            RedisTaskManager.from_url(url, prefix=prefix),
            url,
        )
    server = embedded_server()
    return (
        RedisTaskManager(embedded_client(server), prefix=prefix, close_client=True),
        RedisTaskManager(embedded_client(server), prefix=prefix, close_client=True),
        "embedded in-process Redis (fakeredis); set REDIS_URL to use a real one",
    )


async def run_demo(url: str | None = None, out: Callable[[str], None] = print) -> dict[str, str]:
    """Run the scripted demo; returns each task's final status by name."""
    prefix = f"demo-{uuid.uuid4().hex[:8]}"
    server_a, server_b, where = _managers(url, prefix)
    out(f"redis-tasks demo on {where} (prefix {prefix})")
    events: Counter[str] = Counter()
    seen = asyncio.Event()

    def on_change(task_id: str) -> None:
        events[task_id] += 1
        seen.set()

    async with server_a, server_b:
        registration = server_b.event_publisher.subscribe(on_change)
        await server_b.event_publisher.wait_ready()

        def origin(tool: str) -> TaskOrigin:
            return TaskOrigin.from_persisted_state({"tool": tool, "arguments": {"city": "Paris"}})

        # Server A answers three tools/call requests with task handles.
        names = ("greet", "report", "export")
        tasks = {
            name: await server_a.create_task(
                ALICE, origin(name), payload=name.encode(), ttl=timedelta(minutes=10)
            )
            for name in names
        }
        for name, task in tasks.items():
            out(f"  server A created {name:7} -> {task.task_id} ({task.status.value})")
        ids = {name: task.task_id for name, task in tasks.items()}

        async def poll(name: str, who: RequestContext = ALICE) -> str:
            found = await server_b.find_task(TaskRequestContext(who, ids[name]))
            return "not found" if found is None else found.status.value

        # Worker: "greet" needs the user's name.
        ask = InputRequest(
            method="elicitation/create",
            params={
                "mode": "form",
                "message": "Please enter your name.",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
        )
        await server_a.request_input(ids["greet"], {"name": ask}, "waiting for your name")
        await server_a.mark_working(ids["report"], "50% done")
        out(f"  server B polls greet: {await poll('greet')}, report: {await poll('report')}")
        out(f"  bob polls alice's greet: {await poll('greet', BOB)}")

        # Client, through server B: answer the elicitation and cancel "export".
        await server_b.update_task(
            TaskUpdateContext(
                ALICE, ids["greet"], {"name": {"action": "accept", "content": {"name": "Ada"}}}
            )
        )
        await server_b.request_cancellation(TaskRequestContext(ALICE, ids["export"]))
        out(f"  client answered greet -> {await poll('greet')}; asked to cancel export")

        # Worker: take the answer and finish; honour the cancellation; report fails.
        answers = await server_a.take_input_responses(ids["greet"])
        greeting = f"Hello, {answers['name']['content']['name']}!"
        await server_a.complete_task(
            ids["greet"], {"content": [{"type": "text", "text": greeting}], "isError": False}
        )
        if await server_a.is_cancellation_requested(ids["export"]):
            await server_a.cancel_task(ids["export"], "cancelled at the client's request")
        await server_a.fail_task(
            ids["report"],
            JsonRpcError(code=-32603, message="upstream API unavailable"),
            "report source is down",
        )

        finals = {}
        out("  final snapshots (tasks/get from server B):")
        for name in names:
            found = await server_b.find_task(TaskRequestContext(ALICE, ids[name]))
            assert found is not None
            finals[name] = found.status.value
            wire = found.to_wire()
            outcome = wire.get("result") or wire.get("error") or wire.get("statusMessage", "")
            out(f"    {name:7} {found.status.value:10} {outcome}")

        async def all_seen() -> None:
            # Each task had at least three changes: created, a step, its end.
            while any(events[task_id] < 3 for task_id in ids.values()):
                seen.clear()
                await seen.wait()

        await asyncio.wait_for(all_seen(), timeout=10)
        registration.close()
        counts = ", ".join(f"{name} {events[task_id]}" for name, task_id in ids.items())
        out(f"  change events seen by server B: {counts}")
        # Leave nothing behind on the operator's Redis.
        pattern = "{" + prefix + ":*"
        demo_keys = [key async for key in server_a.client.scan_iter(match=pattern, count=500)]
        if demo_keys:
            await server_a.client.delete(*demo_keys)
    return finals


def main(url: str | None = None) -> int:
    """Entry point of ``redis-tasks demo``."""
    finals = asyncio.run(run_demo(url or os.environ.get("REDIS_URL") or None))
    ok = finals == {"greet": "completed", "report": "failed", "export": "cancelled"}
    print("demo finished" if ok else f"demo ended unexpectedly: {finals}")
    return 0 if ok else 1
