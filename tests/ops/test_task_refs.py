"""Logs and traces name a task by its reference, never by its whole ID (issue 30).

A task ID is a capability: on an MCP server without authentication whoever holds it
reads the result, answers input requests and cancels. ``task_ref`` makes the one
short form every log line, span attribute and repr uses; ``whole_task_ids`` (a
manager option, ``redis-tasks worker --whole-task-ids``) writes whole IDs instead.

Two runs capture everything: a traced create-to-finish in this process (every log
record at DEBUG and every span of an SDK provider), and an MCP load (two server
processes, one on the fast path and one on the SDK's, and a worker, all tracing;
every line they log and every span they finish). Neither holds a whole ID by
default; with the setting on, both hold each task's. The worker suites audit their
own logs (``tests/worker/conftest.py``, and the ``fleet`` fixture).
"""

from __future__ import annotations

import asyncio
import json
import signal
import tempfile
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest

from redis_tasks import (
    InMemoryTaskManager,
    RedisTaskManager,
    Task,
    TaskExecution,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
    Worker,
    task_ref,
)
from redis_tasks._ids import MAX_PARTITIONS, REF_CHARS, new_task_id, parse_task_ref
from redis_tasks._work_queue import WorkEntry
from redis_tasks.testing import RedisServer
from tests.support.helpers import ALICE, ORIGIN, every_log_line, wait_until, whole_task_ids
from tests.support.mcp_stack import McpStack

pytest.importorskip("opentelemetry.sdk.trace")

from tests.support.tracing import memory_provider, traces_on


def test_a_reference_is_the_partition_and_six_characters() -> None:
    for partitions in (1, 16, MAX_PARTITIONS):
        task_id = new_task_id(partitions)
        partition, _, random = task_id.partition(".")
        ref = task_ref(task_id)
        assert ref == f"{partition}.{random[:REF_CHARS]}"
        assert REF_CHARS * 6 == 36  # bits: base64 characters carry six each
        assert parse_task_ref(ref) == (int(partition), random[:REF_CHARS])
        assert task_ref(task_id, whole=True) == task_id
        assert whole_task_ids(f"x {task_id} y") == [task_id]
        assert whole_task_ids(f"x {ref} y") == []
    # Whatever a caller passes is cut the same way: no whole ID gets through.
    assert task_ref("12." + "A" * 40) == "12.AAAAAA"
    assert task_ref("no dot at all, but long") == "no do"
    assert task_ref("") == ""
    assert parse_task_ref(new_task_id(16)) is None  # a whole ID is no reference
    for bad in ("", "7", "7.", "07.A", "7.A*", "x.AAAAAA", f"{MAX_PARTITIONS}.A", None, 7):
        assert parse_task_ref(bad) is None, bad


def test_reprs_name_a_task_by_reference() -> None:
    task_id = new_task_id(16)
    now = datetime.now().astimezone()
    task = Task(
        task_id=task_id,
        status=TaskStatus.WORKING,
        created_at=now,
        last_updated_at=now,
        ttl=timedelta(hours=1),
        origin=ORIGIN,
    )
    shown = [
        repr(task),
        str(task),
        repr(TaskRequestContext(ALICE, task_id)),
        repr(TaskUpdateContext(ALICE, task_id, {})),
        repr(WorkEntry(3, "1-0", task_id)),
        repr(
            TaskExecution(
                InMemoryTaskManager(),
                task_id,
                origin=ORIGIN,
                payload=b"",
                attempt=1,
                fence=3,
                input_poll=1.0,
            )
        ),
    ]
    for text in shown:
        assert task_ref(task_id) in text, text
        assert whole_task_ids(text) == [], text


@pytest.mark.parametrize("whole", [False, True], ids=["references", "whole_task_ids"])
async def test_a_traced_create_to_finish_logs_and_traces_references(
    redis_server: RedisServer, prefix: str, whole: bool
) -> None:
    provider, exporter = memory_provider()
    started = asyncio.Event()

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        if execution.payload == b"raise":
            raise RuntimeError("a handler's bug")
        if execution.payload == b"hold":
            started.set()
            await execution.cancelled.wait()
            raise asyncio.CancelledError
        await execution.report("half way")
        return {"content": [], "isError": False}

    manager = RedisTaskManager.from_url(redis_server.url, prefix=prefix, whole_task_ids=whole)
    with traces_on(provider), every_log_line() as lines:
        async with manager, Worker(manager, handler, lease=timedelta(seconds=5)) as worker:
            running = asyncio.create_task(worker.run())
            made = {
                how: (await manager.create_task(ALICE, ORIGIN, payload=how.encode())).task_id
                for how in ("done", "raise", "hold")
            }
            await asyncio.wait_for(started.wait(), 10)
            await manager.request_cancellation(TaskRequestContext(ALICE, made["hold"]))

            async def ended() -> bool:
                for task_id in made.values():
                    task = await manager.find_task(TaskRequestContext(ALICE, task_id))
                    if task is None or not task.is_terminal:
                        return False
                return True

            await wait_until(ended, what="every task to end")
            await worker.stop()
            await running
    spans = [span.to_json() for span in exporter.get_finished_spans()]
    assert {json.loads(s)["name"] for s in spans} == {"create_task", "run_task"}
    events = [json.loads(line)["event"] for line in lines if '"event"' in line]
    assert {"task_started", "task_complete", "handler_error", "cancel_requested"} <= set(events)
    logged, traced = "\n".join(lines), "\n".join(spans)
    for task_id in made.values():
        assert task_ref(task_id) in logged
        assert task_ref(task_id) in traced
    if whole:
        for task_id in made.values():
            assert task_id in logged
            assert task_id in traced
    else:
        assert [line for line in lines if whole_task_ids(line)] == []
        assert [span for span in spans if whole_task_ids(span)] == []


async def _load(stack: McpStack, tasks: int) -> list[str]:
    """``tasks`` task tools called through both servers in turn, 16 at once, each polled
    with ``tasks/get`` until it completed; their IDs."""
    gate = asyncio.Semaphore(16)

    async def one(n: int) -> str:
        async with gate:
            server = n % 2
            call = {"name": "add", "arguments": {"a": n, "b": 1}}
            task_id: str = (await stack.rpc(server, "tools/call", call))["result"]["taskId"]

            async def completed() -> bool:
                got = await stack.rpc(server, "tasks/get", {"taskId": task_id})
                return bool(got["result"]["status"] == "completed")

            await wait_until(completed, within=60, what="a task to complete")
            return task_id

    return await asyncio.gather(*(one(n) for n in range(tasks)))


@pytest.mark.slow
@pytest.mark.parametrize(
    ("whole", "tasks"), [(False, 150), (True, 10)], ids=["references", "whole_task_ids"]
)
async def test_an_mcp_load_logs_and_traces_references(
    redis_server: RedisServer, whole: bool, tasks: int
) -> None:
    env = {"RT_TEST_TRACES": "1", "RT_TEST_WHOLE_IDS": "1" if whole else "0"}
    with tempfile.TemporaryDirectory(prefix="redis-tasks-refs-") as directory:
        stack = McpStack(redis_server.url, f"rf{uuid.uuid4().hex[:10]}", Path(directory))
        dump = Path(directory) / "worker-spans.json"
        try:
            stack.start_server("fast", env)
            stack.start_server("sdk", {**env, "RT_TEST_FAST_PATH": "0"})
            worker = stack.start_worker(
                {**env, "RT_TEST_SPANS": str(dump)}, ("--whole-task-ids",) if whole else ()
            )
            made = await _load(stack, tasks)
            spans = [span for server in (0, 1) for span in await _served_spans(stack, server)]
            worker.send_signal(signal.SIGTERM)  # graceful: it dumps its spans at exit
            await asyncio.to_thread(worker.wait, 30)
            spans += json.loads(dump.read_text())
        finally:
            stack.stop()
        logs = stack.log_text()
    texts = [json.dumps(span) for span in spans]
    runs = [s for s in spans if s["name"] == "run_task"]
    assert len(runs) == tasks
    assert logs.count('"event": "task_complete"') == tasks
    if whole:
        for task_id in made:
            assert task_id in logs  # the worker's lines
            assert sum(task_id in text for text in texts) >= 3  # tools/call, create, run
    else:
        assert whole_task_ids(logs) == []
        assert [text for text in texts if whole_task_ids(text)] == []
        refs = {s["attributes"].get("redis_tasks.task.ref") for s in spans}
        assert {task_ref(task_id) for task_id in made} <= refs


async def _served_spans(stack: McpStack, server: int) -> list[dict[str, Any]]:
    async with httpx2.AsyncClient(timeout=30) as http:
        reply = await http.get(f"http://127.0.0.1:{stack.ports[server]}/test/spans")
    spans: list[dict[str, Any]] = reply.json()
    return spans


def test_the_manager_option_reaches_its_workers() -> None:
    async def handler(execution: TaskExecution) -> dict[str, Any]:
        return {}

    assert InMemoryTaskManager().whole_task_ids is False
    told = InMemoryTaskManager(whole_task_ids=True)
    assert told.whole_task_ids is True
    assert Worker(told, handler)._settings.whole_task_ids is True
    assert Worker(told, handler, whole_task_ids=False)._settings.whole_task_ids is False
    assert Worker(InMemoryTaskManager(), handler)._settings.whole_task_ids is False
    assert RedisTaskManager.from_url("redis://127.0.0.1:9", whole_task_ids=True).whole_task_ids
