"""Metrics in process (an SDK reader in memory), the no-extra path, health and the HTTP server.

The instruments are read through OpenTelemetry's in-memory reader while a worker
runs on :class:`InMemoryTaskManager`; the library without opentelemetry is run
in a subprocess that blocks the import. ``tests/ops/test_worker_metrics.py`` scrapes a
real ``redis-tasks worker`` process.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from redis_tasks import (
    BackendError,
    CapacityError,
    InMemoryTaskManager,
    InputRequest,
    JsonRpcError,
    Limits,
    QuotaExceededError,
    TaskExecution,
    TaskFailed,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
    Worker,
)
from redis_tasks._redis.client import backend_errors
from redis_tasks._telemetry.backlog import WorkerGauges
from redis_tasks._telemetry.http import HttpServer, Response
from redis_tasks._telemetry.instruments import INSTRUMENTS
from redis_tasks._telemetry.metrics import METRICS
from redis_tasks._worker.health import Health
from tests.support.helpers import ALICE, BOB, ELICIT, ELICIT_ANSWER, ORIGIN, wait_until

sdk_metrics = pytest.importorskip("opentelemetry.sdk.metrics")
sdk_export = pytest.importorskip("opentelemetry.sdk.metrics.export")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def reader() -> Iterator[Any]:
    """METRICS bound to a provider with an in-memory reader; restored afterwards."""
    saved = dict(vars(METRICS))
    memory = sdk_export.InMemoryMetricReader()
    provider = sdk_metrics.MeterProvider(metric_readers=[memory])
    assert METRICS.enable(provider)
    try:
        yield memory
    finally:
        vars(METRICS).clear()
        vars(METRICS).update(saved)
        provider.shutdown()


def collect(reader: Any) -> dict[str, list[tuple[dict[str, Any], Any]]]:
    """Each instrument's points: (attributes, value) for sums and gauges, (attributes,
    count) for histograms."""
    found: dict[str, list[tuple[dict[str, Any], Any]]] = {}
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                found[metric.name] = [
                    (dict(p.attributes or {}), getattr(p, "value", getattr(p, "count", None)))
                    for p in metric.data.data_points
                ]
    return found


def total(points: dict[str, list[tuple[dict[str, Any], Any]]], name: str, **match: Any) -> Any:
    return sum(
        value
        for attributes, value in points.get(name, [])
        if all(attributes.get(k) == v for k, v in match.items())
    )


async def handler(execution: TaskExecution) -> dict[str, Any]:
    mode = execution.payload.decode()
    if mode == "fail":
        raise TaskFailed(JsonRpcError(code=-32001, message="chosen"))
    if mode == "ask":
        answers = await execution.request_input({"name": ELICIT}, "who?")
        return {"answers": answers}
    if mode == "hold":  # until cancelled
        await execution.cancelled.wait()
        raise asyncio.CancelledError
    return {"ok": True}


@asynccontextmanager
async def running(manager: InMemoryTaskManager, **options: Any) -> AsyncIterator[Worker]:
    # The asking handler keeps its slot while it waits (park_after=None): the counts the
    # tests read are of one run a task, whatever the machine's speed.
    async with Worker(manager, handler, park_after=None, **options) as worker:
        runner = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            await worker.stop(grace=1.0)
            await runner


async def status(manager: InMemoryTaskManager, task_id: str) -> TaskStatus | None:
    task = await manager.find_task(TaskRequestContext(ALICE, task_id))
    return None if task is None else task.status


async def test_a_worker_records_every_instrument_with_bounded_attributes(reader: Any) -> None:
    manager = InMemoryTaskManager(partitions=2)

    async def create(mode: str) -> str:
        return (await manager.create_task(ALICE, ORIGIN, payload=mode.encode())).task_id

    ok = [await create("ok") for _ in range(4)]
    failing, asking, held = await create("fail"), await create("ask"), await create("hold")
    never_run = await create("ok")
    # Cancelled before any worker held it: the request ends it, no claim ever meets it.
    await manager.request_cancellation(TaskRequestContext(ALICE, never_run))
    assert await status(manager, never_run) is TaskStatus.CANCELLED
    async with running(manager, lease=timedelta(seconds=5)) as worker:

        async def asked() -> bool:
            return await status(manager, asking) is TaskStatus.INPUT_REQUIRED

        await wait_until(asked, what="the input request")
        await manager.update_task(TaskUpdateContext(ALICE, asking, {"name": ELICIT_ANSWER}))

        async def only_the_held_one_left() -> bool:
            statuses = [await status(manager, t) for t in [*ok, failing, asking, never_run]]
            return (
                all(
                    s is not None and s.value in ("completed", "failed", "cancelled")
                    for s in statuses
                )
                and worker.running == 1
            )

        await wait_until(only_the_held_one_left, what="every task but the held one to end")
        await METRICS.refresh()
        points = collect(reader)
        assert total(points, "redis_tasks_tasks_running") == 1
        backlog = points["redis_tasks_backlog"]
        assert sorted(a["partition"] for a, _ in backlog) == [0, 1]
        assert sum(v for _, v in backlog) == 0
        waiting = points["redis_tasks_tenants_waiting"]
        assert sorted((a["partition"], v) for a, v in waiting) == [(0, 0), (1, 0)]
        assert sum(v for _, v in points["redis_tasks_pending"]) == 1  # the held task
        await manager.request_cancellation(TaskRequestContext(ALICE, held))

        async def held_ended() -> bool:
            return await status(manager, held) is TaskStatus.CANCELLED

        await wait_until(held_ended, what="the held task to end cancelled")

        async def idle() -> bool:
            return worker.running == 0

        await wait_until(idle, what="the held run to be forgotten")
    # A client failure, mapped (and counted) at the Redis backend's error boundary.
    with contextlib.suppress(BackendError), backend_errors:
        raise ConnectionError("counted")
    points = collect(reader)
    assert total(points, "redis_tasks_tasks_created") == 8
    assert total(points, "redis_tasks_tasks_claimed") == 7
    assert {a["partition"] for a, _ in points["redis_tasks_tasks_claimed"]} <= {0, 1}
    assert total(points, "redis_tasks_tasks_completed") == 5
    assert total(points, "redis_tasks_tasks_failed") == 1
    assert total(points, "redis_tasks_tasks_cancelled") == 2  # by the request, by the worker
    settled = {a["outcome"]: n for a, n in points["redis_tasks_claims_settled"]}
    assert settled == {"cancelled": 0, "poisoned": 0, "expired": 0, "terminal": 0, "deferred": 0}
    refused = {a["reason"]: n for a, n in points["redis_tasks_creates_refused"]}
    assert refused == {"quota": 0, "rate": 0, "full": 0}
    assert total(points, "redis_tasks_input_rounds") == 1
    assert total(points, "redis_tasks_redis_errors") == 1
    assert total(points, "redis_tasks_pickup_latency") == 7
    assert total(points, "redis_tasks_create_to_terminal") == 7
    durations = {a["outcome"]: n for a, n in points["redis_tasks_run_duration"]}
    assert durations == {"completed": 5, "failed": 1, "cancelled": 1}
    assert total(points, "redis_tasks_lease_losses") == 0
    assert "redis_tasks_tasks_reclaimed" not in points
    # Only the documented attributes, whose values are partitions and outcomes.
    allowed = {spec.name: set(spec.attributes) for spec in INSTRUMENTS}
    for name, found in points.items():
        for attributes, _ in found:
            assert set(attributes) <= allowed[name], name


async def test_asking_the_same_round_again_is_no_new_round(reader: Any) -> None:
    manager = InMemoryTaskManager(partitions=1)
    task_id = (await manager.create_task(ALICE, ORIGIN)).task_id
    execution = TaskExecution(
        manager, task_id, origin=ORIGIN, payload=b"", attempt=1, fence=0, input_poll=1.0
    )
    second = InputRequest(method="roots/list", params={})
    await execution.answered_so_far({"a": ELICIT, "b": second})
    await execution.answered_so_far({"a": ELICIT, "b": second})  # a poll
    await manager.update_task(TaskUpdateContext(ALICE, task_id, {"a": ELICIT_ANSWER}))
    await execution.answered_so_far({"a": ELICIT, "b": second})  # only "b" outstanding now
    await execution.report("back to work")
    await execution.answered_so_far({"b": second})  # asked again after working
    assert total(collect(reader), "redis_tasks_input_rounds") == 3


async def test_refusals_by_reason_and_tenants_waiting_carry_no_tenant(reader: Any) -> None:
    """The process that creates counts each refusal by its reason; a worker's gauges
    report the tenants waiting per partition, and the backlog with the tasks queued."""
    secret = "tenant-s3cr3t"
    manager = InMemoryTaskManager(partitions=1)
    # Two tenants wait: the first task went straight to the stream, three are queued.
    for who, tenant in ((ALICE, secret), (ALICE, secret), (BOB, None), (BOB, None)):
        await manager.create_task(who, ORIGIN, tenant=tenant)
    limits = Limits(max_open_tasks_per_tenant=1, tenant_create_rate=0.01, tenant_create_burst=1)
    limited = InMemoryTaskManager(partitions=1, limits=limits)
    await limited.create_task(ALICE, ORIGIN, tenant=secret)
    with pytest.raises(QuotaExceededError):
        await limited.create_task(ALICE, ORIGIN, tenant=secret)  # its second open task
    await limited.cancel_task((await limited.create_task(ALICE, ORIGIN)).task_id)
    with pytest.raises(QuotaExceededError):
        await limited.create_task(ALICE, ORIGIN)  # the second create within 100 s
    small = InMemoryTaskManager(max_tasks=1)
    await small.create_task(ALICE, ORIGIN, tenant=secret)
    with pytest.raises(CapacityError) as full:
        await small.create_task(ALICE, ORIGIN, tenant=secret)
    assert full.value.reason == "full"
    gauges = WorkerGauges(manager.work_queue, [0], running=lambda: 0, every=0.0)
    unwatch = METRICS.watch(gauges)
    try:
        await gauges.refresh()
        METRICS.claim_settled("deferred")  # as the worker counts a claim deferred by a cap
        points = collect(reader)
    finally:
        unwatch()
    refused = {a["reason"]: n for a, n in points["redis_tasks_creates_refused"]}
    assert refused == {"quota": 1, "rate": 1, "full": 1}
    assert total(points, "redis_tasks_tasks_created") == 7
    assert points["redis_tasks_tenants_waiting"] == [({"partition": 0}, 2)]
    assert points["redis_tasks_backlog"] == [({"partition": 0}, 4)]
    assert total(points, "redis_tasks_claims_settled", outcome="deferred") == 1
    allowed = {spec.name: set(spec.attributes) for spec in INSTRUMENTS}
    for name, found in points.items():
        for attributes, _ in found:
            assert set(attributes) <= allowed[name], name
            assert secret not in repr(attributes)


def run_python(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


WITHOUT_OPENTELEMETRY = """
    import sys
    sys.modules["opentelemetry"] = None  # as if the otel extra were not installed

    import asyncio
    from redis_tasks import InMemoryTaskManager, TaskRequestContext, Worker
    from redis_tasks._telemetry.hooks import nothing as _nothing
    from redis_tasks._telemetry.metrics import METRICS
    from tests.support.helpers import ALICE, ORIGIN, wait_until

    async def handler(execution):
        return {"ok": True}

    async def main():
        manager = InMemoryTaskManager(partitions=2)
        ids = [(await manager.create_task(ALICE, ORIGIN)).task_id for _ in range(5)]
        async with Worker(manager, handler) as worker:
            runner = asyncio.create_task(worker.run())

            async def done():
                tasks = [await manager.find_task(TaskRequestContext(ALICE, i)) for i in ids]
                return all(t.status.value == "completed" for t in tasks)

            await wait_until(done, what="the tasks")
            await worker.stop()
            await runner

    asyncio.run(main())
    assert not METRICS.enabled
    assert METRICS.task_created is _nothing and METRICS.pickup is _nothing
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
    assert loaded == ["opentelemetry"], loaded  # only the blocker itself
    print("ran without opentelemetry")
"""


def test_without_opentelemetry_the_hooks_are_no_ops_and_a_worker_runs() -> None:
    done = run_python(WITHOUT_OPENTELEMETRY)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ran without opentelemetry"


def test_metrics_off_binds_no_ops_even_with_opentelemetry_installed() -> None:
    code = """
        from redis_tasks._telemetry.hooks import nothing as _nothing
        from redis_tasks._telemetry.metrics import METRICS
        assert not METRICS.enabled and METRICS.run_ended is _nothing
        print("off")
    """
    done = run_python(code, REDIS_TASKS_METRICS="off")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "off"


def test_asking_for_metrics_without_the_extra_says_how_to_install_it() -> None:
    code = """
        import sys
        sys.modules["opentelemetry"] = None
        from redis_tasks.__main__ import main
        sys.exit(main(["worker", "tests.support.handlers:handler", "--redis-url",
                       "redis://127.0.0.1:1", "--metrics-port", "0"]))
    """
    done = run_python(code)
    assert done.returncode == 2
    assert "redis-mcp-tasks[otel]" in done.stderr


# -- health ----------------------------------------------------------------------------


async def test_health_needs_recent_reads_and_renewals_within_a_lease() -> None:
    health = Health([0, 1], block=0.01, timeout=0.01, lease=0.05)
    assert health.check().reason == "starting"
    health.started()
    assert health.check().ok
    health.waiting(1, True)  # busy partition: not stale however long it waits

    async def stale() -> bool:
        return not health.check().ok

    await wait_until(stale, what="partition 0 to go stale")
    assert "1 partition read loop(s)" in health.check().reason
    health.read_done(0)
    assert health.check().ok
    health.renew_failed()

    async def renewals_failing() -> bool:
        health.read_done(0)
        return "renewals failing" in health.check().reason

    await wait_until(renewals_failing, what="the renewal failure to outlast a lease")
    health.renewed()
    health.read_done(0)
    assert health.check().ok
    health.stopping()
    assert health.check().reason == "stopping"


async def http(port: int, request: bytes) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


async def test_the_http_server_serves_get_routes_only() -> None:
    async def hello() -> Response:
        return Response(200, b"hello\n")

    server = HttpServer({"/hi": hello})
    port = await server.start("127.0.0.1", 0)
    try:
        assert await http(port, b"GET /hi?x=1 HTTP/1.1\r\nHost: a\r\n\r\n") == (200, b"hello\n")
        assert await http(port, b"HEAD /hi HTTP/1.1\r\n\r\n") == (200, b"")
        assert (await http(port, b"GET /other HTTP/1.1\r\n\r\n"))[0] == 404
        assert (await http(port, b"POST /hi HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await http(port, b"nonsense\r\n\r\n"))[0] == 400
    finally:
        await server.close()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", port)


def test_every_instrument_is_named_for_the_library_and_documented() -> None:
    page = (ROOT / "docs/operations/metrics.md").read_text()
    for spec in INSTRUMENTS:
        assert spec.name.startswith("redis_tasks_")
        assert f"`{spec.name}" in page, spec.name


def test_pre_bucketed_histograms_write_what_the_sdk_wrote() -> None:
    """The Prometheus export keeps the histograms pre-bucketed; its text must be what
    the SDK's exporter wrote for the same records, byte for byte: bucket edges
    (a value on a bound counts in it), sums, counts, names, labels and help."""
    prometheus = pytest.importorskip("prometheus_client")
    from opentelemetry.exporter.prometheus import PrometheusMetricReader

    from redis_tasks._telemetry.instruments import SECONDS_BUCKETS
    from redis_tasks._telemetry.prometheus import HistogramCollector

    values = [0.0, *SECONDS_BUCKETS, *(b * 1.0001 for b in SECONDS_BUCKETS), 1e9, 0.0123]
    saved = dict(vars(METRICS))

    def record() -> None:
        for i, seconds in enumerate(values):
            METRICS.pickup(seconds)
            METRICS.run_ended(("completed", "failed", "abandoned")[i % 3], seconds * 2)
            METRICS.create_to_terminal(seconds / 3)

    def histogram_lines(registry: Any) -> list[str]:
        text: str = prometheus.generate_latest(registry).decode()
        names = ("pickup_latency", "run_duration", "create_to_terminal")
        return [line for line in text.splitlines() if any(n in line for n in names)]

    try:
        sdk_registry = prometheus.CollectorRegistry()
        reader = PrometheusMetricReader(registry=sdk_registry)
        sdk_provider = sdk_metrics.MeterProvider(metric_readers=[reader])
        assert METRICS.enable(sdk_provider)
        record()
        expected = histogram_lines(sdk_registry)

        ours = prometheus.CollectorRegistry()
        provider = sdk_metrics.MeterProvider(metric_readers=[sdk_export.InMemoryMetricReader()])
        assert METRICS.enable(provider)
        ours.register(HistogramCollector(METRICS.bucket_histograms()))
        record()
        got = histogram_lines(ours)
    finally:
        vars(METRICS).clear()
        vars(METRICS).update(saved)
    assert len(expected) == 3 * 2 + 3 * (len(SECONDS_BUCKETS) + 3) + 2 * (len(SECONDS_BUCKETS) + 3)
    assert got == expected
