"""Fixtures: a real redis-server per session, and the backends the contract suite runs on."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis

from redis_tasks import InMemoryTaskManager, Limits, RedisTaskManager
from redis_tasks._keys import KeySpace
from redis_tasks.testing import RedisServer, start_redis_server

BACKENDS = ("memory", "fakeredis", "redis")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run ``redis_only`` contract tests on the Redis-backed variants alone."""
    selected: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        callspec = getattr(item, "callspec", None)
        is_memory = callspec is not None and callspec.params.get("backend_name") == "memory"
        (dropped if is_memory and item.get_closest_marker("redis_only") else selected).append(item)
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
def fake_server() -> Any:
    """One fakeredis server (with Lua) shared by the session's fakeredis clients."""
    return fakeredis.FakeServer()


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"t{uuid.uuid4().hex[:12]}"


class Backend:
    """A manager under test plus raw access to what it stored."""

    def __init__(self, name: str, manager: Any, client: Redis | None, prefix: str) -> None:
        self.name = name
        self.manager = manager
        self.client = client
        self.prefix = prefix
        self.keys = KeySpace(prefix)
        # Keys that may legitimately never expire (unlimited-TTL tests).
        self.immortal_allowed: set[str] = set()

    @property
    def is_redis(self) -> bool:
        return self.client is not None

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
        """Keys under the prefix without an expiry, other than the partition streams."""
        assert self.client is not None
        found = []
        for key in await self.all_keys():
            if key.endswith((":work", ":events")) and ":task:" not in key:
                continue  # per-partition infrastructure, bounded by ack and MAXLEN
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
) -> tuple[Any, Redis | None]:
    """A manager of backend ``name`` with its raw client (None for memory)."""
    if name == "memory":
        return InMemoryTaskManager(limits=limits, **options), None
    if name == "fakeredis":
        client = fakeredis.aioredis.FakeRedis(server=fake_server)
        manager = RedisTaskManager(
            client, prefix=prefix, limits=limits, close_client=True, **options
        )
        return manager, client
    assert redis_url is not None
    manager = RedisTaskManager.from_url(redis_url, prefix=prefix, limits=limits, **options)
    return manager, manager.client


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
    url = request.getfixturevalue("redis_server").url if backend_name == "redis" else None

    @asynccontextmanager
    async def factory(*, prefix: str = prefix, **options: Any) -> AsyncIterator[Backend]:
        manager, client = make_manager(
            backend_name, prefix, redis_url=url, fake_server=fake_server, **options
        )
        subject = Backend(backend_name, manager, client, prefix)
        async with manager:
            yield subject
            if subject.is_redis:
                # No key of a task may outlive it: every one carries an expiry.
                assert await subject.immortal_keys() == []

    return factory


@pytest.fixture
async def backend(make_backend: BackendFactory) -> AsyncIterator[Backend]:
    """The contract suite's backend: in-memory, fakeredis, or real redis-server."""
    async with make_backend() as subject:
        yield subject


@pytest.fixture
async def redis_backend(redis_server: RedisServer, prefix: str) -> AsyncIterator[Backend]:
    """A RedisTaskManager on the real server only."""
    manager = RedisTaskManager.from_url(redis_server.url, prefix=prefix)
    subject = Backend("redis", manager, manager.client, prefix)
    async with manager:
        yield subject
        assert await subject.immortal_keys() == []
