"""``redis-tasks check``: what it finds on real servers, and what it tells the operator.

Debian's Redis 7.0, Valkey 9.1, Redis 8.2 and the 3+3 cluster are ready (exit
0); so is the README's ACL user, whose rights are probed on scratch keys that
are gone afterwards, since it may not run ``ACL DRYRUN``. A user missing one
command, a key pattern or an inspection command, and a server evicting with
``allkeys-lru``, are each named with their fix. An unreachable server or a bad
argument is one line on stderr and exit 2, and the password is never printed.
The command list the check asks for is the README's ACL line, word for word.
Most runs are in-process; a few go through the installed command line.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from redis.asyncio import Redis

from redis_tasks.__main__ import main
from redis_tasks._check import ACL_COMMANDS, Report, check
from redis_tasks._check.acl import (
    _PROBES,
    CLUSTER_ONLY,
    NEWER,
    SCRIPT_COMMANDS,
    SHARD_CHANNELS,
)
from redis_tasks._check.nodes import cluster_findings, parse_nodes
from redis_tasks._check.partitions import partition_finding
from redis_tasks.testing import RedisCluster, RedisServer, free_port, start_redis_server
from tests.support.backends import README, acl_user

# Few pings in-process: the latency figure is not what these tests are about.
PINGS = 20


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``redis-tasks check ARGS`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "redis_tasks", "check", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def checked(url: str, prefix: str = "rt") -> Report:
    return await check(url, prefix=prefix, call_timeout=5.0, pings=PINGS)


def topic(report: Report, name: str) -> list[str]:
    """The lines of the findings about ``name``."""
    return [f.line() for f in report.findings if f.topic == name]


def levels(report: Report) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for finding in report.findings:
        found.setdefault(finding.topic, set()).add(finding.level)
    return found


async def scratch_keys(admin: Redis, prefix: str) -> list[bytes]:
    return [key async for key in admin.scan_iter(match=f"{{{prefix}:check}}*")]


async def denied(admin: Redis, user: str) -> list[str]:
    """What Redis refused ``user``, by command; the log is emptied for the fixture's
    own check (which allows no refusal) afterwards."""
    entries = [str(e["object"]) for e in await admin.acl_log() if e.get("username") == user]
    await admin.acl_log_reset()
    return sorted(entries)


def test_the_commands_checked_are_the_readme_acl_line() -> None:
    (line,) = re.findall(r"^ACL SETUSER .*$", README.read_text(), re.M)
    words = line.split()
    assert tuple(w[1:] for w in words if w.startswith("+")) == ACL_COMMANDS
    assert "~{rt:*" in words
    assert "&{rt:*" in words
    assert set(_PROBES) == {*ACL_COMMANDS, *NEWER}, "every command needs a probe"
    assert set(ACL_COMMANDS) >= CLUSTER_ONLY


@pytest.mark.parametrize(
    ("fixture", "server"),
    [
        ("redis_server", "Redis 7.0."),
        ("valkey_server", "Valkey 9.1."),
        ("redis8_server", "Redis 8.2."),
    ],
)
async def test_each_server_build_is_ready(
    request: pytest.FixtureRequest, fixture: str, server: str
) -> None:
    instance: RedisServer = request.getfixturevalue(fixture)
    report = await checked(instance.url)
    assert report.ready, report.lines()
    (said,) = topic(report, "server")
    assert f"ok     server: {server}" in said
    assert said.endswith(", standalone")
    assert levels(report) == {
        "server": {"ok"},
        "eviction": {"ok"},
        "memory": {"ok"},
        "persistence": {"warn"},  # the test servers keep nothing on disk
        "replicas": {"ok"},
        "acl": {"ok"},
        "scripts": {"ok"},
        "latency": {"ok"},
    }
    assert "checked by ACL DRYRUN" in topic(report, "acl")[0]
    assert "none (no AOF, no RDB snapshots)" in topic(report, "persistence")[0]


def test_the_cluster_is_ready(redis_cluster: RedisCluster) -> None:
    done = cli("--redis-url", redis_cluster.url, "--pings", "50")
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("redis-tasks check redis://127.0.0.1:")
    assert lines[-1].startswith("ready")
    text = done.stdout
    assert "ok     server: Redis 7.0." in text
    assert ", cluster\n" in text
    assert "ok     cluster: 3 primaries, 3 replicas: " in text
    assert "ok     slots: all 16384 slots served" in text
    assert "ok     nodes: 6 nodes, none flagged fail or pfail" in text
    assert "ok     replicas: every primary has 1+ online replica: wait_replicas up to 1" in text
    assert "the default (auto) waits for one on every write" in text
    # The fixture's cluster-node-timeout is 2 s: a 5 s deadline does not outlast a failover.
    assert "warn   failover: cluster-node-timeout 2000 ms" in text
    assert "timeout=6" in text
    assert "on every node (checked by ACL DRYRUN)" in text
    assert "Lua scripts load on every primary" in text
    assert "over 50 pings to each of 3 primaries" in text
    # 16 partitions cannot fall evenly on 3 primaries: the count that does is named.
    assert "warn   partitions: 16 partitions fall 6/5/5 on 3 primaries" in text
    assert "set partitions=32 on every worker of the prefix first" in text


def test_the_partition_count_that_spreads_evenly_is_the_one_suggested() -> None:
    """The finding's figures, from the tags alone: 16 cap 3 equal primaries at 2.67x,
    32 (11/11/10) at 2.91x, which is even enough; one primary needs nothing."""
    text = "\n".join(
        [
            "a 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460",
            "b 10.0.0.2:7000@17000 master - 0 0 2 connected 5461-10922",
            "c 10.0.0.3:7000@17000 master - 0 0 3 connected 10923-16383",
        ]
    )
    nodes = parse_nodes(text, "seed")
    uneven = partition_finding(nodes, "rt", 16)
    assert uneven.level == "warn"
    assert uneven.data["cap"] == 2.67
    assert uneven.data["suggested"] == 32
    even = partition_finding(nodes, "rt", 32)
    assert even.level == "ok"
    assert sorted(even.data["per_primary"].values()) == [10, 11, 11]
    alone = parse_nodes("a 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-16383", "x")
    assert partition_finding(alone, "rt", 16).level == "ok"


def test_a_cluster_reports_unserved_slots_and_failing_nodes() -> None:
    # CLUSTER NODES of a cluster whose primary b failed before a replica took over,
    # and whose replica f is suspected down.
    text = "\n".join(
        [
            "a 10.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460",
            "b 10.0.0.2:7000@17000 master,fail - 0 0 2 connected 5461-10922",
            "c 10.0.0.3:7000@17000 master - 0 0 3 connected 10923-16383 [99->-x]",
            "d 10.0.0.4:7000@17000 slave a 0 0 1 connected",
            "e 10.0.0.5:7000@17000 slave b 0 0 2 connected",
            "f 10.0.0.6:7000@17000 slave,fail? c 0 0 3 connected",
        ]
    )
    findings = {f.topic: f for f in cluster_findings(parse_nodes(text, "seed"))}
    assert findings["cluster"].message.startswith("3 primaries, 3 replicas: 10.0.0.1:7000")
    assert findings["slots"].level == "error"
    assert "5462 of 16384 slots have no working primary (5461-10922)" in findings["slots"].message
    assert findings["nodes"].level == "error"
    assert "10.0.0.2:7000 (primary, fail), 10.0.0.6:7000 (replica, pfail)" in (
        findings["nodes"].message
    )


@pytest.mark.parametrize("shard_channels", [True, False])
async def test_the_readme_acl_user_on_a_cluster(
    redis_cluster: RedisCluster, prefix: str, shard_channels: bool
) -> None:
    """Every node is probed (ACLs are per node); the nodes that do not serve the scratch
    keys answer MOVED, which the ACL let through. Without the shard channels the cluster
    still works, its events read otherwise: a warning."""
    (line,) = re.findall(r"^ACL SETUSER .*$", README.read_text(), re.M)
    user, password = f"app-{prefix}", "pw-" + prefix
    words = line.replace("rt-app", user).replace(">CHANGE-ME", f">{password}").split()
    words = [w.replace("{rt:*", f"{{{prefix}:*") for w in words]
    if not shard_channels:
        words = [w for w in words if w not in ("+spublish", "+ssubscribe") and w[0] != "&"]
    admins = [Redis.from_url(node.url) for node in redis_cluster.servers]
    try:
        for admin in admins:
            await admin.execute_command(*words)  # type: ignore[no-untyped-call]
        url = redis_cluster.url.replace("redis://", f"redis://{user}:{password}@")
        report = await checked(url, prefix)
        assert report.ready, "\n".join(report.lines())
        acl = [f for f in report.findings if f.topic == "acl"]
        if shard_channels:
            assert [f.level for f in acl] == ["ok"]
            assert "on every node (checked by running each on scratch keys" in acl[0].message
        else:
            assert [f.level for f in acl] == ["warn"]
            assert acl[0].message == (
                f"user {user} may not run spublish, ssubscribe on every node: task events "
                "are read with one blocking XREAD per partition"
            )
        for admin in admins:
            assert await scratch_keys(admin, prefix) == []
    finally:
        for admin in admins:
            await admin.acl_deluser(user)
            await admin.acl_log_reset()
            await admin.aclose()


@pytest.mark.parametrize("fixture", ["redis_server", "valkey_server", "redis8_server"])
async def test_the_readme_acl_user_is_ready(
    request: pytest.FixtureRequest, fixture: str, prefix: str
) -> None:
    server: RedisServer = request.getfixturevalue(fixture)
    async with acl_user(server, prefix) as (url, admin):
        report = await checked(url, prefix)
        assert report.ready, report.lines()
        (said,) = topic(report, "acl")
        assert f"may run every command the library needs on {{{prefix}:*" in said
        assert (
            f"on scratch keys {{{prefix}:check}}:probe:*, since deleted, as ACL DRYRUN is refused"
            in said
        )
        assert await scratch_keys(admin, prefix) == []
        # Its one refusal: the ACL DRYRUN asked first.
        assert await denied(admin, f"app-{prefix}") == ["acl|dryrun"]
        password = url.split(":")[2].split("@")[0]
        assert password not in "\n".join(report.lines()) + json.dumps(report.to_json())


async def test_a_user_missing_one_command_is_told_which_and_how(
    redis_server: RedisServer, prefix: str
) -> None:
    user = f"app-{prefix}"
    async with acl_user(redis_server, prefix) as (url, admin):
        await admin.execute_command("ACL", "SETUSER", user, "-xautoclaim")  # type: ignore[no-untyped-call]
        done = cli("--redis-url", url, "--prefix", prefix, "--pings", "10")
        assert done.returncode == 1, done.stdout + done.stderr
        (line,) = [x for x in done.stdout.splitlines() if x.startswith("error")]
        assert line == (
            f"error  acl: user {user} may not run xautoclaim: the library needs it. "
            f"Fix: ACL SETUSER {user} +xautoclaim"
        )
        assert done.stdout.splitlines()[-1] == "not ready: 1 error, 1 warning"
        assert await scratch_keys(admin, prefix) == []
        assert await denied(admin, user) == ["acl|dryrun", "xautoclaim"]


@pytest.mark.parametrize(
    ("change", "level", "said", "fix"),
    [
        (["-hlen"], "warn", "may not run hlen: inspect, the dashboard", "+hlen"),
        (["-info"], "error", "may not run info: the library needs it", "+info"),
        (["resetkeys", "~{elsewhere:*"], "error", "may not use keys under {P:*", "~{P:*"),
    ],
)
async def test_other_refusals_are_named_with_their_weight(
    redis_server: RedisServer, prefix: str, change: list[str], level: str, said: str, fix: str
) -> None:
    user = f"app-{prefix}"
    async with acl_user(redis_server, prefix) as (url, admin):
        await admin.execute_command("ACL", "SETUSER", user, *change)  # type: ignore[no-untyped-call]
        report = await checked(url, prefix)
        found = [f for f in report.findings if f.topic == "acl"]
        assert len(found) == 1, report.lines()
        finding = found[0]
        assert finding.level == level
        assert said.replace("P", prefix) in finding.message
        assert finding.fix == f"ACL SETUSER {user} {fix.replace('P', prefix)}"
        assert report.ready is (level == "warn")
        await denied(admin, user)


async def test_acl_dryrun_is_used_where_the_user_may_run_it(
    redis_server: RedisServer, prefix: str
) -> None:
    user = f"app-{prefix}"
    async with acl_user(redis_server, prefix) as (url, admin):
        await admin.execute_command("ACL", "SETUSER", user, "-xautoclaim", "+acl|dryrun")  # type: ignore[no-untyped-call]
        report = await checked(url, prefix)
        assert not report.ready
        (finding,) = [f for f in report.findings if f.topic == "acl"]
        assert finding.data == {"commands_refused": ["xautoclaim"]}
        # ACL DRYRUN runs nothing: no refusal is logged, no scratch key made.
        assert await denied(admin, user) == []
        assert await scratch_keys(admin, prefix) == []


async def test_a_user_refused_any_command_a_task_script_calls_is_not_ready(
    redis_server: RedisServer, prefix: str
) -> None:
    """What each script calls is read from the script itself: a refusal of any of those
    (bar the shard channels, under pcall) is an error naming it, never a warning an
    operator may follow (``hget``, ``lindex``, ``xlen`` and ``xrange`` were called
    optional, for inspection only, while dispatch calls them)."""
    assert set(ACL_COMMANDS) >= SCRIPT_COMMANDS
    assert {"hget", "lindex", "xlen", "xrange", "xinfo|groups", "llen"} <= SCRIPT_COMMANDS
    user = f"app-{prefix}"
    async with acl_user(redis_server, prefix) as (url, admin):
        # ACL DRYRUN: each check asks, and runs nothing.
        await admin.execute_command("ACL", "SETUSER", user, "+acl|dryrun")  # type: ignore[no-untyped-call]
        wrong = {}
        for command in sorted(SCRIPT_COMMANDS - SHARD_CHANNELS):
            await admin.execute_command("ACL", "SETUSER", user, f"-{command}")  # type: ignore[no-untyped-call]
            report = await checked(url, prefix)
            errors = [f for f in report.findings if f.topic == "acl" and f.level == "error"]
            if report.ready or [f.data for f in errors] != [{"commands_refused": [command]}]:
                wrong[command] = report.lines()
            await admin.execute_command("ACL", "SETUSER", user, f"+{command}")  # type: ignore[no-untyped-call]
        assert wrong == {}
        assert await denied(admin, user) == []


def test_an_evicting_server_is_not_ready(tmp_path: Path) -> None:
    server = start_redis_server(tmp_path, "--maxmemory-policy", "allkeys-lru")
    try:
        done = cli("--redis-url", server.url, "--pings", "10")
        assert done.returncode == 1, done.stdout + done.stderr
        assert (
            "error  eviction: maxmemory-policy is allkeys-lru: under memory pressure Redis "
            "evicts keys, and a task whose keys are evicted vanishes. Fix: CONFIG SET "
            "maxmemory-policy noeviction, and in redis.conf"
        ) in done.stdout
        assert done.stdout.splitlines()[-1] == "not ready: 1 error, 1 warning"
        assert done.stderr == ""
        document = json.loads(
            subprocess.run(
                [sys.executable, "-m", "redis_tasks", "check", "--json", "--pings", "0"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
                env={"REDIS_URL": server.url, "PATH": ""},
            ).stdout
        )
        assert document["ready"] is False
        assert document["errors"] == 1
        (eviction,) = [f for f in document["findings"] if f["topic"] == "eviction"]
        assert eviction["level"] == "error"
        assert eviction["data"] == {"maxmemory_policy": "allkeys-lru"}
    finally:
        server.stop()


def test_an_unreachable_server_or_a_bad_argument_is_one_line(
    capsys: pytest.CaptureFixture[str], redis_server: RedisServer
) -> None:
    secret = "s3cr3t-do-not-show"
    cases = [
        ["--redis-url", f"redis://app:{secret}@127.0.0.1:{free_port()}/0"],
        ["--redis-url", redis_server.url.replace("redis://", f"redis://nobody:{secret}@")],
        ["--redis-url", redis_server.url, "--timeout", "0"],
        ["--redis-url", f"http://app:{secret}@127.0.0.1:1"],
        ["--redis-url", redis_server.url, "--prefix", "{x}"],
    ]
    for argv in cases:
        assert main(["check", *argv]) == 2, argv
        out, err = capsys.readouterr()
        assert out == ""
        assert err.count("\n") == 1
        assert err.startswith("redis-tasks check: ")
        assert secret not in err
    assert "cannot reach 127.0.0.1:" in cli(*cases[0]).stderr


async def test_a_prefix_whose_fastmcp_servers_keep_callers_in_clear_is_told(
    redis_server: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from redis_tasks.fastmcp import SnapshotKey, TasksExtension

    monkeypatch.delenv("REDIS_TASKS_SNAPSHOT_KEY", raising=False)
    assert topic(await checked(redis_server.url, prefix), "snapshot key") == []  # no server yet
    async with TasksExtension(redis_server.url, prefix=prefix).lifespan():
        (said,) = topic(await checked(redis_server.url, prefix), "snapshot key")
    assert said.startswith("warn   snapshot key: this prefix's FastMCP servers keep callers")
    key = SnapshotKey("a-secret-of-enough-characters")
    async with TasksExtension(redis_server.url, prefix=prefix, snapshot_key=key).lifespan():
        report = await checked(redis_server.url, prefix)
    (found,) = [f for f in report.findings if f.topic == "snapshot key"]
    assert (found.level, found.data) == ("ok", {"key_id": key.key_id.hex()})
