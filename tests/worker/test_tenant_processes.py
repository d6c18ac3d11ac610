"""Tenant limits across processes, on real servers: the quota stays exact under
concurrent creates from two processes, the concurrency cap holds across a fleet
of worker processes, and a full Redis refuses creates as a capacity error while
the tasks it runs still finish.

Workers run the CLI (``python -m redis_tasks worker tests.support.handlers:handler``) and
report to Redis lists, so the tests wait on conditions, never on time.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from redis_tasks import (
    BackendError,
    CapacityError,
    Limits,
    QuotaExceededError,
    RedisTaskManager,
    RequestContext,
    TaskExecution,
    TaskRequestContext,
    TaskStatus,
    Worker,
)
from redis_tasks._tenancy import tenant_digest
from redis_tasks.testing import start_redis_server
from tests.support.fleet import ROOT, Fleet, go, next_start, terminal
from tests.support.helpers import ALICE, ORIGIN, wait_until

pytestmark = pytest.mark.slow


async def test_the_open_task_quota_is_exact_across_processes(
    fleet_server: tuple[str, str], prefix: str
) -> None:
    """Two processes fire 400 creates each at once for one tenant with a quota of
    100: exactly 100 are accepted, on one Redis and on the cluster (a tenant with a
    quota lives in its home partition, where one script sees all its tasks)."""
    kind, url = fleet_server
    command = [sys.executable, "-m", "tests.support.quota_flood", url, prefix, "400", "100"]
    processes = [
        await asyncio.create_subprocess_exec(
            *command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        for _ in range(2)
    ]
    totals: Counter[str] = Counter()
    for process in processes:
        out, err = await asyncio.wait_for(process.communicate(), 120)
        assert process.returncode == 0, err.decode()
        totals.update(json.loads(out))
    assert totals == {"accepted": 100, "refused:quota": 700}, (kind, totals)
    async with RedisTaskManager.from_url(
        url, prefix=prefix, limits=Limits(max_open_tasks_per_tenant=100)
    ) as manager:
        with pytest.raises(QuotaExceededError):
            await manager.create_task(ALICE, ORIGIN, tenant="org:flood")


async def test_the_concurrency_cap_holds_across_worker_processes(
    fleet_server: tuple[str, str], prefix: str, fleet: Fleet, control: Any
) -> None:
    """Three worker processes with a free slot each, one tenant capped at two running
    tasks: two run, the third worker gets none of the six waiting (the tenant is
    parked), and each task that ends lets exactly one more start."""
    limits = Limits(max_running_tasks_per_tenant=2)
    async with RedisTaskManager.from_url(fleet_server[1], prefix=prefix, limits=limits) as manager:
        for _ in range(3):
            fleet.start("--concurrency", "1")
        await fleet.wait_started()
        created = [
            (
                await manager.create_task(
                    ALICE, ORIGIN, payload=json.dumps({"mode": "hold"}).encode()
                )
            ).task_id
            for _ in range(6)
        ]
        home = int(created[0].split(".")[0])
        assert {int(t.split(".")[0]) for t in created} == {home}
        parked = manager.keyspace.parked(home)
        tenant = tenant_digest(b"/mcp", b"=alice", None)
        started_key = f"{fleet.namespace}:started"

        async def held_at_cap(expected_starts: int) -> bool:
            """The tenant is parked (nothing more of it can start) after exactly
            ``expected_starts`` starts."""
            return (
                await manager.client.zscore(parked, tenant) is not None
                and await control.llen(started_key) == expected_starts
            )

        first = await next_start(control, fleet)
        second = await next_start(control, fleet)
        assert first["pid"] != second["pid"]  # two processes, one slot each
        await wait_until(lambda: held_at_cap(0), within=30, what="the tenant parked at its cap")
        running = [first, second]
        for ended in range(4):
            await go(control, fleet, running.pop(0))
            running.append(await next_start(control, fleet))
            if ended < 3:  # while tasks still wait, the cap parks the tenant again
                await wait_until(lambda: held_at_cap(0), within=30, what="parked again")
        for started in running:
            await go(control, fleet, started)
        for task_id in created:
            assert (await terminal(manager, task_id)).status is TaskStatus.COMPLETED


async def test_a_full_redis_refuses_creates_as_capacity_while_running_tasks_finish(
    tmp_path: Path, prefix: str
) -> None:
    """Under ``maxmemory`` with ``noeviction``: once Redis is full, every tenant's
    create raises :class:`CapacityError` (not :class:`BackendError`) and stores
    nothing; the tasks already running still finish (a terminal write frees before
    it writes), and once they and the backlog drain, creates work again."""
    redis = start_redis_server(tmp_path, "--maxmemory", "6mb", "--maxmemory-policy", "noeviction")
    try:
        gate = asyncio.Event()
        started: list[str] = []

        async def handler(execution: TaskExecution) -> dict[str, Any]:
            started.append(execution.task_id)
            if execution.payload == b"hold":
                await gate.wait()
            return {"ok": True}

        async with RedisTaskManager.from_url(redis.url, prefix=prefix) as manager:
            held = [
                (await manager.create_task(ALICE, ORIGIN, payload=b"hold")).task_id
                for _ in range(4)
            ]
            async with Worker(manager, handler, concurrency=4) as worker:
                running = asyncio.ensure_future(worker.run())
                await wait_until(
                    lambda: _ready(set(held) <= set(started)), within=15, what="held tasks"
                )
                # The worker's slots are all busy: what comes now waits, and fills Redis.
                # Until every tenant has been refused (Redis refuses any create while
                # used memory is over maxmemory; it may dip just under it after a
                # refusal, so one more create may fit), each refusal storing nothing.
                payload = b"x" * 32_768
                refused: Counter[str] = Counter()
                errors: list[tuple[CapacityError, int]] = []
                accepted = 0
                for _ in range(10_000):
                    for who in ("user:flood", "user:other"):
                        before = await manager.client.dbsize()
                        try:
                            await manager.create_task(
                                RequestContext("/mcp", who), ORIGIN, payload=payload
                            )
                        except CapacityError as full:
                            errors.append((full, await manager.client.dbsize() - before))
                            refused[who] += 1
                        else:
                            accepted += 1
                    if len(refused) == 2:
                        break
                assert len(refused) == 2
                assert accepted > 10
                for error, stored in errors:
                    assert not isinstance(error, BackendError)
                    assert error.reason == "full"
                    assert "memory" in str(error)
                    assert stored == 0  # no key more
                # The running tasks finish although Redis is full.
                gate.set()
                for task_id in held:
                    task = await wait_until(
                        partial(_terminal, manager, task_id), within=30, what="a held task"
                    )
                    assert task.status is TaskStatus.COMPLETED

                async def admitted() -> bool:
                    try:
                        await manager.create_task(ALICE, ORIGIN, ttl=timedelta(minutes=1))
                    except CapacityError:
                        return False
                    return True

                # The backlog drains (claims and finishes free memory); creates work again.
                await wait_until(admitted, within=60, what="room in Redis again")
                await worker.stop()
                await running
    finally:
        redis.stop()


async def _ready(value: bool) -> bool:
    return value


async def _terminal(manager: RedisTaskManager, task_id: str) -> Any:
    task = await manager.find_task(TaskRequestContext(ALICE, task_id))
    return task if task is not None and task.is_terminal else None
