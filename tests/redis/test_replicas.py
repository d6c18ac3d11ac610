"""``wait_replicas="auto"``, the default, on real servers: a primary with a replica and one
without, a replica that goes and comes back; and the persistence warning at start.

The ``WAIT`` commands a primary ran are read from its ``INFO commandstats``.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import redis

from redis_tasks import RedisTaskManager, RequestContext, TaskOrigin, TaskRequestContext
from redis_tasks._redis import replicas
from redis_tasks._telemetry.metrics import METRICS
from redis_tasks.testing import RedisServer, start_redis_server, start_replicated_server
from tests.support.helpers import wait_until

_WHO = RequestContext(endpoint="/mcp", partition_key="p")


def _waits(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        stats = client.info("commandstats").get("cmdstat_wait", {})
        return int(stats.get("calls", 0)) if isinstance(stats, dict) else 0
    finally:
        client.close()


def _online(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        info = client.info("replication")
        count = int(info.get("connected_slaves", 0))
        return sum(1 for n in range(count) if info[f"slave{n}"].get("state") == "online")
    finally:
        client.close()


async def _create(manager: RedisTaskManager) -> None:
    await manager.create_task(_WHO, TaskOrigin.from_persisted_state({"tool": "t"}))


def _events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


async def test_auto_never_waits_on_a_primary_without_a_replica(
    redis_server: RedisServer, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    before = _waits(redis_server.url)
    with caplog.at_level(logging.WARNING, logger="redis_tasks"):
        async with RedisTaskManager.from_url(redis_server.url, prefix=prefix) as manager:
            for _ in range(20):
                await _create(manager)
        # A process that enters another manager (a FastMCP worker enters its app's and
        # its own) does not say it again.
        async with RedisTaskManager.from_url(redis_server.url, prefix=prefix):
            pass
    assert _waits(redis_server.url) == before
    assert not _events(caplog, "replicas_missing")
    # The test servers keep nothing on disk: said once, at start.
    (told,) = _events(caplog, "no_persistence")
    assert redis_server.url.split("//")[1].split("/")[0] in told.getMessage()


async def test_auto_waits_where_a_replica_is_and_says_when_it_goes_and_comes_back(
    tmp_path: Path, prefix: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replicas, "RECHECK_S", 0.2)
    gauge: list[tuple[str, bool]] = []
    monkeypatch.setattr(METRICS, "replicas_missing", lambda p, m: gauge.append((p, m)))
    servers = start_replicated_server(tmp_path)
    url = servers.url
    try:
        with caplog.at_level(logging.WARNING, logger="redis_tasks"):
            async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
                before = _waits(url)
                await _create(manager)
                assert _waits(url) == before + 1  # confirmed by the replica

                servers.replicas[0].stop()

                async def gone() -> bool:
                    return _online(url) == 0

                await wait_until(gone, what="the primary to see its replica gone")
                await _create(manager)  # waits out one WAIT, finds no replica: it stands
                await _create(manager)  # and no longer waits
                assert _waits(url) == before + 2
                (missing,) = _events(caplog, "replicas_missing")
                assert missing.primary == url.split("//")[1].split("/")[0]  # type: ignore[attr-defined]

                servers.replicas[0] = start_redis_server(
                    tmp_path / "replica-back", "--replicaof", "127.0.0.1", str(servers.primary.port)
                )

                async def back() -> bool:
                    return _online(url) == 1

                await wait_until(back, within=30, what="the replica to come back")

                async def waiting_again() -> bool:
                    await _create(manager)
                    return bool(_events(caplog, "replicas_back"))

                await wait_until(waiting_again, what="the return to be noticed")
                waits = _waits(url)
                await _create(manager)
                assert _waits(url) == waits + 1
        assert len(_events(caplog, "replicas_missing")) == 1
        primary = url.split("//")[1].split("/")[0]
        assert gauge == [(primary, True), (primary, False)]  # the gauge went 1, then 0
    finally:
        servers.stop()


async def test_wait_replicas_takes_auto_or_a_count(redis_server: RedisServer) -> None:
    for bad in (-1, "all", 1.5, True):
        with pytest.raises(ValueError, match="auto"):
            RedisTaskManager.from_url(redis_server.url, wait_replicas=bad)  # type: ignore[arg-type]


async def test_auto_without_info_says_so_once_and_does_not_wait(
    tmp_path: Path, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    servers = start_replicated_server(tmp_path)
    admin = redis.Redis.from_url(servers.url)
    try:
        admin.execute_command("ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info")  # type: ignore[no-untyped-call]
        url = servers.url.replace("redis://", "redis://noinfo:pw@")
        before = _waits(servers.url)
        with caplog.at_level(logging.WARNING, logger="redis_tasks"):
            async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
                for _ in range(5):
                    await _create(manager)
        assert _waits(servers.url) == before
        (told,) = _events(caplog, "replicas_unknown")
        assert "+info" in told.getMessage()
    finally:
        admin.close()
        servers.stop()


async def test_a_burst_on_a_bare_primary_asks_it_once_per_recheck(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every cancellation of the burst (one script call each) finds the bare primary's
    # recheck due (RECHECK_S 0): they share the INFO in flight rather than each asking
    # (and holding a connection for it).
    monkeypatch.setattr(replicas, "RECHECK_S", 0.0)
    server = start_redis_server(tmp_path)
    admin = redis.Redis.from_url(server.url)

    def infos() -> int:
        return int(admin.info("commandstats")["cmdstat_info"]["calls"])

    try:
        async with RedisTaskManager.from_url(server.url, prefix=prefix) as manager:
            origin = TaskOrigin.from_persisted_state({"tool": "t"})
            tasks = await asyncio.gather(*(manager.create_task(_WHO, origin) for _ in range(300)))
            before = infos()
            await asyncio.gather(
                *(manager.request_cancellation(TaskRequestContext(_WHO, t.task_id)) for t in tasks)
            )
            asked = infos() - before - 1  # less the one above
        assert 1 <= asked <= 10  # not one a call (300)
    finally:
        admin.close()
        server.stop()
