"""What the harness asks Redis itself: command counters, CPU, version, where it listens.

On a cluster every question goes to each primary (through the same topology the
library uses, so it works wherever the library does); the answers are summed, and
CPU is also kept per primary, so a run shows how evenly the primaries were loaded.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import unquote, urlsplit

from redis_tasks._redis.client import ConnectionSettings
from redis_tasks._redis.cluster_topology import connect
from redis_tasks._redis.topology import Topology

__all__ = ["Probe", "RedisAddress"]

# The harness's own commands, left out of per-job counts.
_OURS: Final = frozenset(
    {
        "info",
        "config|resetstat",
        "config",
        "cluster|nodes",
        "cluster|slots",
        "ping",
        "hello",
        "memory|usage",
    }
)
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
    """Connections for the harness's own questions (``async with Probe(url)``)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.cluster = False
        self._topology: Topology | None = None

    async def __aenter__(self) -> Probe:
        """Connect, and learn whether ``url`` is a cluster node (and its primaries)."""
        settings = ConnectionSettings.from_url(
            self.url, timeout=_TIMEOUT, max_connections=4, options={}
        )
        self._topology = await connect(settings, None)
        self.cluster = self._topology.is_cluster
        return self

    async def __aexit__(self, *exc: object) -> None:
        """Close the connections."""
        if self._topology is not None:
            await self._topology.aclose()

    async def _each_primary(self, *command: str) -> list[Any]:
        """``command``'s reply from every primary, in a stable order (by address)."""
        assert self._topology is not None
        nodes = sorted(self._topology.primaries(), key=lambda node: node.name)
        async with asyncio.timeout(_TIMEOUT):
            replies: list[Any] = await asyncio.gather(
                *(node.client.execute_command(*command) for node in nodes)  # type: ignore[no-untyped-call]
            )
        return replies

    @property
    def primaries(self) -> int:
        """How many primaries serve the data (1 on a standalone server)."""
        assert self._topology is not None
        return len(self._topology.primaries())

    def owner(self, key: str) -> tuple[str, int]:
        """``(host, port)`` of the primary that serves ``key``."""
        assert self._topology is not None
        host, _, port = self._topology.node_for(key).name.rpartition(":")
        return host, int(port)

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

    async def cpu_by_primary(self) -> list[float]:
        """CPU seconds (user and system) each primary's server process has used."""
        return [
            float(reply["used_cpu_user"]) + float(reply["used_cpu_sys"])
            for reply in await self._each_primary("INFO", "cpu")
        ]

    async def cpu_seconds(self) -> float:
        """CPU seconds the primaries' server processes have used, together."""
        return sum(await self.cpu_by_primary())

    async def used_memory(self) -> int:
        """``used_memory`` of the primaries, together (bytes)."""
        return sum(
            int(reply["used_memory"]) for reply in await self._each_primary("INFO", "memory")
        )

    async def memory_usage(self, keys: list[str]) -> int:
        """``MEMORY USAGE`` of ``keys`` (each asked of its own primary), together; a
        missing key counts 0."""
        assert self._topology is not None
        topology = self._topology
        async with asyncio.timeout(_TIMEOUT):
            sizes = await asyncio.gather(
                *(
                    topology.node_for(key).client.execute_command(  # type: ignore[no-untyped-call]
                        "MEMORY", "USAGE", key, "SAMPLES", "0"
                    )
                    for key in keys
                )
            )
        return sum(int(size or 0) for size in sizes)

    async def _client_lists(self) -> list[list[dict[str, str]]]:
        """``CLIENT LIST`` of every primary, each connection as its fields."""
        out = []
        for reply in await self._each_primary("CLIENT", "LIST"):
            text = reply.decode() if isinstance(reply, bytes) else str(reply)
            out.append(
                [
                    dict(part.partition("=")[::2] for part in line.split())
                    for line in text.splitlines()
                ]
            )
        return out

    async def newest_clients(self) -> list[int]:
        """The highest connection ID on each primary (a mark for :meth:`blocked_clients`)."""
        return [max(int(c["id"]) for c in clients) for clients in await self._client_lists()]

    async def blocked_clients(self, command: str, newer_than: list[int]) -> int:
        """Connections blocked in ``command`` (e.g. ``xreadgroup``), on all primaries,
        opened after the mark ``newer_than`` (:meth:`newest_clients`).

        A worker blocks one stream read per partition once it is ready for work,
        so this tells when the worker processes started after the mark are reading,
        whatever else uses the server.
        """
        count = 0
        for mark, clients in zip(newer_than, await self._client_lists(), strict=True):
            for fields in clients:
                if (
                    int(fields["id"]) > mark
                    and fields.get("cmd") == command
                    and "b" in fields.get("flags", "")
                ):
                    count += 1
        return count

    async def replicas(self) -> int:
        """How many replicas the primaries have, the fewest of any (0 without)."""
        return min(
            int(reply.get("connected_slaves", 0))
            for reply in await self._each_primary("INFO", "replication")
        )

    async def version(self) -> str:
        """The server's ``redis_version``."""
        reply = (await self._each_primary("INFO", "server"))[0]
        return str(reply.get("redis_version", "unknown"))
