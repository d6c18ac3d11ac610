"""Faults under load, in short: the machinery of ``benchmarks/faults/`` for about 10 s.

Every fault kind (``CLIENT PAUSE`` ALL and WRITE, ``CLIENT KILL TYPE normal``, a restart
of the server on its data, a kill in the middle of a write pause) is injected at least
once while 32 clients create and follow tasks and two ``redis-tasks worker`` processes run
them (about 10 s, longer until every kind was injected). Then no task may be lost or
completed twice, every call must have ended within its timeout plus the stated slack,
and the workers and the manager must have recovered by themselves. The run waits on
conditions (every task terminal, every worker busy again), never for a fixed time, so a
noisy machine only makes it slower.

The second test pins the defect this machinery found: a call retried after its
connection was killed used to get a whole new timeout.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from redis.asyncio import Redis

from benchmarks.faults import KINDS, Settings, run_faults, summary
from redis_tasks import BackendError, RedisTaskManager
from redis_tasks._bench._adapter import ORIGIN, WHO
from redis_tasks.testing import start_redis_server

pytestmark = pytest.mark.slow


@pytest.mark.timeout(600)
async def test_faults_under_load_lose_no_task_and_complete_none_twice(tmp_path: Path) -> None:
    # The injector goes on past ``seconds`` until every kind was injected once.
    settings = Settings(seconds=10, warmup=2, every=2, gap=0.75, recovery=3, settle=240)
    figures = await run_faults(settings, tmp_path)
    report = "\n".join(summary(figures))
    assert figures["broken"] == [], report
    assert all(figures["faults"][kind] >= 1 for kind in KINDS), report
    assert figures["faults"]["restart_SIGKILL"] >= 1, report
    tasks = figures["tasks"]
    assert tasks["created"] > 0, report
    assert tasks["lost"] == tasks["duplicated"] == tasks["not_terminal"] == 0, report
    assert tasks["checked"] == tasks["created"] + tasks["ambiguous_persisted"], report
    assert figures["ops_over_limit"] == 0, report
    assert figures["max_latency_ms"] <= settings.limit * 1000, report
    assert all(figures["workers"]["alive_at_end"]), report
    assert min(figures["workers"]["tasks_after_last_fault"]) >= 1, report


async def test_a_call_retried_after_its_connection_was_killed_keeps_its_one_timeout(
    tmp_path: Path,
) -> None:
    """A create waits on a write pause; its connection is killed mid-wait, so it is
    retried, and the retry waits on the pause again. Together they must still end
    within the one timeout (before the fix: the kill's moment plus a fresh timeout)."""
    timeout = 2.0
    server = start_redis_server(tmp_path)
    admin = Redis.from_url(server.url)
    try:
        async with RedisTaskManager.from_url(
            server.url, prefix="retry-timeout", timeout=timeout
        ) as manager:
            await manager.create_task(WHO, ORIGIN)  # connected, scripts cached
            await admin.client_pause(int(timeout * 3 * 1000), all=False)  # writes wait
            began = time.monotonic()
            create = asyncio.create_task(manager.create_task(WHO, ORIGIN))
            # Let the create wait on the pause for most of its timeout, then break
            # its connection: the moment matters, so this sleep is the scenario.
            await asyncio.sleep(timeout * 0.75)
            await admin.client_kill_filter(_type="normal", skipme=True)
            with pytest.raises(BackendError):
                await create
            took = time.monotonic() - began
            await admin.client_unpause()
        # Without the bound the retry took the kill's 1.5 s plus a new 2 s: 3.5 s.
        assert took < timeout + 0.75
    finally:
        await admin.aclose()
        server.stop()
