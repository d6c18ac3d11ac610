"""The backends the suites run on, and the servers behind them: what conftest's fixtures
build and what tests import (fixtures themselves live in ``tests/conftest.py``)."""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from redis.asyncio import Redis

from redis_tasks import InMemoryTaskManager, Limits, RedisTaskManager, testing
from redis_tasks._redis.client import Client
from redis_tasks._redis.keys import KeySpace
from redis_tasks.testing import RedisServer

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
ACL_SERVERS = {"acl": "redis", "valkey-acl": "valkey", "redis8-acl": "redis8"}
#: Which session fixture holds the server of each kind ``server_url`` is asked for.
SERVER_FIXTURES = {
    "redis": "redis_server",
    "cluster": "redis_cluster",
    "valkey": "valkey_server",
    "redis8": "redis8_server",
    "embedded": "embedded_url",
}


def server_url(request: pytest.FixtureRequest, kind: str) -> str:
    """The URL of the session's server of ``kind``: one of SERVERS or EXTRA_SERVERS, or
    the demo's "embedded" Redis."""
    server = request.getfixturevalue(SERVER_FIXTURES[kind])
    url: str = server if isinstance(server, str) else server.url
    return url


#: The page that holds the ACL line the library documents (``ACL SETUSER ...``).
README = Path(__file__).resolve().parents[2] / "docs" / "operations" / "redis-layout.md"


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
        # What the ACL line adds on 7.2 or later (Valkey says 7.2.4 here): redis-py
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
            state[key] = await value_of(self.client, key, kind)
        return state

    async def immortal_keys(self) -> list[str]:
        """Keys under the prefix without an expiry, other than the partition streams
        and stats."""
        assert self.client is not None
        found = []
        for key in await self.all_keys():
            if self.keys.is_partition_key(key):
                continue  # per-partition infrastructure, bounded by ack, MAXLEN, fields
            # -1: no expiry. -2 (gone) is a key that expired between the SCAN and
            # this call, which is what an expiry is for: a short rate state can.
            if await self.client.pttl(key) == -1 and key not in self.immortal_allowed:
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


@asynccontextmanager
async def real_backend(kind: str, url: str, prefix: str) -> AsyncIterator[Backend]:
    """A RedisTaskManager on the server at ``url``; on exit, no key of it may be immortal."""
    manager = RedisTaskManager.from_url(url, prefix=prefix)
    subject = Backend(kind, manager, prefix)
    async with manager:
        yield subject
        assert await subject.immortal_keys() == []


async def value_of(client: Any, key: Any, kind: str) -> Any:
    """What ``key`` (of type ``kind``) holds, whatever its type: a leak into any of them
    shows, and any change between two dumps."""
    if kind == "hash":
        return await client.hgetall(key)
    if kind == "stream":
        return await client.xrange(key)
    if kind == "string":
        return await client.get(key)
    if kind == "list":
        return await client.lrange(key, 0, -1)
    if kind == "set":
        return sorted(await client.smembers(key))
    if kind == "zset":
        return await client.zrange(key, 0, -1, withscores=True)
    raise AssertionError(f"a key of an unexpected type: {kind}")
