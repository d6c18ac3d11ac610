"""``redis-tasks bench`` on a Redis it did not start leaves it as it found it.

Its statistics are read, never reset; every key of a run goes when the run ends,
Ctrl-C, SIGTERM, an error or a dead worker included; a run killed outright is found
and removed by ``--clean`` (and by the next run); and a server without room for a
run is not loaded.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from redis_tasks import RedisTaskManager
from redis_tasks._bench._adapter import ORIGIN, WHO
from redis_tasks._bench._footprint import Footprint, footprint
from redis_tasks._bench._mcp_settings import McpSettings
from redis_tasks._bench._namespace import ANY_RUN, REGISTRY, RunNames
from redis_tasks._bench._probe import MemoryLimit
from redis_tasks._bench._progress import Progress
from redis_tasks._bench._run_guard import RunGuard, guarded
from redis_tasks._bench._scenarios import Bench, Settings
from redis_tasks._bench._systems import AdapterError, ours
from redis_tasks._redis.contract import CREATE_BATCH
from redis_tasks.testing import RedisServer, start_redis_server
from tests.support.helpers import wait_until

pytestmark = pytest.mark.slow

#: Counters of ``INFO stats`` that ``CONFIG RESETSTAT`` zeroes: they may only grow.
COUNTERS = ("total_commands_processed", "total_connections_received", "keyspace_misses")
#: A drain far longer than the tests let it run: they stop it once it has written this.
LONG_DRAIN = ["drain", "--tasks", "100000", "--rounds", "1", "--workers", "1", "--quiet"]
WRITTEN = 1_000


async def bench(*argv: str) -> tuple[int, str, str]:
    """``redis-tasks bench *argv`` to its end: exit status, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "redis_tasks", "bench", *argv,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 180)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def seed(client: aioredis.Redis, url: str, prefix: str) -> dict[bytes, bytes | None]:
    """Another application's keys (a string, a hash, a stream with a group, and a task
    of another redis-tasks prefix): each one's DUMP."""
    # APPEND: a command no bench run sends, so a reset of the counters could not hide.
    await client.append(f"{prefix}:string", "v")
    await client.hset(f"{prefix}:hash", mapping={"a": "1", "b": "2"})
    await client.xadd(f"{prefix}:stream", {"f": "v"})
    await client.xgroup_create(f"{prefix}:stream", "g", id="0")
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        await manager.create_task(WHO, ORIGIN)
    return await others(client, prefix)


async def others(client: aioredis.Redis, prefix: str) -> dict[bytes, bytes | None]:
    """The DUMP of every key of ``prefix`` (its plain keys and its tasks')."""
    keys = [k async for k in client.scan_iter(match=f"*{prefix}*", count=1000)]
    return {key: await client.dump(key) for key in keys}


async def counters(client: aioredis.Redis) -> dict[str, Any]:
    """The server's counters, its calls per command and its whole configuration."""
    stats = await client.info("stats")
    commandstats = await client.info("commandstats")
    calls = {k.removeprefix("cmdstat_"): v["calls"] for k, v in commandstats.items()}
    return {
        **{name: int(stats[name]) for name in COUNTERS},
        "calls": calls,
        "config": await client.config_get("*"),
    }


def assert_untouched(before: dict[str, Any], after: dict[str, Any]) -> None:
    """No counter went back (nothing reset them), and no setting changed."""
    assert after["total_commands_processed"] > before["total_commands_processed"]
    for name in COUNTERS:
        assert after[name] >= before[name], name
    assert before["calls"]["append"] >= 1
    assert all(after["calls"].get(cmd, 0) >= n for cmd, n in before["calls"].items())
    assert after["config"] == before["config"]


async def run_keys(client: aioredis.Redis) -> set[bytes]:
    """Every key any bench run wrote, and the run registry."""
    found = {k async for k in client.scan_iter(match=ANY_RUN, count=1000)}
    return found | ({REGISTRY.encode()} if await client.exists(REGISTRY) else set())


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux ``/proc``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def alive(pids: list[int]) -> list[int]:
    """Those of ``pids`` still running (a zombie is not)."""
    running = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            running.append(pid)
    return running


async def start_long_drain(client: aioredis.Redis, url: str) -> tuple[Any, list[int]]:
    """A long drain, once it has written :data:`WRITTEN` keys; its child processes."""
    base = await client.dbsize()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "redis_tasks", "bench", *LONG_DRAIN, "--redis-url", url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip

    async def written() -> bool:
        if process.returncode is not None:
            raise AssertionError("the drain ended before it was stopped")
        return int(await client.dbsize()) >= base + WRITTEN

    await wait_until(written, within=60, what="the drain writing its tasks")
    children = children_of(process.pid)
    assert len(children) == 2  # its client and its worker
    return process, children


@pytest.fixture
async def client(redis_server: RedisServer) -> Any:
    connection = aioredis.Redis.from_url(redis_server.url)
    yield connection
    await connection.aclose()


async def test_a_run_leaves_other_keys_and_the_statistics_as_they_were(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    url = redis_server.url
    prefix = f"ops-{os.urandom(3).hex()}"
    theirs = await seed(client, url, prefix)
    before = await counters(client)
    code, out, err = await bench(
        "drain", "pickup", "find", "--redis-url", url, "--tasks", "200", "--rounds", "1",
        "--pickups", "3", "--workers", "1", "--pollers", "4", "--find-ops", "100",
        "--json", "-", "--quiet",
    )  # fmt: skip
    assert code == 0, err
    assert_untouched(before, await counters(client))
    assert await others(client, prefix) == theirs
    assert await run_keys(client) == set()
    # The figures read by difference: every job's create, its claim and finish (alone
    # or in batches, at most CREATE_BATCH creates a call), and its record written by
    # all three.
    drain = json.loads(out)["systems"]["redis-tasks"]["drain"]["1"]
    assert drain["rate"] > 0
    assert drain["commands"]["evalsha"] >= 1 / CREATE_BATCH
    assert drain["commands"]["hset"] >= 3
    assert drain["commands_per_job"] >= drain["commands"]["evalsha"]
    assert "writes up to about 464 keys" in err  # 200 tasks' 2 keys and a queue's
    assert url not in out
    assert str(redis_server.port) not in out


async def test_ctrl_c_mid_drain_exits_130_and_leaves_no_key_of_the_run(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    prefix = f"ops-{os.urandom(3).hex()}"
    theirs = await seed(client, redis_server.url, prefix)
    before = await counters(client)
    process, children = await start_long_drain(client, redis_server.url)
    process.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 130
    text = err.decode()
    assert "Traceback" not in text
    estimate, stopped = text.splitlines()  # one line for Ctrl-C, after the estimate's
    assert estimate.startswith("redis-tasks bench: run rtbench-")
    assert stopped.startswith("redis-tasks bench: stopped by SIGINT; removed the run's ")
    assert await run_keys(client) == set()
    assert alive(children) == []
    assert await others(client, prefix) == theirs
    assert_untouched(before, await counters(client))


async def test_a_run_killed_outright_is_removed_by_clean_and_a_live_one_is_not(
    redis_server: RedisServer, client: aioredis.Redis
) -> None:
    url = redis_server.url
    prefix = f"ops-{os.urandom(3).hex()}"
    theirs = await seed(client, url, prefix)
    before = await counters(client)
    process, children = await start_long_drain(client, url)
    # While the run goes on, --clean leaves it alone.
    running = len(await run_keys(client))
    code, _, err = await bench("--clean", "--redis-url", url)
    assert code == 0, err
    assert "found no keys of earlier runs; left rtbench-" in err
    assert "alone: still running" in err
    assert len(await run_keys(client)) >= running
    process.kill()
    await process.wait()

    async def orphans_gone() -> bool:  # they die with the harness (PR_SET_PDEATHSIG)
        return not alive(children)

    await wait_until(orphans_gone, within=10, what="the run's children to die with it")
    left = await run_keys(client)
    run = next(k for k in left if k != REGISTRY.encode()).split(b"rtbench-")[1][:8].decode()
    code, _, err = await bench("--clean", "--redis-url", url)
    assert code == 0, err
    removed = len(left) - 1  # the registry entry goes too, not counted as a key
    assert f"removed {removed:,} keys of 1 earlier run (rtbench-{run})" in err
    assert await run_keys(client) == set()
    assert await others(client, prefix) == theirs
    assert_untouched(before, await counters(client))


async def test_a_worker_that_dies_mid_run_takes_the_run_s_keys_with_it(
    redis_server: RedisServer, client: aioredis.Redis, tmp_path: Path
) -> None:
    url = redis_server.url
    names = RunNames()
    guard = RunGuard(url, names)
    settings = Settings(tasks=50, concurrency=4, rounds=1)
    plan = footprint(settings, ("drain",), McpSettings(), peers=False)
    with (tmp_path / "log").open("wb") as log:
        scenarios = Bench(url, settings, Progress(quiet=True), log, names)

        async def body() -> None:
            await guard.start(plan, allow_large=False)
            async with scenarios._processes(ours(), names.queue(), 1) as (jobs, (worker,)):
                await jobs.ask("enqueue 50")
                assert await run_keys(client)
                os.kill(worker.pid, signal.SIGKILL)
                await worker.report()  # the harness learns of the death here

        with pytest.raises(AdapterError, match="exited"):
            await guarded(body, guard)
    assert await run_keys(client) == set()


async def test_the_next_run_removes_what_a_killed_run_left_first(
    redis_server: RedisServer, client: aioredis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    url = redis_server.url
    plan = footprint(Settings(tasks=20), ("drain",), McpSettings(), peers=False)
    killed = RunNames()
    guard = RunGuard(url, killed)
    await guard.start(plan, allow_large=False)
    async with RedisTaskManager.from_url(url, prefix=killed.queue()) as manager:
        for _ in range(20):
            await manager.create_task(WHO, ORIGIN)
    left = await run_keys(client)
    # Killed outright: its keep-alive stops and its connections close; its keys and its
    # registry entry stay.
    assert guard._keep_alive is not None
    guard._keep_alive.cancel()
    await guard._keys.__aexit__()
    assert await client.hexists(REGISTRY, killed.run_id)
    following = RunGuard(url, RunNames())
    await following.start(plan, allow_large=False)
    said = capsys.readouterr().err
    assert f"removed {len(left) - 1:,} keys of 1 earlier run ({killed.label})" in said
    assert not await client.hexists(REGISTRY, killed.run_id)
    assert await following.finish() == 0
    assert await run_keys(client) == set()


async def test_a_server_without_room_is_not_loaded(tmp_path: Path) -> None:
    server = start_redis_server(tmp_path, "--maxmemory", "8mb")
    try:
        code, _, err = await bench("drain", "--redis-url", server.url, "--tasks", "20000")
        connection = aioredis.Redis.from_url(server.url)
        written = await connection.dbsize()
        calls = await connection.info("commandstats")
        await connection.aclose()
    finally:
        server.stop()
    assert code == 2
    assert "not loading this server: about 13.9 MiB is more than half of the" in err
    assert "(maxmemory 8.0 MiB" in err
    assert "--allow-large" in err
    assert written == 0
    assert "cmdstat_evalsha" not in calls


def test_the_estimate_is_the_largest_scenario_s_and_each_primary_s_share() -> None:
    settings = Settings(tasks=10_000, memory_tasks=1_000, limit_requests=100)
    plan = footprint(settings, ("drain", "memory", "limit"), McpSettings(), peers=False)
    assert (plan.scenario, plan.keys) == ("drain", 20_064)
    assert footprint(settings, ("drain",), McpSettings(), peers=True).bytes > plan.bytes
    mib = 1024 * 1024
    one = Footprint(keys=0, bytes=10 * mib, scenario="drain")
    assert one.too_large_for([MemoryLimit("a:1", 0, 900 * mib)]) is None  # no maxmemory
    assert one.too_large_for([MemoryLimit("a:1", 100 * mib, 70 * mib)]) is None
    assert one.too_large_for([MemoryLimit("a:1", 100 * mib, 85 * mib)]) is not None
    # Three primaries: the fullest holds 6 of the 16 partitions, 3.75 MiB of the 10.
    three = [MemoryLimit(f"a:{i}", 100 * mib, 92 * mib) for i in range(3)]
    assert one.too_large_for(three) is None
    problem = one.too_large_for([*three[:2], MemoryLimit("a:2", 100 * mib, 94 * mib)])
    assert problem is not None
    assert "on the primary a:2" in problem


def test_clean_needs_a_server_and_nothing_else(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REDIS_URL", raising=False)
    from redis_tasks.__main__ import main

    stderr = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stderr)
    assert main(["bench", "--clean"]) == 2
    assert main(["bench", "--clean", "drain", "--redis-url", "redis://127.0.0.1:1/0"]) == 2
    assert stderr.getvalue().count("--clean takes a --redis-url") == 2
