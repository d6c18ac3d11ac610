"""What the harness asks Redis itself: command counters, CPU, memory, version, clients.

On a cluster every question goes to each primary (through the same topology the
library uses, so it works wherever the library does); the answers are summed, and
CPU is also kept per primary, so a run shows how evenly the primaries were loaded.

Nothing here changes the server: counters are read before and after a measurement
and subtracted (:func:`calls_between`), never reset, as the server may be an
operator's, watched by monitoring that expects them only to grow.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Final, Self
from urllib.parse import unquote, urlsplit

from redis_tasks._redis.client import ConnectionSettings
from redis_tasks._redis.cluster_topology import connect
from redis_tasks._redis.topology import Topology

__all__ = ["MemoryLimit", "Probe", "RedisAddress", "calls_between"]

# The harness's own commands (its questions, its run's keep-alive), left out of per-job
# counts; other clients' commands during a measurement cannot be told apart and count.
_OURS: Final = frozenset(
    {
        "info",
        "cluster|nodes",
        "cluster|slots",
        "ping",
        "hello",
        "memory|usage",
        "client|list",
        "client|setname",
    }
)
_TIMEOUT: Final = 10.0


def calls_between(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Calls per command from ``before`` to ``after`` (two :meth:`Probe.command_calls`).

    A command whose count went down was reset meanwhile (someone's ``CONFIG
    RESETSTAT``): its calls since then are all that is known, so they are taken.
    """
    out = {}
    for name, count in after.items():
        earlier = before.get(name, 0)
        out[name] = count - earlier if count >= earlier else count
    return out


@dataclass(frozen=True)
class MemoryLimit:
    """One primary's ``maxmemory`` (0: none) and ``used_memory``, in bytes."""

    node: str
    maxmemory: int
    used: int


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
    """Connections for the harness's own questions (``async with Probe(url)``); with a
    ``client_name``, every connection carries it (``CLIENT SETNAME``)."""

    def __init__(self, url: str, client_name: str | None = None) -> None:
        self.url = url
        self.cluster = False
        self._client_name = client_name
        self._topology: Topology | None = None

    async def __aenter__(self) -> Self:
        """Connect, and learn whether ``url`` is a cluster node (and its primaries)."""
        options = {} if self._client_name is None else {"client_name": self._client_name}
        settings = ConnectionSettings.from_url(
            self.url, timeout=_TIMEOUT, max_connections=4, options=options
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

    async def command_calls(self) -> dict[str, int]:
        """Calls per command so far (``INFO commandstats``), summed over the primaries:
        read before and after a measurement, and subtract (:func:`calls_between`).

        Commands run inside scripts count too, so this is the work Redis did, not
        the round trips. The harness's own ``INFO``, ``PING`` and the like are left out.
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

    async def primary_pids(self) -> list[int]:
        """The process ID of each primary's server, in :meth:`cpu_by_primary`'s order."""
        return [int(reply["process_id"]) for reply in await self._each_primary("INFO", "server")]

    async def cpu_seconds(self) -> float:
        """CPU seconds the primaries' server processes have used, together."""
        return sum(await self.cpu_by_primary())

    async def used_memory(self) -> int:
        """``used_memory`` of the primaries, together (bytes)."""
        return sum(
            int(reply["used_memory"]) for reply in await self._each_primary("INFO", "memory")
        )

    async def memory_limits(self) -> list[MemoryLimit]:
        """Every primary's ``maxmemory`` and ``used_memory`` (``INFO memory``)."""
        assert self._topology is not None
        names = sorted(node.name for node in self._topology.primaries())
        replies = await self._each_primary("INFO", "memory")
        return [
            MemoryLimit(name, int(reply.get("maxmemory", 0)), int(reply["used_memory"]))
            for name, reply in zip(names, replies, strict=True)
        ]

    async def client_names(self) -> set[str]:
        """The names of the connections to every primary (``CLIENT LIST``)."""
        return {
            fields["name"]
            for clients in await self._client_lists()
            for fields in clients
            if fields.get("name")
        }

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
