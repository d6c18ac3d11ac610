"""A real ``redis-tasks worker`` process serves /metrics and /healthz.

The worker runs on a private redis-server the test can kill and start again. A
short load (a few dozen tasks, one failing, one cancelled, one asking for input)
moves the counters by exactly what it did; the scrape holds no task ID, origin
or payload; /healthz turns 503 while Redis is gone and 200 once it is back.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

from redis_tasks import (
    RedisTaskManager,
    TaskOrigin,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
)
from redis_tasks.testing import RedisServer, start_redis_server
from tests.support.fleet import Fleet, WorkerProcess, go, next_start, terminal
from tests.support.helpers import ALICE, ELICIT_ANSWER, ROOTS_ANSWER, reaches, wait_until

parser = pytest.importorskip("prometheus_client.parser")
pytest.importorskip("opentelemetry.exporter.prometheus")

pytestmark = pytest.mark.slow

SECRET = "s3cr3t-" + uuid.uuid4().hex
ORIGIN = TaskOrigin.from_persisted_state({"tool": f"tool-{SECRET}", "arguments": {"k": SECRET}})


@pytest.fixture
def server(tmp_path: Path) -> Iterator[list[RedisServer]]:
    """The test's own redis-server (a list: the test may replace it after a kill)."""
    servers = [start_redis_server(tmp_path)]
    yield servers
    for running in servers:
        running.stop()


@pytest.fixture
def fleet(server: list[RedisServer], prefix: str, tmp_path: Path) -> Iterator[Fleet]:
    crew = Fleet(server[0].url, prefix, f"ns-{uuid.uuid4().hex[:8]}", tmp_path)
    try:
        yield crew
    finally:
        crew.stop_all()


@pytest.fixture
async def manager(server: list[RedisServer], prefix: str) -> AsyncIterator[RedisTaskManager]:
    async with RedisTaskManager.from_url(server[0].url, prefix=prefix) as m:
        yield m


@pytest.fixture
async def control(server: list[RedisServer]) -> AsyncIterator[Redis]:
    client = Redis.from_url(server[0].url, socket_timeout=None)
    yield client
    await client.aclose()


async def get(port: int, path: str) -> tuple[int, str]:
    """``GET path`` on loopback: the status and the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    raw = await reader.read()
    writer.close()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


async def ports(worker: WorkerProcess) -> dict[str, int]:
    """The ports the worker logged it listens on, by path."""

    async def listening() -> dict[str, int] | None:
        found = {
            e["path"]: e["port"] for e in worker.events() if e.get("event") == "http_listening"
        }
        return found if {"/metrics", "/healthz"} <= found.keys() else None

    return await wait_until(listening, within=60, what="the endpoints to listen")


def samples(text: str) -> dict[str, float]:
    """Each sample's value by ``name{partition=..,outcome=..}``, other labels left out;
    samples that differ only in those add up."""
    found: dict[str, float] = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            kept = ",".join(
                f"{k}={v}" for k, v in sorted(sample.labels.items()) if k in ("outcome",)
            )
            key = f"{sample.name}{{{kept}}}" if kept else sample.name
            found[key] = found.get(key, 0.0) + sample.value
    return found


def moved(before: dict[str, float], after: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


async def create(manager: RedisTaskManager, mode: str) -> str:
    payload = json.dumps({"mode": mode, "secret": SECRET}).encode()
    return (await manager.create_task(ALICE, ORIGIN, payload=payload)).task_id


async def test_a_worker_process_serves_metrics_and_health(
    fleet: Fleet,
    manager: RedisTaskManager,
    control: Redis,
    server: list[RedisServer],
    tmp_path: Path,
) -> None:
    # Its asking handler keeps its slot while it waits (--park-after never): the counts
    # below are of one run a task.
    worker = fleet.start(
        "--metrics-port", "0", "--health-port", "0", "--timeout", "1", "--lease", "3",
        "--park-after", "never",
    )  # fmt: skip
    port = await ports(worker)
    metrics_port, health_port = port["/metrics"], port["/healthz"]

    async def healthy() -> bool:
        return (await get(health_port, "/healthz"))[0] == 200

    await wait_until(healthy, within=30, what="the worker to be healthy")
    status, body = await get(metrics_port, "/metrics")
    assert status == 200
    before = samples(body)

    ids = [await create(manager, "noop") for _ in range(30)]
    failing = await create(manager, "fail")
    asking = await create(manager, "ask")
    cancelled = await create(manager, "until_cancelled")
    # The failing, asking and cancelled handlers report their start (noop ones do not).
    started = [await next_start(control, fleet) for _ in range(3)]
    await reaches(manager, asking, TaskStatus.INPUT_REQUIRED)
    await manager.update_task(
        TaskUpdateContext(ALICE, asking, {"name": ELICIT_ANSWER, "dirs": ROOTS_ANSWER})
    )
    await manager.request_cancellation(TaskRequestContext(ALICE, cancelled))
    for run in started:
        if run["task"] == asking:
            await go(control, fleet, run)
    ended = {t: (await terminal(manager, t)).status for t in [*ids, failing, asking, cancelled]}
    assert list(ended.values()).count(TaskStatus.COMPLETED) == 31
    assert ended[failing] is TaskStatus.FAILED
    assert ended[cancelled] is TaskStatus.CANCELLED

    async def scraped() -> dict[str, float] | None:
        # The worker counts an outcome right after writing it: wait for the last.
        now = samples((await get(metrics_port, "/metrics"))[1])
        done = moved(before, now, "redis_tasks_create_to_terminal_seconds_count")
        return now if done == 33 else None

    after = await wait_until(scraped, what="every outcome in the scrape")
    assert moved(before, after, "redis_tasks_tasks_claimed_total") == 33
    assert moved(before, after, "redis_tasks_tasks_completed_total") == 31
    assert moved(before, after, "redis_tasks_tasks_failed_total") == 1
    assert moved(before, after, "redis_tasks_tasks_cancelled_total") == 1
    assert moved(before, after, "redis_tasks_input_rounds_total") == 1
    assert moved(before, after, "redis_tasks_pickup_latency_seconds_count") == 33
    for outcome, count in (("completed", 31), ("failed", 1), ("cancelled", 1)):
        key = f"redis_tasks_run_duration_seconds_count{{outcome={outcome}}}"
        assert moved(before, after, key) == count, outcome
    for quiet in (
        "redis_tasks_tasks_created_total",  # created by this process, not the worker
        "redis_tasks_tasks_reclaimed_total",
        "redis_tasks_lease_losses_total",
        "redis_tasks_redis_errors_total",
        "redis_tasks_creates_refused_total",  # refusals count where create_task is called
        "redis_tasks_claims_settled_total{outcome=deferred}",  # no tenant has a cap here
    ):
        assert moved(before, after, quiet) == 0, quiet
    assert "redis_tasks_claims_settled_total{outcome=deferred}" in after
    assert after["redis_tasks_tasks_running"] == 0
    assert after["redis_tasks_backlog"] == 0
    assert after["redis_tasks_tenants_waiting"] == 0
    text = (await get(metrics_port, "/metrics"))[1]
    assert 'partition="0"' in text
    assert "redis_tasks_pending{" in text
    for task_id in [*ids, failing, asking, cancelled]:
        assert task_id not in text
    assert SECRET not in text
    assert "tool-" not in text

    # Redis goes away: reads fail, and the worker says so.
    server[0].process.kill()
    server[0].process.wait(timeout=30)

    async def unhealthy() -> tuple[int, str] | None:
        answer = await get(health_port, "/healthz")
        return answer if answer[0] == 503 else None

    status, reason = await wait_until(unhealthy, within=30, what="/healthz to turn 503")
    assert "read" in reason
    # ...and once Redis is back on the same port, reads resume and it is healthy again.
    server.append(start_redis_server(tmp_path / "again", port=server[0].port))
    await wait_until(healthy, within=30, what="/healthz to be 200 again")
    errors = samples((await get(metrics_port, "/metrics"))[1])
    assert errors["redis_tasks_redis_errors_total"] > 0

    # A graceful stop ends both endpoints with the worker.
    worker.signal(signal.SIGTERM)
    assert worker.process.wait(timeout=30) == 0
    for listening in (metrics_port, health_port):
        with pytest.raises(OSError):
            await asyncio.open_connection("127.0.0.1", listening)
