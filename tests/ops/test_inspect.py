"""``RedisTaskManager.inspect`` / ``inspect_task`` and ``redis-tasks inspect``, on real servers.

A real worker runs a load whose every figure the test knows (tasks held by the
handler, waiting for input, failed, cancelled), and the inspection must report
exactly those: backlog, pending, consumers, leases and their fences, statuses,
terminal counts and first claims. It runs on the standalone server, the cluster,
Valkey 9.1 and Redis 8.2, and as the README's ACL user (whose line must allow
the stats and the inspection scripts). A known tenant load (two tenants waiting,
one parked at its cap after a deferred claim, a quota's and a rate's refusals)
must show as exactly those figures, by digest, and a tenant key only where
``--tenant-key`` names it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from redis_tasks import (
    ClaimOutcome,
    JsonRpcError,
    Limits,
    QuotaExceededError,
    RedisTaskManager,
    RequestContext,
    TaskExecution,
    TaskFailed,
    TaskOrigin,
    TaskUpdateContext,
    Worker,
    task_ref,
)
from redis_tasks._ids import parse_task_id
from redis_tasks._inspection import (
    PICKUP_BOUNDS_MS,
    PICKUP_FIELDS,
    Inspection,
    PickupHistogram,
    TaskMatches,
    pickup_bucket,
)
from redis_tasks._inspection.text import render_inspection, render_task
from redis_tasks._redis import scripts as lua
from redis_tasks._redis.inspect import match_tasks
from redis_tasks._tenancy import home_partition, tenant_digest
from redis_tasks.testing import RedisServer
from tests.support.backends import SERVERS, Backend, BackendFactory, acl_user, server_url
from tests.support.helpers import ALICE, ELICIT, ELICIT_ANSWER, wait_until, whole_task_ids

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
    # With fair dispatch, all but a partition's first task wait in their tenant's queue.
    assert (queued.entries + queued.tenants.queued, queued.backlog, queued.pending) == (8, 8, 0)
    assert queued.statuses["working"] == 8
    assert queued.oldest_waiting_ms is not None
    assert queued.oldest_waiting_ms >= 0

    # Waiting handlers keep their leases here (park_after=None): the load is eight
    # leases, two of them waiting for input (a parked task is tests below).
    async with running(m, handler, concurrency=16, name="inspect-w1", park_after=None):

        async def settled_in() -> Inspection | None:
            seen = await m.inspect()
            return seen if seen.pending == 8 and seen.statuses["input_required"] == 2 else None

        seen = await wait_until(settled_in, what="8 leases, 2 of them waiting for input")
        assert (seen.entries, seen.backlog) == (8, 0)
        assert seen.statuses["working"] == 6
        assert [(c.name, c.pending) for c in seen.consumers()] == [("inspect-w1", 8)]
        leases = seen.leases()
        # A lease names its task by reference, never by ID (a capability).
        by_ref = {task_ref(t.task_id): t.task_id for t in held + asking}
        assert {lease.task for lease in leases} == set(by_ref)
        queue_view = [
            repr(seen),
            json.dumps(seen.to_json()),
            *render_inspection(seen, prefix="rt", expiring_ms=round(LEASE.total_seconds() * 1000)),
        ]
        assert all(ref in "\n".join(queue_view) for ref in by_ref)
        assert [text for text in queue_view if whole_task_ids(text)] == []
        assert not seen.sampled
        states = set()
        for lease in leases:
            assert lease.lease_owner == lease.consumer == "inspect-w1"
            assert lease.attempt == 1
            assert lease.deliveries == 1
            assert lease.remaining_ms is not None
            assert 0 < lease.remaining_ms <= LEASE / timedelta(milliseconds=1)
            one = await m.inspect_task(by_ref[lease.task])
            assert one is not None
            assert (one.fence, one.attempts, one.lease_owner) == (lease.fence, 1, "inspect-w1")
            # Delivered from the stream, or leased straight from its tenant's queue.
            assert one.entry_state in ("delivered", "leased")
            assert one.entry_consumer == "inspect-w1"
            states.add(one.entry_state)
            if one.entry_state == "leased":
                assert one.entry_id is None
                assert "leased to inspect-w1" in "\n".join(render_task(one))
        # A partition's first create went to the stream; the rest waited in their
        # tenant's queue, and the batch claim took them from there.
        if len({parse_task_id(t.task_id) for t in held + asking}) < len(held + asking):
            assert "leased" in states
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
                work=keys.work,
                stats=keys.stats,
                ring=m.keyspace.ring(partition),
                parked=m.keyspace.parked(partition),
                tag=m.keyspace.tag(partition),
                sample=10,
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
    """Created at a known server time (the record's ``ca``: pickup runs from the
    creation, since a task that waits in its tenant's queue gets its work entry only
    when dispatched), claimed now: the bucket is the one Python's pickup_bucket picks
    for that wait."""
    m = standalone_backend.manager
    assert isinstance(m, RedisTaskManager)
    client = standalone_backend.client
    assert isinstance(client, Redis)
    task = await m.create_task(ALICE, SECRET_ORIGIN)
    partition = int(task.task_id.split(".")[0])
    keys = m.keyspace.of_task(task.task_id)
    assert keys is not None
    # As if the task had been created 3.5 s ago, by the server's clock.
    seconds, micros = await client.time()
    await client.hset(keys.task, "ca", seconds * 1000 + micros // 1000 - 3_500)
    ((_, claim),) = await m.work_queue.claim_next(
        partition, consumer="c1", count=1, lease=LEASE, max_attempts=5
    )
    assert claim.attempt == 1
    seen = (await m.inspect([partition])).partitions[0]
    (bucket,) = [i for i, n in enumerate(seen.pickup.counts) if n]
    assert seen.pickup.counts[bucket] == 1
    assert bucket == pickup_bucket(3_500) == pickup_bucket(3_600)  # the 5 s bucket
    # Handed back (a stopping worker) and claimed again: still one pickup, not a second
    # one timed from the create (issue 52: one hand-back read as a pickup of a minute).
    await m.work_queue.release(task.task_id, fence=claim.fence)
    ((_, again),) = await m.work_queue.claim_next(
        partition, consumer="c2", count=1, lease=LEASE, max_attempts=5
    )
    assert again.attempt == 1  # a hand-back is no attempt
    assert sum((await m.inspect([partition])).partitions[0].pickup.counts) == 1
    await m.complete_task(task.task_id, {"content": [], "isError": False}, fence=again.fence)


def _cli_command(*args: str) -> subprocess.CompletedProcess[str]:
    """``redis-tasks ARGS...`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "redis_tasks", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return _cli_command("inspect", *args)


async def test_the_command_line(redis_server: RedisServer, prefix: str) -> None:
    url = redis_server.url
    async with RedisTaskManager.from_url(url, prefix=prefix) as m:
        tasks = [await m.create_task(ALICE, SECRET_ORIGIN) for _ in range(3)]
    common = ("--redis-url", url, "--prefix", prefix)
    text = await asyncio.to_thread(_cli, *common)
    assert text.returncode == 0, text.stderr
    # It only reads: the persistence warning (the test servers keep nothing on disk)
    # is for the processes that store tasks, and check reports it.
    assert "no_persistence" not in text.stderr
    assert "keeps no tasks on disk" not in text.stderr
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


# -- by reference ----------------------------------------------------------------------


async def _sharing_a_first_character(m: RedisTaskManager) -> tuple[list[str], str]:
    """Tasks created (in a manager of one partition) until two share the random part's
    first character, which 65 make sure of (the alphabet has 64); their IDs, and the
    prefix ``0.<that character>`` they share."""
    ids: list[str] = []
    while True:
        ids.append((await m.create_task(ALICE, SECRET_ORIGIN)).task_id)
        shared = [c for c, n in Counter(i[2] for i in ids).items() if n > 1]
        if shared:
            return ids, f"0.{shared[0]}"


@pytest.mark.parametrize("server", SERVERS)
async def test_a_reference_finds_the_tasks_it_names(
    request: pytest.FixtureRequest, server: str, prefix: str
) -> None:
    url = server_url(request, server)
    async with RedisTaskManager.from_url(url, prefix=prefix, partitions=1) as m:
        ids, start = await _sharing_a_first_character(m)
        assert await m.match_tasks(task_ref(ids[0])) == TaskMatches(0, (ids[0],), True)
        several = tuple(sorted(i for i in ids if i.startswith(start)))
        assert len(several) >= 2
        assert await m.match_tasks(start) == TaskMatches(0, several, True)
        # Bounded: past `limit` matches the scan stops, and says so.
        capped = await match_tasks(m._topology, m.keyspace, start, limit=1)
        assert capped == TaskMatches(0, several[:1], False)
        assert await m.match_tasks("5.AAAAAA") == TaskMatches(5, (), True)  # nothing there
        for neither in (ids[0], "0.", "0.*", "0.A?", "x.AAAAAA", "99999.A", ""):
            assert await m.match_tasks(neither) is None, neither
        for task_id in ids:
            await m.cancel_task(task_id)


async def test_the_command_line_takes_a_reference(redis_server: RedisServer, prefix: str) -> None:
    url = redis_server.url
    async with RedisTaskManager.from_url(url, prefix=prefix, partitions=1) as m:
        ids, start = await _sharing_a_first_character(m)
    common = ("--redis-url", url, "--prefix", prefix, "--partitions", "1")
    one = await asyncio.to_thread(_cli, *common, task_ref(ids[0]))
    assert one.returncode == 0, one.stderr
    assert "1 live task(s) match, in partition 0" in one.stdout
    assert whole_task_ids(one.stdout) == [ids[0]]  # the operator's view names the task
    assert "work entry" in one.stdout
    several = await asyncio.to_thread(_cli, *common, start, "--json")
    assert several.returncode == 0, several.stderr
    found = [json.loads(line)["task_id"] for line in several.stdout.splitlines()]
    assert found == sorted(i for i in ids if i.startswith(start))
    none = await asyncio.to_thread(_cli, *common, "0.-_-_-_")
    assert (none.returncode, none.stdout) == (1, "0 live task(s) match, in partition 0\n")
    bad = await asyncio.to_thread(_cli, *common, "task-7")
    assert bad.returncode == 2
    assert "not a task ID or reference" in bad.stderr
    # A partition the prefix does not have is a mistake, said (it matched "0 tasks").
    for beyond in ("99.nope", f"99.{ids[0].split('.')[1]}"):
        out_of_range = await asyncio.to_thread(_cli, *common, beyond)
        assert out_of_range.returncode == 2, beyond
        assert "no partition 99: this prefix has 1 (0-0)" in out_of_range.stderr
    for output in (one, several, none, bad):
        assert SECRET not in output.stdout + output.stderr
    # The ACL line's user has no +scan (SCAN lists every key name on the server).
    async with acl_user(redis_server, prefix) as (user_url, admin):
        refused = await asyncio.to_thread(
            _cli, "--redis-url", user_url, *common[2:], task_ref(ids[0])
        )
        assert refused.returncode == 1
        assert "needs +scan" in refused.stderr
        by_id = await asyncio.to_thread(_cli, "--redis-url", user_url, *common[2:], ids[0])
        assert by_id.returncode == 0, by_id.stderr
        await admin.acl_log_reset()  # the refusal was the point
    async with RedisTaskManager.from_url(url, prefix=prefix, partitions=1) as m:
        for task_id in ids:
            await m.cancel_task(task_id)


# -- tenants ---------------------------------------------------------------------------

#: Planted in every tenant key: it must show nowhere unless a key is named.
TENANT_SECRET = "t3nant-" + uuid.uuid4().hex
TENANT_LIMITS = Limits(
    max_running_tasks_per_tenant=1,
    max_open_tasks_per_tenant=4,
    tenant_create_rate=0.1,
    tenant_create_burst=6,
)
TENANT_PARTITIONS = 4


def digest(key: str) -> str:
    """A named tenant's digest (what ``--tenant-key`` computes)."""
    return tenant_digest(b"", b"", key.encode())


def _homed(stem: str, *, home: int | None = None, not_home: int | None = None) -> str:
    """A tenant key holding TENANT_SECRET whose home partition is ``home`` (any but
    ``not_home``): with a per-tenant limit, all of a tenant's tasks live there."""
    for n in itertools.count():
        key = f"{stem}-{TENANT_SECRET}-{n}"
        where = home_partition(digest(key), TENANT_PARTITIONS)
        if (home is None or where == home) and where != not_home:
            return key
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True)
class TenantLoad:
    """What :func:`_tenant_load` left in Redis."""

    partition: int  # named's and other's home partition
    named: str  # 1 running, 3 queued (one deferred back), parked at its cap of 1
    other: str  # 1 running, 1 queued, in the ring
    rater: str  # 6 created and cancelled, then refused by its rate (another partition)
    queued: tuple[str, ...]  # named's waiting task IDs


async def _tenant_load(m: RedisTaskManager) -> TenantLoad:
    named = _homed("acme")
    p = home_partition(digest(named), TENANT_PARTITIONS)
    other, rater = _homed("globex", home=p), _homed("initech", not_home=p)
    q = m.work_queue

    async def create(tenant: str) -> str:
        return (await m.create_task(ALICE, SECRET_ORIGIN, tenant=tenant)).task_id

    first = await create(named)  # nothing waits: straight into the stream
    ((entry, claim),) = await q.claim_next(p, consumer="w1", count=1, lease=LEASE, max_attempts=5)
    assert (entry.task_id, claim.outcome) == (first, ClaimOutcome.RUN)
    second = await create(named)  # the stream again; claimed while the first runs: deferred
    reader = q.reader(p, "w2", timedelta(milliseconds=200))
    try:
        (entry2,) = await reader.read(1)
    finally:
        await reader.close()
    assert entry2.task_id == second
    deferred = await q.claim(entry2, consumer="w2", lease=LEASE, max_attempts=5)
    assert deferred.outcome is ClaimOutcome.DEFERRED
    queued = [second, await create(named), await create(named)]  # behind it, parked
    others = [await create(other), await create(other)]  # the first straight to the stream
    ((entry3, claim3),) = await q.claim_next(p, consumer="w1", count=1, lease=LEASE, max_attempts=5)
    assert (entry3.task_id, claim3.outcome) == (others[0], ClaimOutcome.RUN)
    with pytest.raises(QuotaExceededError) as refused:
        await create(named)  # its fifth open task
    assert refused.value.reason == "quota"
    for _ in range(6):
        await m.cancel_task(await create(rater))
    with pytest.raises(QuotaExceededError) as refused:
        await create(rater)  # a seventh within the burst of six
    assert refused.value.reason == "rate"
    return TenantLoad(p, named, other, rater, tuple(queued))


def _figures(inspection: Inspection) -> list[tuple[str, int, int, bool]]:
    return [(f.tenant, f.backlog, f.running, f.parked) for f in inspection.tenants.by_backlog()]


async def test_tenants_show_by_digest_with_backlog_running_and_refusals(
    make_backend: BackendFactory,
) -> None:
    async with make_backend(limits=TENANT_LIMITS, partitions=TENANT_PARTITIONS) as backend:
        m = backend.manager
        assert isinstance(m, RedisTaskManager)
        load = await _tenant_load(m)
        named, other = digest(load.named), digest(load.other)
        seen = await m.inspect()
        tenants = seen.tenants
        assert (tenants.waiting, tenants.distinct, tenants.parked) == (2, 2, 1)
        assert (tenants.queued, tenants.deferred, tenants.refused) == (
            4,
            1,
            {"quota": 1, "rate": 1},
        )
        assert not tenants.sampled
        assert _figures(seen) == [(named, 3, 1, True), (other, 1, 1, False)]
        assert [(f.tenant, f.running) for f in tenants.by_running()] == [(named, 1), (other, 1)]
        assert all(f.oldest_ms is not None and f.oldest_ms >= 0 for f in tenants.by_backlog())
        # The backlog is what no worker read: here all of it waits in tenant queues.
        assert (seen.entries, seen.pending, seen.backlog) == (2, 2, 4)
        assert seen.statuses["working"] == 6
        assert seen.statuses["cancelled"] == 6
        home = seen.partitions[load.partition]
        assert (home.tenants.queued, home.tenants.ring, home.tenants.parked) == (4, 1, 1)
        assert home.backlog == 4
        assert home.oldest_waiting_ms is not None
        assert {lease.tenant for lease in home.leases} == {named, other}
        # The sample bounds the tenants read: the ring's next first, then the parked.
        few = (await m.inspect([load.partition], sample=1)).partitions[0].tenants
        assert ([q.tenant for q in few.queues], few.sampled, few.waiting) == ([other], True, 2)
        none = await m.inspect([load.partition], sample=0)
        assert (none.tenants.figures, none.tenants.sampled, none.backlog) == ({}, True, 4)
        one = await m.inspect_task(load.queued[0])
        assert one is not None
        assert (one.entry_state, one.tenant, one.entry_id) == ("queued", named, None)
        # A digest everywhere; the key only beside its digest, where it is named.
        names = {named: load.named}
        document = seen.to_json(names=names)["tenants"]
        assert [(f["tenant"], f["key"], f["backlog"]) for f in document["by_backlog"]] == [
            (named, load.named, 3),
            (other, None, 1),
        ]
        assert [(f["tenant"], f["key"], f["running"]) for f in document["named"]] == [
            (named, load.named, 1)
        ]
        text = render_inspection(seen, prefix="rt", expiring_ms=10_000, names=names)
        assert f"{named} ({load.named})" in "\n".join(text)
        assert f"tenant          {named} ({load.named})" in render_task(one, names)
        shown_named = json.dumps(document) + "\n".join(text) + "\n".join(render_task(one, names))
        assert load.other not in shown_named
        assert load.rater not in shown_named
        raw = [
            await m._runner.run_raw(
                lua.inspect_queue(
                    work=m.keyspace.work(p),
                    stats=m.keyspace.stats(p),
                    ring=m.keyspace.ring(p),
                    parked=m.keyspace.parked(p),
                    tag=m.keyspace.tag(p),
                    sample=100,
                )
            )
            for p in range(TENANT_PARTITIONS)
        ]
        unnamed = [
            repr(seen),
            repr(one),
            repr(raw),
            json.dumps(seen.to_json()),
            json.dumps(seen.to_json(names={})),
            json.dumps(one.to_json()),
            *render_inspection(seen, prefix="rt", expiring_ms=10_000),
            *render_task(one),
        ]
        assert [text for text in unnamed if TENANT_SECRET in text] == []
        assert [text for text in unnamed if SECRET in text] == []
        if seen.cluster:
            assert len({p.node for p in seen.partitions}) == 3


async def _tenant_load_for_the_cli(
    server: RedisServer, prefix: str
) -> tuple[TenantLoad, tuple[str, ...]]:
    """The known tenant load on ``server``, and the options that name it to a command."""
    async with RedisTaskManager.from_url(
        server.url, prefix=prefix, partitions=TENANT_PARTITIONS, limits=TENANT_LIMITS
    ) as m:
        load = await _tenant_load(m)
    options = ("--redis-url", server.url, "--prefix", prefix)
    return load, (*options, "--partitions", str(TENANT_PARTITIONS))


async def test_the_command_line_names_a_tenant_only_when_asked(
    redis_server: RedisServer, prefix: str
) -> None:
    load, common = await _tenant_load_for_the_cli(redis_server, prefix)
    named, other = digest(load.named), digest(load.other)
    text = await asyncio.to_thread(_cli, *common)
    assert text.returncode == 0, text.stderr
    assert "tenants    waiting 2 (counted per partition; 2 distinct)  parked 1  deferred 1" in (
        text.stdout
    )
    assert "refused quota 1  rate 1" in text.stdout
    assert "queued 4  backlog 4" in text.stdout
    by_backlog = text.stdout.split("tenants by backlog (2)\n", 1)[1].splitlines()
    assert by_backlog[1].split()[:3] == [named, "3", "1"]
    assert by_backlog[1].split()[-1] == "yes"  # parked
    assert by_backlog[2].split()[:3] == [other, "1", "1"]
    as_json = await asyncio.to_thread(_cli, *common, "--json")
    tenants = json.loads(as_json.stdout)["tenants"]
    assert [(f["tenant"], f["key"], f["backlog"], f["running"]) for f in tenants["by_backlog"]] == [
        (named, None, 3, 1),
        (other, None, 1, 1),
    ]
    assert (tenants["waiting"], tenants["deferred"], tenants["refused"]) == (
        2,
        1,
        {"quota": 1, "rate": 1},
    )
    task = await asyncio.to_thread(_cli, *common, load.queued[1])
    assert f"tenant          {named}\n" in task.stdout
    assert "queued: in its tenant's queue" in task.stdout
    for output in (text, as_json, task):
        assert TENANT_SECRET not in output.stdout + output.stderr
    # Named: the key beside its digest, and in a table of its own; no other key shows.
    asked = ("--tenant-key", load.named, "--tenant-key", "nobody-" + TENANT_SECRET)
    named_text = await asyncio.to_thread(_cli, *common, *asked)
    assert f"{named} ({load.named})  3" in named_text.stdout
    assert "named tenants (2)" in named_text.stdout
    assert f"{digest('nobody-' + TENANT_SECRET)} (nobody-{TENANT_SECRET})  0" in named_text.stdout
    named_json = await asyncio.to_thread(_cli, *common, "--json", *asked)
    document = json.loads(named_json.stdout)["tenants"]
    assert [f["key"] for f in document["by_backlog"]] == [load.named, None]
    assert [(f["key"], f["backlog"]) for f in document["named"]] == [
        (load.named, 3),
        ("nobody-" + TENANT_SECRET, 0),
    ]
    named_task = await asyncio.to_thread(_cli, *common, load.queued[1], "--json", *asked)
    assert json.loads(named_task.stdout)["tenant_key"] == load.named
    for output in (named_text, named_json, named_task):
        assert load.other not in output.stdout + output.stderr
        assert load.rater not in output.stdout + output.stderr


async def test_the_tenants_command_shows_each_tenant_s_open_running_queued_refused_and_plan(
    make_backend: BackendFactory,
) -> None:
    """``redis-tasks tenants`` (and ``inspect_tenants``): the known tenant load, tenant
    by tenant from its own keys: open tasks (its quota's count), running (its cap's),
    queued, refusals by reason over the last day, and the plan its creates kept; by
    digest, a key only where ``--tenant-key`` names it."""
    async with make_backend(limits=TENANT_LIMITS, partitions=TENANT_PARTITIONS) as backend:
        m = backend.manager
        assert isinstance(m, RedisTaskManager)
        load = await _tenant_load(m)
        named, other, rater = digest(load.named), digest(load.other), digest(load.rater)
        report = await m.inspect_tenants()
        assert report.complete
        rows = {
            t: (r.open, r.running, r.queued, dict(r.refused), r.waiting, r.parked)
            for t, r in report.rows.items()
        }
        assert rows == {
            named: (4, 1, 3, {"quota": 1, "rate": 0}, False, True),
            other: (2, 1, 1, {"quota": 0, "rate": 0}, True, False),
            rater: (0, 0, 0, {"quota": 0, "rate": 1}, False, False),
        }
        assert report.rows[named].plan == {
            "name": None,
            "weight": 1,
            "max_running_tasks": 1,
            "max_open_tasks": 4,
            "create_rate": 0.1,
            "create_burst": 6,
        }
        assert [r.tenant for r in report.top("open", 10)] == [named, other]
        assert [r.tenant for r in report.top("refused", 10)] == [named, rater]
        assert [r.tenant for r in report.top("running", 1)] == [named]
        with pytest.raises(ValueError, match="sample"):
            await m.inspect_tenants(sample=0)
        raw = repr(report.to_json()) + repr(report.rows)
        assert TENANT_SECRET not in raw


async def test_the_tenants_command_names_a_tenant_only_when_asked(
    redis_server: RedisServer, prefix: str
) -> None:
    load, common = await _tenant_load_for_the_cli(redis_server, prefix)
    named, other = digest(load.named), digest(load.other)
    text = await asyncio.to_thread(_cli_command, "tenants", *common)
    assert text.returncode == 0, text.stderr
    assert "tenants: 3 over 4 partition(s)" in text.stdout
    totals = "open 6, running 2, queued 4, waiting for input 0; refused in the last day: quota 1"
    assert f"{totals}, rate 1" in text.stdout
    by_open = text.stdout.split("top 10 by open:\n", 1)[1].splitlines()
    # tenant, open, running, queued, waiting for input, refused, state
    assert by_open[1].split()[:7] == [named, "4", "1", "3", "0", "1", "parked"]
    assert "w1 open<=4 run<=1 0.1/s burst 6" in by_open[1]
    as_json = json.loads(
        (await asyncio.to_thread(_cli_command, "tenants", *common, "--json")).stdout
    )
    assert [(t["tenant"], t["key"], t["open"]) for t in as_json["top"]["open"]] == [
        (named, None, 4),
        (other, None, 2),
    ]
    named_text = await asyncio.to_thread(
        _cli_command, "tenants", *common, "--tenant-key", load.named
    )
    assert f"[key {load.named!r}]" in named_text.stdout
    for output in (text, named_text):
        assert load.other not in output.stdout + output.stderr
        assert load.rater not in output.stdout + output.stderr
    assert TENANT_SECRET not in text.stdout + json.dumps(as_json)
    refused = await asyncio.to_thread(_cli_command, "tenants", *common, "--top", "0")
    assert refused.returncode == 2
    assert "--top must be 1 to 1000" in refused.stderr


async def test_the_tenants_command_finds_a_binding_s_tenant(
    redis_server: RedisServer, prefix: str
) -> None:
    """Tasks created without a tenant key count against their binding: ``--binding
    ENDPOINT=PARTITION_KEY`` names that tenant's row (``--tenant-key alice`` showed an
    empty one, issue 52)."""
    quota = Limits(max_open_tasks_per_tenant=10)  # a quota: open tasks are counted
    async with RedisTaskManager.from_url(
        redis_server.url, prefix=prefix, partitions=1, limits=quota
    ) as m:
        for _ in range(2):
            await m.create_task(ALICE, SECRET_ORIGIN)
        await m.create_task(RequestContext("/mcp"), SECRET_ORIGIN)  # the anonymous partition
    common = ("--redis-url", redis_server.url, "--prefix", prefix, "--partitions", "1")
    text = await asyncio.to_thread(
        _cli_command, "tenants", *common, "--binding", "/mcp=alice", "--binding", "/mcp", "--json"
    )
    assert text.returncode == 0, text.stderr
    rows = {t["key"]: t["open"] for t in json.loads(text.stdout)["top"]["open"]}
    assert rows == {"/mcp=alice": 2, "/mcp": 1}
    bad = await asyncio.to_thread(_cli_command, "tenants", *common, "--binding", "=alice")
    assert bad.returncode == 2
    assert "--binding needs an endpoint" in bad.stderr


async def test_a_parked_task_shows_apart_in_every_view(make_backend: BackendFactory) -> None:
    """A task waiting for its client's input that no worker holds: ``inspect TASK``
    says so (and how many times it was parked), the partition's summary and the
    tenant's row count it apart from the tenants parked at their cap; its answer
    takes it out of every count."""
    async with make_backend(partitions=1) as backend:
        m = backend.manager
        assert isinstance(m, RedisTaskManager)
        task_id = (await m.create_task(ALICE, SECRET_ORIGIN)).task_id
        ((entry, claim),) = await m.work_queue.claim_next(
            0, consumer="w1", count=1, lease=LEASE, max_attempts=5
        )
        assert entry.task_id == task_id
        await m.request_input(task_id, {"q": ELICIT}, fence=claim.fence)
        assert await m.work_queue.park(task_id, fence=claim.fence)
        seen = await m.inspect_task(task_id)
        assert seen is not None
        assert (seen.entry_state, seen.parks, seen.lease_owner) == ("parked", 1, None)
        assert "parked: waiting for input, held by no worker" in "\n".join(render_task(seen))
        inspection = await m.inspect()
        assert inspection.tenants.waiting_for_input == 1
        assert inspection.tenants.parked == 0  # no tenant at its cap
        text = render_inspection(inspection, prefix="rt", expiring_ms=10_000)
        assert "tasks waiting for input 1" in "\n".join(text)
        report = await m.inspect_tenants()
        assert [r.waiting_for_input for r in report.rows.values()] == [1]
        assert report.to_json()["waiting_for_input"] == 1
        assert (await m.work_queue.depth(0)).waiting_for_input == 1
        await m.update_task(TaskUpdateContext(ALICE, task_id, {"q": ELICIT_ANSWER}))
        assert (await m.inspect()).tenants.waiting_for_input == 0
        assert (await m.work_queue.depth(0)).waiting_for_input == 0
        seen = await m.inspect_task(task_id)
        assert seen is not None
        assert seen.entry_state != "parked"
