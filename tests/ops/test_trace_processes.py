"""Traces across processes: a real ``redis-tasks worker`` links its spans to the creator's.

First, the ``create_task`` span is made in this process (the library's hooks bound
to an SDK provider with the in-memory exporter) and the task run by a worker
process whose handler module configures its own provider
(``tests.support.traced_handlers``); the worker dumps its spans at exit. Then two MCP
server processes, one with the tasks fast path and one on the SDK's path, serve
the same requests with tracing on (``RT_TEST_TRACES``): their spans must be the
same, each ``run_task`` span of the worker behind them must link to the
``create_task`` span of the server that created its task, and no span of any
process may hold a tool's arguments, answers or result.
"""

from __future__ import annotations

import json
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from redis_tasks import RedisTaskManager, TaskOrigin, task_ref
from redis_tasks.testing import RedisServer
from tests.support.fleet import Fleet, terminal
from tests.support.helpers import ALICE, wait_until, whole_task_ids
from tests.support.mcp_stack import McpStack

pytest.importorskip("opentelemetry.sdk.trace")

from tests.support.tracing import memory_provider, traces_on

pytestmark = pytest.mark.slow

SECRET = "s3cr3t-" + uuid.uuid4().hex
FAST, SDK = 0, 1


def hex_id(value: int, digits: int) -> str:
    """An ID as the SDK's span JSON writes it."""
    return f"0x{value:0{digits}x}"


async def exited(process: subprocess.Popen[bytes]) -> int:
    """Wait (polling, not sleeping a fixed time) until ``process`` has exited."""

    async def done() -> int | None:
        code = process.poll()
        return None if code is None else code + 1  # truthy even for exit code 0

    return await wait_until(done, within=60, what="the process to exit") - 1


def assert_no_secret(spans: list[dict[str, Any]]) -> None:
    """No attribute, event, link or status of any span holds the planted secret, nor a
    whole task ID."""
    for span in spans:
        assert SECRET not in json.dumps(span), span["name"]
        assert whole_task_ids(json.dumps(span)) == [], span["name"]


async def test_a_worker_process_links_its_run_span_to_the_span_that_created_the_task(
    redis_server: RedisServer, prefix: str, tmp_path: Path
) -> None:
    origin = TaskOrigin.from_persisted_state({"tool": "t", "arguments": {"k": SECRET}})
    provider, exporter = memory_provider()
    fleet = Fleet(redis_server.url, prefix, f"ns-{uuid.uuid4().hex[:8]}", tmp_path)
    dump = tmp_path / "worker-spans.json"
    try:
        with traces_on(provider):
            async with RedisTaskManager.from_url(redis_server.url, prefix=prefix) as manager:
                payload = json.dumps({"mode": "noop", "k": SECRET}).encode()
                task = await manager.create_task(ALICE, origin, payload=payload)
                (created,) = exporter.get_finished_spans()
                worker = fleet.start(
                    handler="tests.support.traced_handlers:handler",
                    env={"RT_TEST_SPANS": str(dump)},
                )
                await terminal(manager, task.task_id)
        worker.signal(signal.SIGTERM)  # graceful: the spans are dumped at exit
        assert await exited(worker.process) == 0
    finally:
        fleet.stop_all()
    spans = json.loads(dump.read_text())
    (run,) = [s for s in spans if s["name"] == "run_task"]
    (inside,) = [s for s in spans if s["name"] == "handler"]
    assert run["kind"] == "SpanKind.CONSUMER"
    assert run["parent_id"] is None
    (link,) = run["links"]
    assert link["context"]["trace_id"] == hex_id(created.context.trace_id, 32)
    assert link["context"]["span_id"] == hex_id(created.context.span_id, 16)
    assert run["context"]["trace_id"] != link["context"]["trace_id"]
    assert run["attributes"]["redis_tasks.task.ref"] == task_ref(task.task_id)
    assert run["attributes"]["redis_tasks.run.outcome"] == "completed"
    # The handler's own span is a child of the run's, in the worker process.
    assert inside["parent_id"] == run["context"]["span_id"]
    assert inside["context"]["trace_id"] == run["context"]["trace_id"]
    assert_no_secret(spans)
    assert SECRET not in "".join(s.to_json() for s in exporter.get_finished_spans())


@pytest.fixture(scope="module")
def traced_stack(redis_server: RedisServer) -> Iterator[tuple[McpStack, Path]]:
    """A fast-path server, an SDK-path server and a worker, all tracing; the path the
    worker dumps its spans to."""
    with tempfile.TemporaryDirectory(prefix="redis-tasks-traces-") as directory:
        stack = McpStack(redis_server.url, f"tr{uuid.uuid4().hex[:10]}", Path(directory))
        dump = Path(directory) / "worker-spans.json"
        try:
            stack.start_server("fast", {"RT_TEST_TRACES": "1"})
            stack.start_server("sdk", {"RT_TEST_TRACES": "1", "RT_TEST_FAST_PATH": "0"})
            stack.start_worker({"RT_TEST_TRACES": "1", "RT_TEST_SPANS": str(dump)})
            yield stack, dump
        finally:
            stack.stop()


async def until(stack: McpStack, server: int, task_id: str, status: str) -> dict[str, Any]:
    """Poll ``tasks/get`` on ``server`` until the task has ``status``."""

    async def reached() -> dict[str, Any] | None:
        task: dict[str, Any] = (await stack.rpc(server, "tasks/get", {"taskId": task_id}))["result"]
        return task if task["status"] == status else None

    return await wait_until(reached, within=30, what=f"the task to be {status}")


async def exercise(stack: McpStack, server: int) -> tuple[str, str]:
    """``tools/call`` twice, ``tasks/get`` until each task moves, ``tasks/update`` one and
    ``tasks/cancel`` the other; the two task IDs (answered, cancelled)."""
    call = {"name": "ask_model", "arguments": {"question": SECRET}}
    asked = (await stack.rpc(server, "tools/call", call))["result"]["taskId"]
    await until(stack, server, asked, "input_required")
    answer = {"role": "assistant", "content": {"type": "text", "text": SECRET}, "model": "m"}
    updated = await stack.rpc(
        server, "tasks/update", {"taskId": asked, "inputResponses": {"sample-1": answer}}
    )
    assert updated["result"]["resultType"] == "complete"
    await until(stack, server, asked, "completed")
    held = (await stack.rpc(server, "tools/call", {"name": "hold", "arguments": {}}))["result"]
    await until(stack, server, held["taskId"], "working")
    cancelled = await stack.rpc(server, "tasks/cancel", {"taskId": held["taskId"]})
    assert cancelled["result"]["resultType"] == "complete"
    await until(stack, server, held["taskId"], "cancelled")
    return asked, held["taskId"]


async def served_spans(stack: McpStack, server: int) -> list[dict[str, Any]]:
    async with httpx2.AsyncClient(timeout=30) as http:
        reply = await http.get(f"http://127.0.0.1:{stack.ports[server]}/test/spans")
    spans: list[dict[str, Any]] = reply.json()
    return spans


def shape(spans: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    """What a path's spans look like, whatever the IDs and how often a task was polled:
    each span's name, kind, parent's name, status and attribute names."""
    names = {s["context"]["span_id"]: s["name"] for s in spans}
    return {
        (
            s["name"],
            s["kind"],
            names.get(s["parent_id"]),
            s["status"]["status_code"],
            tuple(sorted(s["attributes"])),
        )
        for s in spans
    }


def by_name(spans: list[dict[str, Any]], name: str, task_id: str) -> list[dict[str, Any]]:
    return [
        s
        for s in spans
        if s["name"] == name and s["attributes"].get("redis_tasks.task.ref") == task_ref(task_id)
    ]


async def test_mcp_requests_make_the_same_spans_on_both_paths_and_workers_link_to_them(
    traced_stack: tuple[McpStack, Path],
) -> None:
    stack, dump = traced_stack
    tasks = {server: await exercise(stack, server) for server in (FAST, SDK)}
    spans = {server: await served_spans(stack, server) for server in (FAST, SDK)}
    assert shape(spans[FAST]) == shape(spans[SDK])
    for server, (asked, held) in tasks.items():
        mine = spans[server]
        assert_no_secret(mine)
        # tools/call: the SDK's SERVER span names the task; create_task is its child.
        (call,) = by_name(mine, "tools/call ask_model", asked)
        assert call["kind"] == "SpanKind.SERVER"
        assert call["attributes"]["mcp.method.name"] == "tools/call"
        assert call["attributes"]["redis_tasks.task.status"] == "working"
        (created,) = by_name(mine, "create_task", asked)
        assert created["kind"] == "SpanKind.PRODUCER"
        assert created["parent_id"] == call["context"]["span_id"]
        assert created["context"]["trace_id"] == call["context"]["trace_id"]
        polls = by_name(mine, "tasks/get", asked)
        statuses = {p["attributes"]["redis_tasks.task.status"] for p in polls}
        assert {"working", "input_required", "completed"} >= statuses >= {"completed"}
        assert all(p["kind"] == "SpanKind.SERVER" for p in polls)
        (update,) = by_name(mine, "tasks/update", asked)
        assert "redis_tasks.task.status" not in update["attributes"]
        (cancel,) = by_name(mine, "tasks/cancel", held)
        assert cancel["kind"] == "SpanKind.SERVER"
        assert by_name(mine, "create_task", held)
    # The worker's spans, once it stopped (gracefully: they are dumped at exit).
    worker = stack.processes[-1]
    worker.send_signal(signal.SIGTERM)
    assert await exited(worker) == 0
    runs = json.loads(dump.read_text())
    assert_no_secret(runs)
    for server, (asked, held) in tasks.items():
        for task_id, outcome in ((asked, "completed"), (held, "cancelled")):
            (created,) = by_name(spans[server], "create_task", task_id)
            (run,) = by_name(runs, "run_task", task_id)
            assert run["kind"] == "SpanKind.CONSUMER"
            assert run["attributes"]["redis_tasks.run.outcome"] == outcome
            (link,) = run["links"]
            assert link["context"]["trace_id"] == created["context"]["trace_id"]
            assert link["context"]["span_id"] == created["context"]["span_id"]
