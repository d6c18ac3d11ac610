"""Tenants: fair dispatch, the open-task quota, the create rate and the concurrency cap.

Each test runs on the in-memory reference, a standalone redis-server and the 3+3
cluster, through the contract and the :class:`WorkQueue` alone, with one
partition (so every task of a test meets in one ring) unless it says otherwise.
Dispatch order is asserted by order, never by timing: a batch claim
(``claim_next``) of one task at a time shows the order the ring serves tenants in.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from redis.asyncio import Redis

from redis_tasks import (
    ClaimOutcome,
    InMemoryTaskManager,
    LimitExceededError,
    Limits,
    PlanPolicy,
    QuotaExceededError,
    RedisTaskManager,
    RequestContext,
    TaskExecution,
    TaskRequestContext,
    TaskStatus,
    TenantPlan,
    ValidationError,
    Worker,
)
from redis_tasks._lease import Claim
from redis_tasks._record import FIELD_WORK_ENTRY
from redis_tasks._redis.lua_source import assemble
from redis_tasks._signals import newcomer_signal
from redis_tasks._tenancy import jitter, stride, tenant_digest
from redis_tasks._work_queue import WorkEntry, WorkerBackend, WorkQueue
from redis_tasks.testing import RedisServer
from tests.support.backends import SERVERS, Backend, server_url
from tests.support.helpers import ALICE, BOB, ORIGIN, wait_until

LONG = timedelta(seconds=30)
FLOOD = RequestContext("/mcp", "user:flood")

Build = Callable[..., Any]


class Clock:
    """The in-memory manager's clock, moved by the test (Redis runs on its own)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.time() + self.offset


@pytest.fixture(params=["memory", "embedded", *SERVERS])
def make(request: pytest.FixtureRequest, prefix: str) -> Build:
    """``make(limits=..., partitions=1)``: an entered manager of the parametrised backend."""
    url = None if request.param == "memory" else server_url(request, request.param)

    @asynccontextmanager
    async def build(
        limits: Limits | None = None,
        partitions: int = 1,
        clock: Clock | None = None,
        plans: PlanPolicy | None = None,
    ) -> AsyncIterator[Backend]:
        manager: WorkerBackend
        if url is None:
            manager = InMemoryTaskManager(
                limits=limits, partitions=partitions, clock=clock or Clock(), plans=plans
            )
        else:
            manager = RedisTaskManager.from_url(
                url, prefix=prefix, partitions=partitions, limits=limits, plans=plans
            )
        async with manager:
            subject = Backend(request.param, manager, prefix)
            yield subject
            if subject.is_redis:
                assert await subject.immortal_keys() == []

    return build


async def create(m: WorkerBackend, who: RequestContext = FLOOD, **options: Any) -> str:
    return (await m.create_task(who, ORIGIN, **options)).task_id


async def next_one(m: WorkerBackend, consumer: str = "w1") -> tuple[WorkEntry, Claim] | None:
    """One batch claim of one task: what the ring serves next (``None``: nothing)."""
    claimed = await m.work_queue.claim_next(
        0, consumer=consumer, count=1, lease=LONG, max_attempts=5
    )
    return claimed[0] if claimed else None


async def admits(m: WorkerBackend, who: RequestContext) -> bool:
    """Whether a create of ``who``'s is admitted now (one is then stored)."""
    try:
        await create(m, who)
    except QuotaExceededError:
        return False
    return True


async def served(m: WorkerBackend, n: int) -> list[str]:
    """The task IDs of the next ``n`` tasks claimed one at a time, in order."""
    out = []
    for _ in range(n):
        got = await next_one(m)
        assert got is not None, "the queue ran dry"
        assert got[0].task_id is not None
        out.append(got[0].task_id)
    return out


# -- fair dispatch ----------------------------------------------------------------------


async def test_a_tenant_alone_is_served_in_arrival_order_in_whole_batches(make: Build) -> None:
    async with make() as b:
        m = b.manager
        created = [await create(m) for _ in range(10)]
        depth = await m.work_queue.depth(0)
        # The first went straight into the stream (nothing waited); the rest wait.
        assert (depth.entries, depth.queued, depth.tenants, depth.backlog) == (1, 9, 1, 10)
        batch = await m.work_queue.claim_next(0, consumer="w1", count=8, lease=LONG, max_attempts=5)
        assert [e.task_id for e, _ in batch] == created[:8]
        assert all(c.outcome is ClaimOutcome.RUN for _, c in batch)
        assert await served(m, 2) == created[8:]
        assert await next_one(m) is None
        depth = await m.work_queue.depth(0)
        assert (depth.queued, depth.tenants, depth.backlog) == (0, 0, 0)


async def test_a_tenant_that_arrives_behind_a_flood_is_served_within_one_round(
    make: Build,
) -> None:
    async with make() as b:
        m = b.manager
        flood = [await create(m) for _ in range(30)]
        late = [await create(m, BOB) for _ in range(3)]
        order = await served(m, 33)
        # Both tenants' tasks in their own arrival order...
        assert [t for t in order if t in flood] == flood
        assert [t for t in order if t in late] == late
        # ...and the late tenant's first within the first round, then every other one:
        # not after the flood's 30, as first come, first served would have it.
        positions = [order.index(t) for t in late]
        assert positions[0] <= 2
        assert positions[1] - positions[0] == positions[2] - positions[1] == 2


async def test_weights_share_the_workers_three_to_one(make: Build) -> None:
    async with make() as b:
        m = b.manager
        heavy: set[str] = set()
        for _ in range(40):
            heavy.add(await create(m, RequestContext("/mcp", "plan:pro"), weight=3))
            await create(m, BOB)
        order = await served(m, 40)
        # 3 : 1 over the window, within one task (the first went straight in).
        assert abs(sum(t in heavy for t in order) - 30) <= 1, order


async def test_a_named_tenant_groups_tasks_of_different_bindings(make: Build) -> None:
    async with make() as b:
        m = b.manager
        # Alice's and Bob's tasks count against one organisation, a third party
        # against itself: two tenants, served alternately, not three.
        org = [await create(m, who, tenant="org:acme") for who in (ALICE, BOB) * 5]
        other = [await create(m, FLOOD) for _ in range(5)]
        order = await served(m, 10)
        assert sum(t in other for t in order) >= 4, order
        assert [t for t in order if t in org] == org[: len([t for t in order if t in org])]


async def test_tenant_and_weight_are_checked_and_a_bad_one_stores_nothing(make: Build) -> None:
    async with make(limits=Limits(max_tenant_bytes=8, max_tenant_weight=5)) as b:
        m = b.manager
        before = await b.dump()
        for bad, error in (
            ({"tenant": 7}, ValidationError),
            ({"tenant": "x" * 9}, LimitExceededError),
            ({"tenant": "\ud800"}, ValidationError),
            ({"weight": 0}, LimitExceededError),
            ({"weight": 6}, LimitExceededError),
            ({"weight": True}, ValidationError),
            ({"weight": 2.0}, ValidationError),
        ):
            with pytest.raises(error) as raised:
                await m.create_task(ALICE, ORIGIN, **bad)
            assert "x" * 9 not in str(raised.value)
        assert await b.dump() == before
        await create(m, tenant="é" * 4, weight=5)  # 8 bytes: the bound itself


async def test_no_tenant_key_or_partition_key_is_stored_in_redis(make: Build) -> None:
    secret = "tenant-key-7f3a9c"
    async with make(limits=Limits(max_open_tasks_per_tenant=5)) as b:
        if not b.is_redis:
            pytest.skip("the in-memory record keeps the endpoint and partition key")
        m = b.manager
        await create(m, RequestContext("/mcp", "pk-5e2b1d"), tenant=secret)
        await create(m, RequestContext("/mcp", "pk-5e2b1d"))
        await create(m, RequestContext("/mcp", "pk-5e2b1d"), tenant=secret)
        blob = repr(await b.dump()) + repr(await b.all_keys())
        assert secret not in blob
        assert "pk-5e2b1d" not in blob


# -- plans ------------------------------------------------------------------------------------


FREE = TenantPlan(max_open_tasks=2, max_running_tasks=1, create_rate=2.0)
PRO = TenantPlan(max_open_tasks=5, max_running_tasks=50, create_rate=100.0, weight=3)


async def test_each_plan_gives_its_tenants_their_own_limits(make: Build) -> None:
    """A table of plans: "free" and "pro" tenants each get their plan's quota, an
    unknown tenant the default plan (the per-tenant fields of Limits), and a create
    that names a plan gets that one, whatever its tenant's."""
    plans = {"org:free": FREE, "org:pro": PRO}
    async with make(limits=Limits(max_open_tasks_per_tenant=1), plans=plans) as b:
        m = b.manager
        admitted = {
            name: sum([await admits_as(m, name) for _ in range(7)])
            for name in ("org:free", "org:pro", "org:other")
        }
        assert admitted == {"org:free": 2, "org:pro": 5, "org:other": 1}
        # Named by the call: the pro plan for a tenant the table does not know.
        assert await admits_as(m, "org:trial", plan=PRO)
        assert await admits_as(m, "org:trial", plan=PRO)
        # A task that ends frees its place under its plan too.
        with pytest.raises(QuotaExceededError):
            await create(m, tenant="org:free")


async def admits_as(m: WorkerBackend, tenant: str, **options: Any) -> bool:
    """Whether a create for ``tenant`` is admitted now."""
    try:
        await create(m, tenant=tenant, **options)
    except QuotaExceededError:
        return False
    return True


async def test_a_plan_that_changes_applies_from_the_next_create(make: Build) -> None:
    """The policy is asked at every create: a tenant moved from free to pro may create
    up to pro's quota at once; its weight orders the dispatches after its next
    create; moved back to a weight-1 plan, its next create says so too (not only
    once its queue has drained)."""
    current = {"org:a": FREE}

    def policy(tenant: str | None) -> TenantPlan | None:
        return current.get(tenant or "")

    async with make(plans=policy) as b:
        m = b.manager
        a = [await create(m, tenant="org:a") for _ in range(2)]
        with pytest.raises(QuotaExceededError):
            await create(m, tenant="org:a")
        current["org:a"] = TenantPlan(max_open_tasks=40, weight=3)
        a += [await create(m, tenant="org:a") for _ in range(10)]
        bob = [await create(m, BOB) for _ in range(12)]
        order = await served(m, 12)
        # The first is the stream's; then about three of A's for one of Bob's.
        assert order[0] == a[0]
        assert sum(t in a for t in order[1:]) >= 7
        current["org:a"] = TenantPlan(max_open_tasks=40)  # weight 1 again
        a.append(await create(m, tenant="org:a"))
        rest = await served(m, 8)
        assert 3 <= sum(t in a for t in rest) <= 5, rest
        assert set(bob) & set(rest)


async def test_a_bad_plan_is_refused_at_create_and_stores_nothing(make: Build) -> None:
    """A policy's bad output (or a bad plan named by the call) raises a typed error
    that names no tenant, and stores nothing; a bad table is refused when the
    manager is made."""
    bad: dict[str, object] = {}

    def policy(tenant: str | None) -> Any:
        return bad.get(tenant or "")

    async with make(limits=Limits(max_tenant_weight=10), plans=policy) as b:
        m = b.manager
        before = await b.dump()
        for plan, error in (
            (TenantPlan(max_open_tasks=-1), LimitExceededError),
            (TenantPlan(max_running_tasks=0), LimitExceededError),
            (TenantPlan(weight=11), LimitExceededError),
            (TenantPlan(create_rate=1e9), LimitExceededError),
            (TenantPlan(create_burst=3), ValidationError),
            (TenantPlan(max_open_tasks=2.5), ValidationError),  # type: ignore[arg-type]
            ("pro", ValidationError),
        ):
            bad["org:secret-key"] = plan
            with pytest.raises(error) as raised:
                await create(m, tenant="org:secret-key")
            assert "secret" not in str(raised.value)
            with pytest.raises(error):
                await create(m, plan=plan)
        assert await b.dump() == before
    with pytest.raises(LimitExceededError):
        InMemoryTaskManager(plans={"org:x": TenantPlan(weight=500)})


# -- the open-task quota --------------------------------------------------------------------


async def test_the_open_task_quota_refuses_the_next_task_and_stores_nothing(
    make: Build,
) -> None:
    async with make(limits=Limits(max_open_tasks_per_tenant=3)) as b:
        m = b.manager
        mine = [await create(m, ALICE) for _ in range(3)]
        before = await b.dump()
        with pytest.raises(QuotaExceededError) as refused:
            await create(m, ALICE)
        assert (refused.value.reason, refused.value.retry_after) == ("quota", None)
        assert "alice" not in str(refused.value)
        assert _with_stats_of(before, await b.dump()) == before
        await create(m, BOB)  # another tenant is not held back
        await create(m, ALICE, tenant="another")  # nor is another tenant of Alice's
        # A task that ends frees its place.
        await m.complete_task(mine[0], {})
        await create(m, ALICE)
        with pytest.raises(QuotaExceededError):
            await create(m, ALICE)
        await m.cancel_task(mine[1])
        await create(m, ALICE)


async def test_cancelling_queued_tasks_frees_their_places_at_once(make: Build) -> None:
    """A tenant at its quota of 10, every task waiting for a worker, asks to cancel
    them: each ends cancelled there and then, leaves its tenant's queue, and frees
    its place, so 10 more are admitted at once; no worker ever meets the first 10."""
    async with make(limits=Limits(max_open_tasks_per_tenant=10)) as b:
        m = b.manager
        first = [await create(m, ALICE) for _ in range(10)]
        assert not await admits(m, ALICE)
        assert (await m.work_queue.depth(0)).queued == 9  # the first is in the stream
        for task_id in first:
            await m.request_cancellation(TaskRequestContext(ALICE, task_id))
            task = await m.find_task(TaskRequestContext(ALICE, task_id))
            assert task is not None
            assert task.status is TaskStatus.CANCELLED
        depth = await m.work_queue.depth(0)
        assert (depth.entries, depth.queued, depth.tenants) == (0, 0, 0)
        again = [await create(m, ALICE) for _ in range(10)]
        assert not await admits(m, ALICE)
        assert await served(m, 10) == again
        assert await next_one(m) is None


async def test_tenant_queues_go_with_their_tasks_with_no_worker_running(make: Build) -> None:
    """200 tenants with every limit on each leave a task to expire while no worker
    runs: past their retention only per-partition keys remain (no queue, record,
    grant, open, run or rate key). A worker that comes later finds nothing to run and
    leaves nothing counted as queued or waiting."""
    limits = Limits(
        max_open_tasks_per_tenant=5, max_running_tasks_per_tenant=2, tenant_create_rate=50.0
    )
    async with make(limits=limits, partitions=4) as b:
        if not b.is_redis:
            pytest.skip("key expiry is Redis's (the reference drops a queue when it meets it)")
        m = b.manager
        for j in range(200):
            await create(m, tenant=f"org:{j}", ttl=timedelta(seconds=1))
        assert sum([(await m.work_queue.depth(p)).queued for p in range(4)]) > 150

        async def only_partition_keys() -> bool:
            keys = await b.all_keys()
            return bool(keys) and all(m.keyspace.is_partition_key(k) for k in keys)

        await wait_until(only_partition_keys, within=15, what="every tenant key to expire")
        started: list[str] = []

        async def handler(execution: TaskExecution) -> dict[str, Any]:
            started.append(execution.task_id)
            return {}

        async with Worker(m, handler, concurrency=8) as worker:
            running = asyncio.ensure_future(worker.run())

            async def nothing_waits() -> bool:
                depths = [await m.work_queue.depth(p) for p in range(4)]
                return all((d.queued, d.tenants, d.backlog) == (0, 0, 0) for d in depths)

            await wait_until(nothing_waits, within=15, what="the ring to be found empty")
            await worker.stop()
            await running
        assert started == []


async def test_a_task_that_expires_frees_its_place_in_the_quota(make: Build) -> None:
    clock = Clock()
    async with make(limits=Limits(max_open_tasks_per_tenant=2), clock=clock) as b:
        m = b.manager
        await create(m, ALICE, ttl=timedelta(milliseconds=300))
        await create(m, ALICE)
        with pytest.raises(QuotaExceededError):
            await create(m, ALICE)
        clock.offset += 1.0  # the in-memory clock; Redis expires it on its own
        await wait_until(partial(admits, m, ALICE), within=5, what="the expired task's place")


# -- the create rate ------------------------------------------------------------------------


async def test_the_create_rate_refuses_a_burst_beyond_its_size_with_retry_after(
    make: Build,
) -> None:
    # One create a second: the three creates and the dump before the fourth must take
    # less than the second a token takes to come back (at 4 a second, the embedded
    # Redis on a loaded machine took longer than 250 ms once, and the fourth was let in).
    limits = Limits(tenant_create_rate=1, tenant_create_burst=3)
    async with make(limits=limits) as b:
        m = b.manager
        for _ in range(3):
            await create(m, ALICE)
        before = await b.dump()
        with pytest.raises(QuotaExceededError) as refused:
            await create(m, ALICE)
        assert refused.value.reason == "rate"
        wait = refused.value.retry_after
        assert wait is not None
        assert timedelta(0) < wait <= timedelta(seconds=1)
        assert _with_stats_of(before, await b.dump()) == before
        await create(m, BOB)  # another tenant has its own bucket
        await wait_until(partial(admits, m, ALICE), within=5, what="the create rate's room")


# -- the concurrency cap ---------------------------------------------------------------------


async def test_a_capped_tenant_runs_at_most_its_cap_and_holds_nobody_back(make: Build) -> None:
    async with make(limits=Limits(max_running_tasks_per_tenant=2)) as b:
        m = b.manager
        q = m.work_queue
        capped = [await create(m, ALICE) for _ in range(5)]
        others = [await create(m, BOB) for _ in range(2)]  # the cap is every tenant's
        batch = await q.claim_next(0, consumer="w1", count=10, lease=LONG, max_attempts=5)
        running = [e.task_id for e, c in batch if c.outcome is ClaimOutcome.RUN]
        assert [t for t in running if t in capped] == capped[:2]
        assert [t for t in running if t in others] == others
        assert len(running) == 4
        # The capped tenant waits parked: a claim finds nothing more of it.
        assert await q.claim_next(0, consumer="w1", count=10, lease=LONG, max_attempts=5) == []
        depth = await q.depth(0)
        assert (depth.queued, depth.tenants) == (3, 1)
        # One of its tasks ends: one more may run, and only one.
        await m.complete_task(capped[0], {})
        batch = await q.claim_next(0, consumer="w1", count=10, lease=LONG, max_attempts=5)
        assert [(e.task_id, c.outcome) for e, c in batch] == [(capped[2], ClaimOutcome.RUN)]


async def test_a_tenant_parked_by_the_dispatch_that_fills_its_cap_waits_for_its_leases(
    make: Build,
) -> None:
    """A dispatch that gives a capped tenant its whole room parks it before its tasks
    are claimed (no lease of it is live yet): it waits for their leases' deadline, not
    until now, when the next dispatch took it back into the ring only to park it."""
    async with make(limits=Limits(max_running_tasks_per_tenant=2)) as b:
        m = b.manager
        q = m.work_queue
        await create(m, BOB)  # straight into the stream: alice's tasks then queue
        for _ in range(3):
            await create(m, ALICE)
        started = time.time()
        batch = await q.claim_next(0, consumer="w1", count=3, lease=LONG, max_attempts=5)
        assert [c.outcome for _, c in batch] == [ClaimOutcome.RUN] * 3
        (score,) = await _parked_scores(b)
        assert score >= (started + LONG.total_seconds()) * 1000 - 1000


async def _parked_scores(b: Backend) -> list[float]:
    """Partition 0's parked tenants' scores (when each is looked at again, ms)."""
    manager = b.manager
    if isinstance(manager, RedisTaskManager):
        client = b.client
        assert client is not None
        parked = await client.zrange(manager.keyspace.parked(0), 0, -1, withscores=True)
        return [float(pair[1]) for pair in parked]
    return [float(at) for at in manager.work_queue.partition(0).tenants.parked.values()]


async def test_a_ring_whose_head_is_all_at_its_cap_serves_the_tenant_behind_it_at_once(
    make: Build,
) -> None:
    """Twenty tenants at their cap of one joined the ring ahead of a tenant that may
    run (their passes are lower: chosen by their jitter). A batch claim of one parks
    them all and dispatches that tenant's task in the same call: it read only the
    two lowest once, found both at their cap and dispatched nothing, with the worker
    left to find the task at its next probe, up to a block period later."""
    stride_1 = stride(1)
    by_place = sorted(
        (f"org:{n}" for n in range(60)),
        key=lambda key: jitter(tenant_digest(b"", b"", key.encode()), 0, stride_1),
    )
    capped, free = by_place[:20], by_place[-1]
    async with make(limits=Limits(max_running_tasks_per_tenant=1)) as b:
        m = b.manager
        q = m.work_queue
        for key in capped:
            await create(m, tenant=key)
        running = await q.claim_next(0, consumer="w1", count=20, lease=LONG, max_attempts=5)
        assert [c.outcome for _, c in running] == [ClaimOutcome.RUN] * 20
        first = await create(m, tenant="org:first")  # straight into the stream: the
        for key in capped:  # others then wait in the ring, each at its cap
            await create(m, tenant=key)
        waiting = await create(m, tenant=free)
        ((entry, _),) = await q.claim_next(0, consumer="w1", count=1, lease=LONG, max_attempts=5)
        assert entry.task_id == first
        ((entry, claim),) = await q.claim_next(
            0, consumer="w1", count=1, lease=LONG, max_attempts=5
        )
        assert (entry.task_id, claim.outcome) == (waiting, ClaimOutcome.RUN)
        assert await q.claim_next(0, consumer="w1", count=5, lease=LONG, max_attempts=5) == []
        depth = await q.depth(0)
        assert (depth.queued, depth.tenants) == (20, 20)


async def test_a_capped_task_claimed_past_the_cap_is_deferred_back_to_its_queue(
    make: Build,
) -> None:
    async with make(limits=Limits(max_running_tasks_per_tenant=1)) as b:
        m = b.manager
        q = m.work_queue
        first = await create(m, ALICE)  # straight into the stream
        (entry, claim), *_ = await q.claim_next(
            0, consumer="w1", count=1, lease=LONG, max_attempts=5
        )
        assert (entry.task_id, claim.outcome) == (first, ClaimOutcome.RUN)
        # Released by hand-back, then re-entered straight into the stream...
        second = await create(m, ALICE)
        reader = q.reader(0, "w2", timedelta(milliseconds=200))
        try:
            (entry2,) = await reader.read(1)
        finally:
            await reader.close()
        assert entry2.task_id == second
        # ...a claim of it while the first runs defers it, no attempt counted.
        deferred = await q.claim(entry2, consumer="w2", lease=LONG, max_attempts=5)
        assert deferred.outcome is ClaimOutcome.DEFERRED
        assert await q.claim_next(0, consumer="w2", count=5, lease=LONG, max_attempts=5) == []
        await m.complete_task(first, {})
        (entry3, claim3), *_ = await q.claim_next(
            0, consumer="w2", count=5, lease=LONG, max_attempts=5
        )
        assert (entry3.task_id, claim3.outcome, claim3.attempt) == (second, ClaimOutcome.RUN, 1)


async def test_a_capped_tenants_lease_that_runs_out_stops_counting(make: Build) -> None:
    clock = Clock()
    async with make(limits=Limits(max_running_tasks_per_tenant=1), clock=clock) as b:
        m = b.manager
        q: WorkQueue = m.work_queue
        first, second = await create(m, ALICE), await create(m, ALICE)
        (entry, claim), *_ = await q.claim_next(
            0, consumer="dies", count=5, lease=timedelta(milliseconds=300), max_attempts=5
        )
        assert entry.task_id == first
        assert claim.outcome is ClaimOutcome.RUN
        assert await q.claim_next(0, consumer="w2", count=5, lease=LONG, max_attempts=5) == []
        clock.offset += 1.0  # its worker died: no renewal, the lease runs out

        async def next_runs() -> list[tuple[WorkEntry, Claim]]:
            return await q.claim_next(0, consumer="w2", count=5, lease=LONG, max_attempts=5)

        got = await wait_until(next_runs, within=5, what="the parked tenant's next task")
        assert [(e.task_id, c.outcome) for e, c in got] == [(second, ClaimOutcome.RUN)]


async def test_renewal_keeps_a_capped_task_counted(make: Build) -> None:
    clock = Clock()
    async with make(limits=Limits(max_running_tasks_per_tenant=1), clock=clock) as b:
        m = b.manager
        q = m.work_queue
        first, _ = await create(m, ALICE), await create(m, ALICE)
        (_entry, claim), *_ = await q.claim_next(
            0, consumer="w1", count=5, lease=timedelta(seconds=2), max_attempts=5
        )
        await q.renew(first, fence=claim.fence, consumer="w1", lease=LONG)
        clock.offset += 3.0
        await asyncio.sleep(0)
        assert await q.claim_next(0, consumer="w2", count=5, lease=LONG, max_attempts=5) == []


async def lease_runs_out(b: Backend, clock: Clock, task_id: str) -> None:
    """Return once ``task_id``'s lease ran out: moved past on the in-memory clock, waited
    for on the server's (its worker is gone: nothing renews it)."""
    if not b.is_redis:
        clock.offset += 1.0
        return
    manager = b.manager
    assert isinstance(manager, RedisTaskManager)

    async def out() -> bool:
        seen = await manager.inspect_task(task_id)
        remaining = None if seen is None else seen.lease_remaining_ms
        return remaining is not None and remaining < 0

    await wait_until(out, within=5, what="the lease to run out")


async def test_a_batch_claim_reads_back_every_task_it_dispatched(make: Build) -> None:
    """A batch claim whose first claim ends a task of a parked tenant (its running place
    frees, the tenant is back in the ring, a doorbell is due) then dispatches from the
    ring: it claims every task it dispatched. The doorbell rung mid-call took one of
    the reads meant for them, and the last one dispatched stayed in the stream
    undelivered, out of its queue and with no work entry recorded."""
    clock = Clock()
    async with make(limits=Limits(max_running_tasks_per_tenant=2), clock=clock) as b:
        m = b.manager
        q = m.work_queue
        short = timedelta(milliseconds=300)
        ended = await create(m, ALICE)  # straight into the stream
        ((_, first),) = await q.claim_next(0, consumer="dies", count=1, lease=short, max_attempts=5)
        held = await create(m, ALICE)
        ((_, second),) = await q.claim_next(0, consumer="w1", count=1, lease=LONG, max_attempts=5)
        waiting = await create(m, ALICE)  # at its cap: deferred, and the tenant parked
        ((_, deferred),) = await q.claim_next(0, consumer="w1", count=1, lease=LONG, max_attempts=5)
        assert (first.outcome, second.outcome, deferred.outcome) == (
            ClaimOutcome.RUN,
            ClaimOutcome.RUN,
            ClaimOutcome.DEFERRED,
        )
        await m.request_cancellation(TaskRequestContext(ALICE, ended))  # intent: held
        await lease_runs_out(b, clock, ended)
        # The dead worker's task goes back to the stream, to end at its next claim.
        await q.requeue(WorkEntry(0, await _entry_of(b, ended), ended))
        bob = [await create(m, BOB) for _ in range(2)]  # behind an undelivered entry: queued
        claimed = await q.claim_next(0, consumer="w2", count=3, lease=LONG, max_attempts=5)
        outcomes = {e.task_id: c.outcome for e, c in claimed}
        assert outcomes.pop(ended) is ClaimOutcome.CANCELLED
        # Two dispatched (of alice's one waiting and bob's two), both claimed.
        assert len(outcomes) == 2
        assert set(outcomes.values()) == {ClaimOutcome.RUN}
        assert set(outcomes) <= {waiting, *bob}
        # What was not dispatched waits in its queue; nothing is left in the stream but
        # the doorbell, rung last.
        rest = await q.claim_next(0, consumer="w3", count=5, lease=LONG, max_attempts=5)
        assert {e.task_id for e, _ in rest} == {waiting, *bob} - set(outcomes)
        assert held not in outcomes


async def _entry_of(b: Backend, task_id: str) -> str:
    """The work entry a task's record names (its worker read it, then died)."""
    manager = b.manager
    if isinstance(manager, RedisTaskManager):
        seen = await manager.inspect_task(task_id)
        assert seen is not None
        entry = seen.entry_id
    else:
        record = manager._records.live(task_id)
        assert record is not None
        entry = record.fields[FIELD_WORK_ENTRY].decode()
    assert entry is not None
    return entry


async def test_cancelling_a_parked_tenants_queued_task_leaves_it_parked(make: Build) -> None:
    """A capped tenant at its cap, parked with tasks waiting: cancelling one of those
    frees no running place, so the tenant stays parked (no doorbell, no dispatch of
    it) until a running task of it ends."""
    async with make(limits=Limits(max_running_tasks_per_tenant=1)) as b:
        m = b.manager
        q = m.work_queue
        running = await create(m, ALICE)
        await q.claim_next(0, consumer="w1", count=1, lease=LONG, max_attempts=5)
        queued = [await create(m, ALICE)]  # straight into the stream...
        ((_, claim),) = await q.claim_next(0, consumer="w1", count=5, lease=LONG, max_attempts=5)
        assert claim.outcome is ClaimOutcome.DEFERRED  # ...deferred: the tenant is parked
        queued.append(await create(m, ALICE))  # behind it in its queue
        assert await q.claim_next(0, consumer="w1", count=5, lease=LONG, max_attempts=5) == []
        await m.request_cancellation(TaskRequestContext(ALICE, queued[0]))
        assert (await q.depth(0)).entries == 1  # the running task's entry: no doorbell
        assert await q.claim_next(0, consumer="w1", count=5, lease=LONG, max_attempts=5) == []
        await m.complete_task(running, {})
        ((entry, claim),) = await q.claim_next(
            0, consumer="w1", count=5, lease=LONG, max_attempts=5
        )
        assert (entry.task_id, claim.outcome) == (queued[1], ClaimOutcome.RUN)


# -- waking workers -------------------------------------------------------------------------


async def test_a_single_claim_says_whether_tasks_wait_in_the_tenant_queues(make: Build) -> None:
    async with make() as b:
        m = b.manager
        q = m.work_queue
        first = await create(m)
        reader = q.reader(0, "w1", timedelta(milliseconds=200))
        try:
            (entry,) = await reader.read(2)
            assert entry.task_id == first
            await create(m)  # the stream holds nothing undelivered: straight in
            (alone,) = await reader.read(2)
            alone_claim = await q.claim(alone, consumer="w1", lease=LONG, max_attempts=5)
            assert not alone_claim.backlog
            await create(m)
            await create(m)  # this one waits in its tenant's queue
            (third,) = await reader.read(2)
            claim = await q.claim(third, consumer="w1", lease=LONG, max_attempts=5)
            assert claim.outcome is ClaimOutcome.RUN
            assert claim.backlog
        finally:
            await reader.close()


async def test_a_busy_batch_claim_rings_the_doorbell_for_a_blocked_worker(make: Build) -> None:
    async with make() as b:
        m = b.manager
        q = m.work_queue
        tasks = [await create(m) for _ in range(4)]
        claimed = await q.claim_next(0, consumer="busy", count=2, lease=LONG, max_attempts=5)
        assert [e.task_id for e, _ in claimed] == tasks[:2]
        reader = q.reader(0, "idle", timedelta(seconds=2))
        try:
            waiting = asyncio.ensure_future(reader.read(2))
            await asyncio.sleep(0.05)
            assert not waiting.done()
            # The busy worker's slots are full: its next batch rings for the idle one.
            more = await q.claim_next(
                0, consumer="busy", count=1, lease=LONG, max_attempts=5, wake=True
            )
            assert [e.task_id for e, _ in more] == tasks[2:3]
            (bell,) = await asyncio.wait_for(waiting, 5)
            assert bell.doorbell
            assert bell.task_id is None
            await q.drop(bell)
            rest = await q.claim_next(0, consumer="idle", count=5, lease=LONG, max_attempts=5)
            assert [e.task_id for e, _ in rest] == tasks[3:]
        finally:
            await reader.close()


async def test_a_newcomer_is_signalled_and_a_first_claim_starts_it_ahead(make: Build) -> None:
    """A tenant that joins a ring where others wait is signalled (its task's ID on the
    signal stream, marked a newcomer's; the flood's never), and a batch claim naming it
    as ``first``
    starts it ahead of the ring's order and of the entry still undelivered; then the
    flood goes on in its own order. A tenant whose second task came meanwhile has
    that one signalled next; a stale ``first`` costs the claim nothing."""
    async with make() as b:
        m = b.manager
        q = m.work_queue
        heard: list[str] = []
        registration = q.signals.subscribe(heard.append)
        try:
            await q.signals.wait_ready()
            flood = [await create(m) for _ in range(6)]  # the first is straight in the stream
            late, late_next = await create(m, BOB), await create(m, BOB)
            signalled = [newcomer_signal(late)]
            await wait_until(partial(_holds, heard, signalled), what="the newcomer's signal")
            claimed = await q.claim_next(
                0, consumer="w1", count=1, lease=LONG, max_attempts=5, first=late
            )
            assert [(e.task_id, c.outcome) for e, c in claimed] == [(late, ClaimOutcome.RUN)]
            # The newcomer's next task came before its first started: signalled too.
            signalled.append(newcomer_signal(late_next))
            await wait_until(partial(_holds, heard, signalled), what="its next one")
            stale = await q.claim_next(
                0, consumer="w1", count=1, lease=LONG, max_attempts=5, first=late
            )
            assert [e.task_id for e, _ in stale] == flood[:1]  # the moved entry, first of A's
            order = await served(m, 6)
            assert [t for t in order if t in flood] == flood[1:]
            assert late_next in order
            assert await next_one(m) is None
            depth = await q.depth(0)
            assert (depth.queued, depth.tenants, depth.backlog) == (0, 0, 0)
        finally:
            registration.close()


async def test_a_task_straight_into_a_busy_partition_is_signalled_as_a_newcomer(
    make: Build,
) -> None:
    """A task that goes straight into an idle partition's stream is signalled as a
    newcomer's only while a saturated worker marks the partition busy: that worker's
    read loops wait in line for a free slot, and would start it at its partition's
    turn, not at the next free slot."""
    async with make() as b:
        m = b.manager
        q = m.work_queue
        heard: list[str] = []
        registration = q.signals.subscribe(heard.append)
        try:
            await q.signals.wait_ready()
            quiet = await create(m)  # nothing marks the partition busy: no signal
            await q.claim_next(0, consumer="w1", count=1, lease=LONG, max_attempts=5)
            await q.mark_busy([0], timedelta(seconds=30))
            busy = await create(m)
            await wait_until(
                partial(_holds, heard, [newcomer_signal(busy)]), what="the newcomer's signal"
            )
            ((entry, claim),) = await q.claim_next(
                0, consumer="w1", count=1, lease=LONG, max_attempts=5, first=busy
            )
            assert (entry.task_id, claim.outcome) == (busy, ClaimOutcome.RUN)
            assert newcomer_signal(quiet) not in heard
        finally:
            registration.close()


async def _holds(heard: list[str], expected: list[str]) -> bool:
    return heard == expected


async def test_a_busy_worker_starts_a_newcomer_at_its_next_free_slot(make: Build) -> None:
    """Every slot of a worker serving 8 partitions is held by tenant A's flood, which
    waits in every partition; B creates one task. When one of A's handlers returns,
    B's task is the next to start, wherever its partition stands in the partitions'
    turns (which gave B one slot in 8 before). With ``newcomer_slots=1``, B's task
    starts at once, on a slot beyond the concurrency, and a second newcomer waits
    for a free slot."""
    async with make(partitions=8) as b:
        if b.name == "embedded":
            pytest.skip("the embedded Redis blocks one reader at a time: signals wait behind")
        for newcomer_slots in (0, 1):
            await _newcomer_round(b.manager, newcomer_slots)


async def _newcomer_round(m: WorkerBackend, newcomer_slots: int) -> None:
    """One worker of ``newcomer_slots`` behind a flood: see the test above."""
    starts: list[str] = []
    release: dict[str, asyncio.Event] = {}

    async def handler(execution: TaskExecution) -> Any:
        starts.append(execution.task_id)
        await release.setdefault(execution.task_id, asyncio.Event()).wait()
        return {}

    async def started(n: int) -> bool:
        return len(starts) >= n

    flood = [await create(m) for _ in range(80)]  # 10 a partition: none runs dry
    async with Worker(m, handler, concurrency=4, newcomer_slots=newcomer_slots) as w:
        running = asyncio.ensure_future(w.run())
        await wait_until(partial(started, 4), what="the flood to fill every slot")
        late = await create(m, BOB)
        if newcomer_slots:
            await wait_until(partial(started, 5), what="the newcomer's extra slot")
            assert starts[4] == late
            late = await create(m, RequestContext("/mcp", "user:third"))
            await wait_until(partial(_hinted, w, late), what="the second newcomer")
            assert len(starts) == 5  # no extra slot left: it waits for a free one
        else:
            await wait_until(partial(_hinted, w, late), what="the newcomer's signal")
            assert len(starts) == 4
        release.setdefault(starts[0], asyncio.Event()).set()
        await wait_until(partial(started, len(starts) + 1), what="the next start")
        assert starts[-1] == late
        for task_id in [*flood, *starts]:
            release.setdefault(task_id, asyncio.Event()).set()

        async def flood_started() -> bool:
            return set(flood) <= set(starts)

        await wait_until(flood_started, what="the rest of the flood")
        await w.stop()
        await running


async def _hinted(worker: Worker, task_id: str) -> bool:
    """Whether ``worker`` heard ``task_id``'s newcomer signal (and waits to start it)."""
    return task_id in worker._intake._newcomers


def _with_stats_of(before: Any, after: Any) -> Any:
    """``after``, with each stats hash, tenant refusal count and ``seen`` set (when each
    tenant was last refused) as ``before`` had them: a refusal counts itself (for the
    partition and the tenant, best effort), and stores nothing else."""
    if not isinstance(before, dict):
        return after

    def counts(key: object) -> bool:
        name = str(key)
        return name.endswith((":stats", ":seen")) or ":refused:" in name

    merged = {key: value for key, value in after.items() if not counts(key)}
    merged.update((key, value) for key, value in before.items() if counts(key))
    return merged


async def test_the_jitter_of_the_scripts_is_the_pythons(redis_server: RedisServer) -> None:
    """The scripts' jitter() and _tenancy.jitter are twins: the in-memory reference
    orders a ring exactly as Redis does."""
    source = assemble(["tenants"], "return jitter(ARGV[1], ARGV[2], tonumber(ARGV[3]))")
    client = Redis.from_url(redis_server.url)
    try:
        for n in range(40):
            tenant = tenant_digest(b"", b"", f"tenant {n}".encode())
            for partition, weight in ((0, 1), (7, 3), (16383, 100)):
                got = await client.eval(source, 0, tenant, str(partition), stride(weight))
                assert got == jitter(tenant, partition, stride(weight))
    finally:
        await client.aclose()


async def test_a_worker_starts_a_late_tenants_tasks_before_a_floods_backlog_drains(
    make: Build,
) -> None:
    """With a worker running, tenant A's backlog of 120 tasks is being drained when
    tenant B creates 4: B's tasks start within a few starts of their creation, long
    before A's backlog drains (first come, first served would start them last)."""
    async with make(partitions=4) as b:
        if b.name == "embedded":
            # Measured: fakeredis answers from this test's own process, behind its
            # GIL, so the 4 creates took as long as a hundred starts, and the backlog
            # was gone before B's tasks existed; the order is not what is measured.
            pytest.skip("the embedded Redis shares the worker's process: no backlog to overtake")
        m = b.manager
        starts: list[str] = []
        late: set[str] = set()
        began = asyncio.Event()

        async def handler(execution: TaskExecution) -> dict[str, Any]:
            starts.append(execution.task_id)
            if len(starts) == 10:
                began.set()
            await asyncio.sleep(0.002)
            return {}

        flood = [await create(m) for _ in range(120)]
        async with Worker(m, handler, concurrency=4) as worker:
            running = asyncio.ensure_future(worker.run())
            await asyncio.wait_for(began.wait(), 30)
            late.update([await create(m, BOB) for _ in range(4)])
            created_at = len(starts)

            async def all_started() -> bool:
                return set(flood) | late <= set(starts)

            await wait_until(all_started, within=60, what="every task to start")
            await worker.stop()
            await running
        positions = [starts.index(t) for t in late]
        assert max(positions) < created_at + 40, (created_at, positions)
        assert starts.index(flood[-1]) > max(positions)
