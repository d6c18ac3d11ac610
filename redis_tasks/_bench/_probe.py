"""What the harness asks Redis itself: command counters, version, and where it listens."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis, RedisCluster

from redis_tasks._client import build_client, is_cluster

__all__ = ["Probe", "RedisAddress"]

# The harness's own commands, left out of per-job counts.
_OURS: Final = frozenset({"info", "config|resetstat", "config", "cluster|nodes", "cluster|slots"})
_TIMEOUT: Final = 10.0


@dataclass(frozen=True)
class RedisAddress:
    """Where a Redis URL points, as ``redis-benchmark`` wants it."""

    host: str
    port: int
    username: str | None
    password: str | None = field(repr=False)
    tls: bool = False

    @classmethod
    def parse(cls, url: str) -> RedisAddress:
        """Split ``redis://[user:password@]host:port[/db]`` (or ``rediss://``)."""
        parts = urlsplit(url)
        if parts.scheme not in ("redis", "rediss"):
            raise ValueError("only redis:// and rediss:// URLs can be benchmarked")
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 6379,
            username=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            tls=parts.scheme == "rediss",
        )


class Probe:
    """A connection for the harness's own questions (``async with Probe(url)``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cluster = False
        self._client: Any = None

    async def __aenter__(self) -> Probe:
        """Connect, and learn whether ``url`` is a cluster node."""
        standalone = build_client(
            self.url, cluster=False, timeout=_TIMEOUT, max_connections=4, options={}
        )
        assert isinstance(standalone, Redis)
        self.cluster = await is_cluster(standalone, _TIMEOUT)
        if self.cluster:
            await standalone.aclose()
            self._client = build_client(
                self.url, cluster=True, timeout=_TIMEOUT, max_connections=4, options={}
            )
            await self._client.initialize()
        else:
            self._client = standalone
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the connection."""
        await self._client.aclose()

    async def _each_primary(self, command: str, *args: str) -> list[Any]:
        async with asyncio.timeout(_TIMEOUT):
            if self.cluster:
                replies = await self._client.execute_command(
                    command, *args, target_nodes=RedisCluster.PRIMARIES
                )
                return list(replies.values()) if isinstance(replies, dict) else [replies]
            return [await self._client.execute_command(command, *args)]

    async def reset_stats(self) -> None:
        """``CONFIG RESETSTAT`` on every primary."""
        await self._each_primary("CONFIG", "RESETSTAT")

    async def command_calls(self) -> dict[str, int]:
        """Calls per command since the last reset, summed over the primaries.

        Commands run inside scripts count too, so this is the work Redis did, not
        the round trips. The harness's own ``INFO`` and ``CONFIG`` are left out.
        """
        totals: dict[str, int] = {}
        for reply in await self._each_primary("INFO", "commandstats"):
            # redis-py parses INFO into {"cmdstat_<name>": {"calls": ..., ...}}.
            for key, fields in reply.items():
                name = key.removeprefix("cmdstat_")
                if name not in _OURS:
                    totals[name] = totals.get(name, 0) + int(fields["calls"])
        return totals

    async def cpu_seconds(self) -> float:
        """CPU seconds (user and system) the primaries' server processes have used."""
        return sum(
            float(reply["used_cpu_user"]) + float(reply["used_cpu_sys"])
            for reply in await self._each_primary("INFO", "cpu")
        )

    async def version(self) -> str:
        """The server's ``redis_version``."""
        reply = (await self._each_primary("INFO", "server"))[0]
        return str(reply.get("redis_version", "unknown"))
