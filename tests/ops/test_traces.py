"""Traces in process: the ``create_task`` and ``run_task`` spans and the stored context.

The library's hooks are bound to an SDK tracer provider with the in-memory span
exporter (``TRACES.enable(provider)``; the global provider of this process stays
unset), on the in-memory backend and on the session's redis-server. What is
stored with the work is read straight from the record. The test of two
processes is ``tests/ops/test_trace_processes.py``.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from redis_tasks import (
    InMemoryTaskManager,
    JsonRpcError,
    TaskExecution,
    TaskFailed,
    TaskOrigin,
    TaskRequestContext,
    TaskStatus,
    Worker,
    task_ref,
)
from redis_tasks._lease import Claim, ClaimOutcome
from redis_tasks._telemetry.traces import TRACES
from redis_tasks._work_queue import WorkerBackend
from redis_tasks.testing import RedisServer
from tests.redis.test_redis import LoseNextReply
from tests.support.backends import Backend, real_backend
from tests.support.helpers import ALICE, wait_until, whole_task_ids

trace = pytest.importorskip("opentelemetry.trace")
sampling = pytest.importorskip("opentelemetry.sdk.trace.sampling")
spans_module = pytest.importorskip("redis_tasks._telemetry.spans")

from tests.support.tracing import memory_provider, traces_on  # noqa: E402  (once the SDK is known there)

ROOT = Path(__file__).resolve().parents[2]
SECRET = "s3cr3t-" + uuid.uuid4().hex
ORIGIN = TaskOrigin.from_persisted_state({"tool": f"tool-{SECRET}", "arguments": {"k": SECRET}})
LEASE = timedelta(seconds=30)

PRODUCER_ATTRIBUTES = {
    "messaging.system": "redis_tasks",
    "messaging.operation.type": "send",
    "messaging.operation.name": "create_task",
}
CONSUMER_ATTRIBUTES = {
    "messaging.system": "redis_tasks",
    "messaging.operation.type": "process",
    "messaging.operation.name": "run_task",
    "messaging.consumer.group.name": "workers",
}


@pytest.fixture
def provider() -> Any:
    """An SDK tracer provider exporting to :func:`exporter`'s memory."""
    return memory_provider()


@pytest.fixture
def exporter(provider: Any) -> Iterator[Any]:
    """The in-memory exporter of ``provider``, which TRACES is bound to meanwhile."""
    with traces_on(provider[0]):
        yield provider[1]


@pytest.fixture(params=("memory", "redis"))
async def subject(
    request: pytest.FixtureRequest, redis_server: RedisServer, prefix: str
) -> AsyncIterator[Backend]:
    """The in-memory backend, and the Redis backend on the session's server."""
    if request.param == "memory":
        manager = InMemoryTaskManager()
        async with manager:
            yield Backend("memory", manager, prefix)
        return
    async with real_backend("redis", redis_server.url, prefix) as backend:
        yield backend


def partition_of(task_id: str) -> int:
    return int(task_id.split(".")[0])


async def record(backend: Backend, task_id: str) -> dict[str, bytes]:
    """Every field of the task's stored record (pieces of long values as stored)."""
    if backend.name == "memory":
        return dict(backend.manager._tasks[task_id].fields)
    client = backend.client
    assert isinstance(client, Redis)
    key = backend.keys.task(partition_of(task_id), task_id).task
    raw: dict[Any, Any] = await client.hgetall(key)
    return {name.decode(): value for name, value in raw.items()}


async def claim_next(manager: WorkerBackend, task_id: str, consumer: str = "c1") -> Claim:
    """Claim the task's entry, the next one in its partition."""
    ((entry, claim),) = await manager.work_queue.claim_next(
        partition_of(task_id), consumer=consumer, count=1, lease=LEASE, max_attempts=5
    )
    assert entry.task_id == task_id
    assert claim.outcome is ClaimOutcome.RUN
    return claim


def traceparent(span: Any) -> bytes:
    """The ``traceparent`` header value of ``span``'s context."""
    context = span.get_span_context()
    flags = int(context.trace_flags)
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}".encode()


def only(exporter: Any, name: str) -> Any:
    (found,) = [s for s in exporter.get_finished_spans() if s.name == name]
    return found


def assert_no_task_data(exporter: Any) -> None:
    """No attribute, event or status of any span holds the origin, arguments or payload,
    nor a whole task ID."""
    for span in exporter.get_finished_spans():
        text = span.to_json()
        assert SECRET not in text, span.name
        assert "tool-" not in text, span.name
        assert whole_task_ids(text) == [], span.name


async def terminal(manager: WorkerBackend, task_id: str) -> Any:
    async def done() -> Any:
        task = await manager.find_task(TaskRequestContext(ALICE, task_id))
        return task if task is not None and task.is_terminal else None

    return await wait_until(done, what="a terminal task")


async def test_create_task_makes_a_producer_span_whose_context_is_stored_with_the_work(
    subject: Backend, exporter: Any
) -> None:
    m = subject.manager
    task = await m.create_task(ALICE, ORIGIN, payload=SECRET.encode())
    span = only(exporter, "create_task")
    assert span.kind is trace.SpanKind.PRODUCER
    assert span.parent is None
    assert dict(span.attributes) == {
        **PRODUCER_ATTRIBUTES,
        "messaging.destination.partition.id": str(partition_of(task.task_id)),
        "redis_tasks.task.ref": task_ref(task.task_id),
    }
    assert span.status.status_code is trace.StatusCode.UNSET
    fields = await record(subject, task.task_id)
    assert fields["tp"] == traceparent(span)
    claim = await claim_next(m, task.task_id)
    assert claim.trace_context == traceparent(span)
    assert_no_task_data(exporter)


async def test_a_run_span_is_linked_to_the_creating_span_and_holds_the_handlers_spans(
    subject: Backend, provider: Any, exporter: Any
) -> None:
    m = subject.manager
    tracer = provider[0].get_tracer("the handler's own")

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        with tracer.start_as_current_span("inside"):
            await asyncio.sleep(0)
        return {"content": [{"type": "text", "text": SECRET}], "isError": False}

    task = await m.create_task(ALICE, ORIGIN, payload=SECRET.encode())
    async with Worker(m, handler) as worker:
        running = asyncio.create_task(worker.run())
        done = await terminal(m, task.task_id)
        await worker.stop()
        await running
    assert done.status is TaskStatus.COMPLETED
    producer = only(exporter, "create_task")
    run = only(exporter, "run_task")
    assert run.kind is trace.SpanKind.CONSUMER
    assert run.parent is None  # a trace of its own ...
    (link,) = run.links  # ... linked to the task's creation
    assert link.context.trace_id == producer.context.trace_id
    assert link.context.span_id == producer.context.span_id
    assert run.context.trace_id != producer.context.trace_id
    assert dict(run.attributes) == {
        **CONSUMER_ATTRIBUTES,
        "messaging.destination.partition.id": str(partition_of(task.task_id)),
        "redis_tasks.task.ref": task_ref(task.task_id),
        "redis_tasks.task.attempt": 1,
        "redis_tasks.run.reclaimed": False,
        "redis_tasks.run.outcome": "completed",
    }
    assert run.status.status_code is trace.StatusCode.UNSET
    inside = only(exporter, "inside")
    assert inside.parent is not None
    assert inside.parent.span_id == run.context.span_id
    assert inside.context.trace_id == run.context.trace_id
    # The span ends once the outcome is written, after the handler's own.
    assert run.end_time >= inside.end_time
    # The terminal transition dropped the stored context, with the payload.
    fields = await record(subject, task.task_id)
    assert not [name for name in fields if name.startswith(("tp", "pl"))]
    assert_no_task_data(exporter)


async def test_failed_and_cancelled_runs_name_the_error_type_never_its_message(
    subject: Backend, exporter: Any
) -> None:
    m = subject.manager
    waiting = asyncio.Event()

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        how = execution.payload.decode()
        if how == "raise":
            raise RuntimeError(f"password is {SECRET}")
        if how == "fail":
            raise TaskFailed(JsonRpcError(code=-32001, message=SECRET, data={"k": SECRET}))
        waiting.set()
        await execution.cancelled.wait()
        raise asyncio.CancelledError

    ids = {}
    for how in ("raise", "fail", "wait"):
        ids[how] = (await m.create_task(ALICE, ORIGIN, payload=how.encode())).task_id
    async with Worker(m, handler) as worker:
        running = asyncio.create_task(worker.run())
        for how in ("raise", "fail"):
            await terminal(m, ids[how])
        await asyncio.wait_for(waiting.wait(), 10)  # running: the cancel reaches the handler
        await m.request_cancellation(TaskRequestContext(ALICE, ids["wait"]))
        await terminal(m, ids["wait"])

        async def all_ended() -> list[Any]:
            runs = [s for s in exporter.get_finished_spans() if s.name == "run_task"]
            return runs if len(runs) == 3 else []

        runs = await wait_until(all_ended, what="three run spans")
        await worker.stop()
        await running
    by_task = {s.attributes["redis_tasks.task.ref"]: s for s in runs}
    expected = {
        "raise": ("failed", "RuntimeError"),
        "fail": ("failed", "TaskFailed"),
        "wait": ("cancelled", None),
    }
    for how, (outcome, error) in expected.items():
        span = by_task[task_ref(ids[how])]
        assert span.attributes["redis_tasks.run.outcome"] == outcome, how
        assert span.attributes.get("error.type") == error, how
        code = trace.StatusCode.UNSET if error is None else trace.StatusCode.ERROR
        assert span.status.status_code is code, how
        assert span.status.description is None, how
        assert not span.events, how  # no exception event: its message could hold data
    assert_no_task_data(exporter)


async def test_release_and_requeue_keep_the_stored_context(subject: Backend, exporter: Any) -> None:
    m = subject.manager
    task = await m.create_task(ALICE, ORIGIN)
    stored = traceparent(only(exporter, "create_task"))
    first = await claim_next(m, task.task_id)
    assert first.trace_context == stored
    await m.work_queue.release(task.task_id, fence=first.fence)  # a shutdown hand-back
    second = await claim_next(m, task.task_id, consumer="c2")
    assert second.fence > first.fence
    assert second.trace_context == stored
    await m.work_queue.release(task.task_id, fence=second.fence)
    # Delivered to a worker with no room, and put back at the tail.
    reader = m.work_queue.reader(partition_of(task.task_id), "c3", timedelta(seconds=1))
    (entry,) = await reader.read(1)
    await reader.close()
    await m.work_queue.requeue(entry)
    third = await claim_next(m, task.task_id, consumer="c4")
    assert third.trace_context == stored
    assert (await record(subject, task.task_id))["tp"] == stored
    await m.complete_task(task.task_id, {"content": [], "isError": False}, fence=third.fence)
    assert "tp" not in await record(subject, task.task_id)


async def test_a_create_retried_after_a_lost_reply_is_one_task_with_one_context(
    standalone_backend: Backend, exporter: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    m = standalone_backend.manager
    client = standalone_backend.client
    assert isinstance(client, Redis)
    (node,) = m._topology.primaries()
    flaky = LoseNextReply(node.pipeline)
    monkeypatch.setattr(node.pipeline, "call", flaky.call)
    monkeypatch.setattr(node.pipeline, "call_now", flaky.call_now)
    flaky.armed = True
    task = await m.create_task(ALICE, ORIGIN)  # the script ran; the retry finds its task
    assert flaky.lost == 1
    span = only(exporter, "create_task")  # one span around both sends
    assert span.status.status_code is trace.StatusCode.UNSET
    assert await client.xlen(standalone_backend.keys.work(partition_of(task.task_id))) == 1
    assert (await record(standalone_backend, task.task_id))["tp"] == traceparent(span)
    assert (await claim_next(m, task.task_id)).trace_context == traceparent(span)


def remote_parent(state: list[tuple[str, str]] | None = None) -> Any:
    """A sampled span context as a client's ``traceparent``/``tracestate`` would give."""
    return trace.NonRecordingSpan(
        trace.SpanContext(
            trace_id=0x0AF7651916CD43DD8448EB211C80319C,
            span_id=0xB7AD6B7169203331,
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
            trace_state=trace.TraceState(state or []),
        )
    )


async def test_without_a_tracer_provider_nothing_is_stored(subject: Backend) -> None:
    # This process never sets a global provider (test_trace_processes.py's
    # servers and workers do, in their own processes).
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert TRACES.enabled  # the API is there: the hooks look for a provider ...
    assert TRACES.create_span("0.abc") is None  # ... and find none
    m = subject.manager
    # Even with a client's trace context current, as the MCP SDK makes it from _meta.
    with trace.use_span(remote_parent([("vendor", "x")])):
        task = await m.create_task(ALICE, ORIGIN)
    assert not [name for name in await record(subject, task.task_id) if name.startswith("tp")]
    assert (await claim_next(m, task.task_id)).trace_context == b""


async def test_an_unsampled_create_stores_no_context(subject: Backend) -> None:
    dropping, memory = memory_provider(sampling.ALWAYS_OFF)
    with traces_on(dropping):
        task = await subject.manager.create_task(ALICE, ORIGIN)
    assert memory.get_finished_spans() == ()
    assert "tp" not in await record(subject, task.task_id)


async def test_tracestate_is_kept_in_pieces_and_returned_whole(
    subject: Backend, exporter: Any
) -> None:
    m = subject.manager
    members = [(f"v{i}", "x" * 40) for i in range(6)]  # about 270 bytes of tracestate
    with trace.use_span(remote_parent(members)):
        task = await m.create_task(ALICE, ORIGIN)
    span = only(exporter, "create_task")
    assert span.parent is not None
    assert span.parent.span_id == 0xB7AD6B7169203331  # the client's span
    expected = traceparent(span) + b" " + trace.TraceState(members).to_header().encode()
    fields = await record(subject, task.task_id)
    if subject.name == "redis":
        # Pieces of 64 bytes: the record stays a listpack.
        assert len(fields["tp"]) == 64
        assert b"".join(v for k, v in sorted(fields.items()) if k.startswith("tp")) == expected
        client = subject.client
        assert isinstance(client, Redis)
        key = subject.keys.task(partition_of(task.task_id), task.task_id).task
        assert await client.object("encoding", key) == b"listpack"
    else:
        assert fields["tp"] == expected
    claim = await claim_next(m, task.task_id)
    assert claim.trace_context == expected
    linked = spans_module.decode_context(claim.trace_context)
    assert linked is not None
    assert linked.trace_state == trace.TraceState(members)
    # A tracestate that would not fit the record's longest pieced value is left out.
    huge = [(f"w{i}", "y" * 200) for i in range(3)]
    with trace.use_span(remote_parent(huge)):
        big = await m.create_task(ALICE, ORIGIN)
    (big_span,) = [
        s
        for s in exporter.get_finished_spans()
        if s.attributes["redis_tasks.task.ref"] == task_ref(big.task_id)
    ]
    assert (await claim_next(m, big.task_id)).trace_context == traceparent(big_span)


def test_stored_context_that_is_not_w3c_trace_context_links_nothing() -> None:
    decode = spans_module.decode_context
    assert decode(b"") is None
    assert decode(b"00-" + b"0" * 32 + b"-b7ad6b7169203331-01") is None  # zero trace ID
    assert decode(b"not a traceparent") is None
    assert decode("00-é".encode()) is None
    good = decode(b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01 a=b")
    assert good is not None
    assert good.trace_state == trace.TraceState([("a", "b")])


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, **env},
    )


def test_without_opentelemetry_the_hooks_are_no_ops_and_nothing_is_stored() -> None:
    code = """
        import asyncio, sys
        sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
        from redis_tasks import InMemoryTaskManager, RequestContext, TaskOrigin
        from redis_tasks._telemetry.hooks import nothing as _nothing
        from redis_tasks._telemetry.traces import TRACES

        async def main():
            async with InMemoryTaskManager() as m:
                task = await m.create_task(
                    RequestContext("/mcp", "alice"), TaskOrigin.from_persisted_string("{}")
                )
                return "tp" in m._tasks[task.task_id].fields

        assert not TRACES.enabled
        assert TRACES.create_span is _nothing and TRACES.run_span is _nothing
        assert not asyncio.run(main())
        assert sorted(m for m in sys.modules if m.startswith("opentelemetry")) == ["opentelemetry"]
        print("no traces")
    """
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "no traces"


def test_traces_off_binds_no_ops_even_with_opentelemetry_installed() -> None:
    code = """
        from redis_tasks._telemetry.hooks import nothing as _nothing
        from redis_tasks._telemetry.traces import TRACES
        assert not TRACES.enabled and TRACES.mark_request is _nothing
        print(__import__("json").dumps("off"))
    """
    done = run_python(code, REDIS_TASKS_TRACES="off")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == "off"


def test_a_global_provider_set_after_import_is_used_from_then_on() -> None:
    code = """
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from redis_tasks._telemetry.traces import TRACES

        assert TRACES.create_span("0.abc") is None  # nothing set: nothing made
        trace.set_tracer_provider(TracerProvider())
        span = TRACES.create_span("0.abc")
        assert span is not None and span.carrier.startswith(b"00-"), span
        print("used")
    """
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "used"


def test_a_provider_named_by_otel_python_tracer_provider_is_used() -> None:
    code = """
        from redis_tasks._telemetry.traces import TRACES

        span = TRACES.create_span("0.abc")
        assert span is not None and span.carrier.startswith(b"00-"), span
        print("loaded")
    """
    done = run_python(code, OTEL_PYTHON_TRACER_PROVIDER="sdk_tracer_provider")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "loaded"
