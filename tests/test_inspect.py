"""``RedisTaskManager.inspect`` / ``inspect_task`` and ``redis-tasks inspect``, on real servers.

A real worker runs a load whose every figure the test knows (tasks held by the
handler, waiting for input, failed, cancelled), and the inspection must report
exactly those: backlog, pending, consumers, leases and their fences, statuses,
terminal counts and first claims. It runs on the standalone server, the cluster,
Valkey 9.1 and Redis 8.2, and as the README's ACL user (whose line must allow
the stats and the inspection scripts).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from redis_tasks import (
    JsonRpcError,
    RedisTaskManager,
    TaskExecution,
    TaskFailed,
    TaskOrigin,
    TaskUpdateContext,
    Worker,
)
from redis_tasks._inspect_text import render_inspection, render_task
from redis_tasks._inspection import (
    PICKUP_BOUNDS_MS,
    PICKUP_FIELDS,
    Inspection,
    PickupHistogram,
    pickup_bucket,
)
from redis_tasks._redis import scripts as lua
from redis_tasks.testing import RedisServer

from .conftest import Backend, BackendFactory
from .helpers import ALICE, ELICIT, ELICIT_ANSWER, wait_until

SECRET = "s3cr3t-do-not-show"
SECRET_ORIGIN = TaskOrigin.from_persisted_string(
    json.dumps({"tool": "t", "arguments": {"token": SECRET}})
)
LEASE = timedelta(seconds=20)


@pytest.fixture(params=["redis", "acl", "cluster", "valkey", "redis8", "valkey-acl", "redis8-acl"])
def backend_name(request: pytest.FixtureRequest) -> str:
    """Every real server, and the README's ACL user on each standalone build."""
    name: str = request.param
    return name


@asynccontextmanager
async def running(manager: RedisTaskManager, handler: Any, **options: Any) -> AsyncIterator[Worker]:
    worker = Worker(manager, handler, lease=LEASE, **options)
    async with worker:
        runner = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            await worker.stop(grace=5)
            await runner


async def test_the_inspection_reports_a_known_load(make_backend: BackendFactory) -> None:
    async with make_backend() as backend:
        await _known_load(backend)


async def _known_load(backend: Backend) -> None:
    m = backend.manager
    assert isinstance(m, RedisTaskManager)
    release = asyncio.Event()

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        if execution.payload == b"ask":
            await execution.request_input({"q": ELICIT}, "asking")
        elif execution.payload == b"fail":
            raise TaskFailed(JsonRpcError(code=-32050, message=SECRET))
        await release.wait()
        return {"content": [{"type": "text", "text": SECRET}], "isError": False}

    # One task cancelled before any worker saw it: counted, never claimed.
    dropped = await m.create_task(ALICE, SECRET_ORIGIN, payload=SECRET.encode())
    await m.cancel_task(dropped.task_id)
    before = await m.inspect()
    assert (before.entries, before.backlog, before.pending, before.created) == (0, 0, 0, 1)
    assert before.statuses["cancelled"] == 1
    assert before.consumers() == []
    assert before.leases() == []

    held = [await m.create_task(ALICE, SECRET_ORIGIN, payload=b"hold") for _ in range(6)]
    asking = [await m.create_task(ALICE, SECRET_ORIGIN, payload=b"ask") for _ in range(2)]
    queued = await m.inspect()
    assert (queued.entries, queued.backlog, queued.pending) == (8, 8, 0)
    assert queued.oldest_waiting_ms is not None
    assert queued.oldest_waiting_ms >= 0

    async with running(m, handler, concurrency=16, name="inspect-w1"):

        async def settled_in() -> Inspection | None:
            seen = await m.inspect()
            return seen if seen.pending == 8 and seen.statuses["input_required"] == 2 else None

        seen = await wait_until(settled_in, what="8 leases, 2 of them waiting for input")
        assert (seen.entries, seen.backlog) == (8, 0)
        assert seen.statuses["working"] == 6
        assert [(c.name, c.pending) for c in seen.consumers()] == [("inspect-w1", 8)]
        leases = seen.leases()
        assert {lease.task_id for lease in leases} == {t.task_id for t in held + asking}
        assert not seen.sampled
        for lease in leases:
            assert lease.lease_owner == lease.consumer == "inspect-w1"
            assert lease.attempt == 1
            assert lease.deliveries == 1
            assert lease.remaining_ms is not None
            assert 0 < lease.remaining_ms <= LEASE / timedelta(milliseconds=1)
            one = await m.inspect_task(lease.task_id)
            assert one is not None
            assert (one.fence, one.attempts, one.lease_owner) == (lease.fence, 1, "inspect-w1")
            assert one.entry_state == "delivered"
            assert one.entry_consumer == "inspect-w1"
        assert seen.expiring(0) == []
        assert len(seen.expiring(round(LEASE / timedelta(milliseconds=1)))) == 8
        waiting = await m.inspect_task(asking[0].task_id)
        assert waiting is not None
        assert (waiting.status, waiting.input_requests) == ("input_required", 1)

        for task in asking:
            await m.update_task(TaskUpdateContext(ALICE, task.task_id, {"q": ELICIT_ANSWER}))
        failing = [await m.create_task(ALICE, SECRET_ORIGIN, payload=b"fail") for _ in range(2)]
        release.set()

        async def drained() -> Inspection | None:
            seen = await m.inspect()
            return seen if seen.entries == 0 else None

        done = await wait_until(drained, what="every task finished")
    assert done.statuses == {
        "working": 0,
        "input_required": 0,
        "completed": 8,
        "failed": 2,
        "cancelled": 1,
    }
    assert (done.created, done.ended, done.pending, done.backlog) == (11, 11, 0, 0)
    assert done.pickup.total == 10  # every task but the one cancelled before a claim
    assert done.pickup.quantile(0.5) is not None
    failed = await m.inspect_task(failing[0].task_id)
    assert failed is not None
    assert (failed.status, failed.error_code, failed.entry_id, failed.lease_owner) == (
        "failed",
        -32050,
        None,
        None,
    )
    # Nothing of the tasks' origins, payloads, results or errors' messages shows.
    shown = [
        repr(done),
        json.dumps(done.to_json()),
        repr(failed),
        json.dumps(failed.to_json()),
        *render_inspection(done, prefix="rt", expiring_ms=10_000),
        *render_task(failed),
    ]
    assert not [text for text in shown if SECRET in text]
    if done.cluster:
        assert len({p.node for p in done.partitions}) == 3  # read on each primary


async def test_the_scripts_never_read_task_data(standalone_backend: Backend) -> None:
    m = standalone_backend.manager
    assert isinstance(m, RedisTaskManager)
    task = await m.create_task(ALICE, SECRET_ORIGIN, payload=SECRET.encode())
    keys = m.keyspace.of_task(task.task_id)
    assert keys is not None
    partition = int(task.task_id.split(".")[0])
    claim = (await m.inspect([partition])).partitions[0]
    assert claim.entries == 1
    entry = await m.work_queue.claim_next(
        partition, consumer="c1", count=1, lease=LEASE, max_attempts=5
    )
    assert len(entry) == 1
    await m.request_input(task.task_id, {"q": ELICIT}, SECRET, fence=entry[0][1].fence)
    await m.update_task(TaskUpdateContext(ALICE, task.task_id, {"q": ELICIT_ANSWER}))
    replies = [
        await m._runner.run_raw(
            lua.inspect_queue(
                work=keys.work, stats=keys.stats, tag=m.keyspace.tag(partition), sample=10
            )
        ),
        await m._runner.run_raw(
            lua.inspect_task(task=keys.task, requests=keys.requests, work=keys.work)
        ),
    ]
    raw = repr(replies).encode()
    assert b"c1" in raw  # the lease owner is there
    for secret in (SECRET.encode(), b"Luca", b"Please enter"):  # origin, payload, answer, request
        assert secret not in raw


async def test_the_sample_bounds_the_leases(redis_server: RedisServer, prefix: str) -> None:
    async with RedisTaskManager.from_url(redis_server.url, prefix=prefix, partitions=1) as m:
        release = asyncio.Event()

        async def handler(execution: TaskExecution) -> dict[str, Any]:
            await release.wait()
            return {"content": [], "isError": False}

        for _ in range(5):
            await m.create_task(ALICE, SECRET_ORIGIN)
        async with running(m, handler, concurrency=8):

            async def five() -> bool:
                return (await m.inspect()).pending == 5

            await wait_until(five, what="five leases")
            few = await m.inspect(sample=2)
            assert (len(few.leases()), few.sampled, few.pending) == (2, True, 5)
            none = await m.inspect(sample=0)
            assert (none.leases(), none.sampled, len(none.consumers())) == ([], True, 0)
            with pytest.raises(ValueError, match="sample"):
                await m.inspect(sample=-1)
            release.set()
        assert await m.inspect_task("0.not-a-task-id") is None
        assert await m.inspect_task("no id at all") is None
        assert await m.inspect_task("0." + "A" * 24) is None


def test_the_pickup_histogram() -> None:
    assert len(PICKUP_FIELDS) == len(PICKUP_BOUNDS_MS) + 1
    assert [pickup_bucket(ms) for ms in (0, 1, 1.5, 2, 3, 60_000, 60_001)] == [
        0,
        0,
        1,
        1,
        2,
        len(PICKUP_BOUNDS_MS) - 1,
        len(PICKUP_BOUNDS_MS),
    ]
    empty = PickupHistogram()
    assert empty.total == 0
    assert empty.quantile(0.5) is None
    # 10 claims within 1 ms, 10 from 10 to 20 ms: the median sits at the first's top.
    counts = [0] * len(PICKUP_FIELDS)
    counts[0], counts[4] = 10, 10
    histogram = PickupHistogram(tuple(counts))
    assert histogram.quantile(0.5) == 1.0
    assert histogram.quantile(1.0) == 20.0
    assert histogram.quantile(0.75) == pytest.approx(15.0)
    slow = [0] * len(PICKUP_FIELDS)
    slow[-1] = 3
    assert PickupHistogram(tuple(slow)).quantile(0.99) == PICKUP_BOUNDS_MS[-1]
    later = histogram + PickupHistogram(tuple(slow))
    assert later.since(histogram) == PickupHistogram(tuple(slow))
    assert histogram.since(later) == histogram  # counters reset: all of it is new
    stats = dict(zip(PICKUP_FIELDS, counts, strict=True))
    assert PickupHistogram.from_stats(stats) == histogram


async def test_a_claim_counts_its_pickup_in_the_bucket_the_server_clock_gives(
    standalone_backend: Backend,
) -> None:
    """Enqueued at a known server time (the entry's ID), claimed now: the bucket is
    the one Python's pickup_bucket picks for that wait."""
    m = standalone_backend.manager
    assert isinstance(m, RedisTaskManager)
    client = standalone_backend.client
    assert isinstance(client, Redis)
    task = await m.create_task(ALICE, SECRET_ORIGIN)
    partition = int(task.task_id.split(".")[0])
    work = m.keyspace.work(partition)
    # The stream again with an entry stamped 3.5 s ago (a stream takes no ID below its
    # newest), as if the task had waited that long.
    seconds, micros = await client.time()
    old = f"{seconds * 1000 + micros // 1000 - 3_500}-0"
    await client.delete(work)
    await client.xadd(work, {"t": task.task_id}, id=old)
    await m.work_queue.ensure_groups([partition])
    await client.hset(m.keyspace.of_task(task.task_id).task, "wk", old)  # type: ignore[union-attr]
    ((_, claim),) = await m.work_queue.claim_next(
        partition, consumer="c1", count=1, lease=LEASE, max_attempts=5
    )
    assert claim.attempt == 1
    seen = (await m.inspect([partition])).partitions[0]
    (bucket,) = [i for i, n in enumerate(seen.pickup.counts) if n]
    assert seen.pickup.counts[bucket] == 1
    assert bucket == pickup_bucket(3_500) == pickup_bucket(3_600)  # the 5 s bucket
    await m.complete_task(task.task_id, {"content": [], "isError": False}, fence=claim.fence)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "redis_tasks", "inspect", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_the_command_line(redis_server: RedisServer, prefix: str) -> None:
    url = redis_server.url
    async with RedisTaskManager.from_url(url, prefix=prefix) as m:
        tasks = [await m.create_task(ALICE, SECRET_ORIGIN) for _ in range(3)]
    common = ("--redis-url", url, "--prefix", prefix)
    text = await asyncio.to_thread(_cli, *common)
    assert text.returncode == 0, text.stderr
    assert "backlog 3" in text.stdout
    assert "standalone" in text.stdout
    assert "partition  node" in text.stdout
    assert "consumers (0)" in text.stdout
    as_json = await asyncio.to_thread(_cli, *common, "--json")
    assert json.loads(as_json.stdout)["backlog"] == 3
    watch = await asyncio.to_thread(
        _cli, *common, "--json", "--watch", "0.2", "--count", "3", "--only-partitions", "0,1"
    )
    readings = [json.loads(line) for line in watch.stdout.splitlines()]
    assert len(readings) == 3
    assert all(len(r["partitions"]) == 2 for r in readings)
    watch_text = await asyncio.to_thread(_cli, *common, "--watch", "0.2", "--count", "2")
    assert watch_text.stdout.count("redis-tasks inspect") == 2
    assert "rates " in watch_text.stdout
    one = await asyncio.to_thread(_cli, *common, tasks[0].task_id, "--json")
    assert json.loads(one.stdout)["status"] == "working"
    one_text = await asyncio.to_thread(_cli, *common, tasks[0].task_id)
    assert "work entry" in one_text.stdout
    assert "waiting" in one_text.stdout
    for output in (text, as_json, watch, watch_text, one, one_text):
        assert SECRET not in output.stdout + output.stderr
    missing = await asyncio.to_thread(_cli, *common, "0." + "A" * 24)
    assert missing.returncode == 1
    assert "no such task" in missing.stderr
    for bad in (
        ("--sample", "-1"),
        ("--count", "2"),
        ("--watch", "0"),
        ("--only-partitions", "99"),
        ("--partitions", "0"),
    ):
        refused = await asyncio.to_thread(_cli, *common, *bad)
        assert refused.returncode == 2, bad
        assert "redis-tasks inspect:" in refused.stderr
    # An unreachable Redis: a one-line error that does not repeat the URL's password.
    down = await asyncio.to_thread(
        _cli, "--redis-url", "redis://u:hunter2@127.0.0.1:9/0", "--timeout", "0.5"
    )
    assert down.returncode == 1
    assert "Redis unavailable" in down.stderr
    assert "hunter2" not in down.stderr + down.stdout
    async with RedisTaskManager.from_url(url, prefix=prefix) as m:
        for task in tasks:
            await m.cancel_task(task.task_id)
