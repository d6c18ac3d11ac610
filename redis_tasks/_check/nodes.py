"""The servers behind a URL: one standalone server, or a cluster's nodes as it lists them.

A cluster is read from one node's ``CLUSTER NODES``: its primaries, their
replicas, the slots each serves and the nodes flagged ``fail`` or ``fail?``
(``pfail``). Every node is then asked ``INFO`` and ``CONFIG GET`` on its own
(settings such as eviction and persistence are per node, and so are ACLs).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Final

from redis.asyncio import Redis
from redis.crc import REDIS_CLUSTER_HASH_SLOTS
from redis.exceptions import NoPermissionError

from redis_tasks._redis.client import ConnectionSettings

from .report import Finding

__all__ = [
    "CONFIGS",
    "ClusterNode",
    "Facts",
    "cluster_findings",
    "cluster_nodes",
    "facts_of",
    "parse_nodes",
]

#: The settings ``check`` reads with ``CONFIG GET`` (7.0 takes several at once).
CONFIGS: Final = (
    "maxmemory-policy",
    "maxmemory",
    "appendonly",
    "appendfsync",
    "save",
    "cluster-node-timeout",
)
# INFO's sections that hold what the findings need.
_SECTIONS: Final = ("server", "memory", "persistence", "replication", "cluster")
# A cluster summary names at most this many primaries, then "and N more".
_NAMED: Final = 6


@dataclass(frozen=True)
class Facts:
    """What one server said: ``INFO`` and ``CONFIG GET`` (``config`` empty when refused)."""

    node: str
    info: dict[str, Any]
    config: dict[str, str] = field(default_factory=dict)


async def facts_of(settings: ConnectionSettings, node: str) -> Facts:
    """Ask ``node`` (``host:port``) for its facts, every call within the timeout."""
    host, _, port = node.rpartition(":")
    client = Redis.from_pool(settings.pool(host, int(port)))
    try:
        async with asyncio.timeout(settings.timeout):
            info = await client.info(*_SECTIONS)
        try:
            async with asyncio.timeout(settings.timeout):
                raw = await client.config_get(*CONFIGS)
        except NoPermissionError:
            raw = {}  # the ACL finding says so; INFO holds the essentials
        config = {_text(name): _text(value) for name, value in raw.items()}
        return Facts(node, info, config)
    finally:
        await client.aclose()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class ClusterNode:
    """One line of ``CLUSTER NODES``."""

    name: str  # host:port
    primary: bool
    primary_id: str | None  # a replica's primary
    node_id: str
    flags: frozenset[str]
    slots: tuple[tuple[int, int], ...]

    @property
    def failing(self) -> str | None:
        """``"fail"`` or ``"pfail"`` when the cluster thinks the node down, else ``None``."""
        if "fail" in self.flags:
            return "fail"
        return "pfail" if "fail?" in self.flags else None

    @property
    def slot_count(self) -> int:
        """How many slots the node serves."""
        return sum(last - first + 1 for first, last in self.slots)


def parse_nodes(text: str, seed_host: str) -> list[ClusterNode]:
    """The nodes of a ``CLUSTER NODES`` reply (an address without a host is ``seed_host``'s)."""
    nodes = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 8:
            continue
        address = words[1].split("@")[0]
        host, _, port = address.rpartition(":")
        flags = frozenset(words[2].split(","))
        slots = []
        for word in words[8:]:
            if word.startswith("["):
                continue  # a slot being imported or migrated: its owner still serves it
            first, _, last = word.partition("-")
            slots.append((int(first), int(last or first)))
        nodes.append(
            ClusterNode(
                name=f"{host or seed_host}:{port}",
                primary="master" in flags,
                primary_id=None if words[3] == "-" else words[3],
                node_id=words[0],
                flags=flags,
                slots=tuple(slots),
            )
        )
    return nodes


def _ranges(slots: list[int]) -> str:
    spans: list[str] = []
    start = previous = None
    for slot in [*slots, None]:
        if slot is not None and previous is not None and slot == previous + 1:
            previous = slot
            continue
        if start is not None:
            spans.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = slot
    return ", ".join(spans[:5]) + (f" and {len(spans) - 5} more ranges" if len(spans) > 5 else "")


def cluster_findings(nodes: list[ClusterNode]) -> list[Finding]:
    """The cluster's shape, its slot coverage, and the nodes it thinks down."""
    serving = [n for n in nodes if n.primary and n.slots]
    replicas: dict[str, list[ClusterNode]] = {n.node_id: [] for n in serving}
    for node in nodes:
        if not node.primary and node.primary_id in replicas:
            replicas[node.primary_id].append(node)
    parts = [
        f"{n.name} ({n.slot_count} slots; replicas: "
        f"{', '.join(r.name for r in replicas[n.node_id]) or 'none'})"
        for n in sorted(serving, key=lambda n: n.slots[0])
    ]
    more = f" and {len(parts) - _NAMED} more" if len(parts) > _NAMED else ""
    count = sum(len(r) for r in replicas.values())
    shape = {n.name: [r.name for r in replicas[n.node_id]] for n in serving}
    findings = [
        Finding(
            "ok",
            "cluster",
            f"{len(serving)} primaries, {count} replicas: {'; '.join(parts[:_NAMED])}{more}",
            data={"primaries": shape},
        )
    ]
    served = [False] * REDIS_CLUSTER_HASH_SLOTS
    for node in serving:
        if node.failing != "fail":
            for first, last in node.slots:
                served[first : last + 1] = [True] * (last - first + 1)
    missing = [slot for slot, ok in enumerate(served) if not ok]
    if missing:
        findings.append(
            Finding(
                "error",
                "slots",
                f"{len(missing)} of {REDIS_CLUSTER_HASH_SLOTS} slots have no working primary "
                f"({_ranges(missing)}): calls on their keys fail (CLUSTERDOWN)",
                "let a replica take over, or assign the slots: redis-cli --cluster fix HOST:PORT",
                data={"unserved": len(missing)},
            )
        )
    else:
        findings.append(Finding("ok", "slots", f"all {REDIS_CLUSTER_HASH_SLOTS} slots served"))
    findings.append(_failing(nodes))
    return findings


def _failing(nodes: list[ClusterNode]) -> Finding:
    down = [n for n in nodes if n.failing is not None]
    if not down:
        return Finding("ok", "nodes", f"{len(nodes)} nodes, none flagged fail or pfail")
    described = []
    worst = "warn"
    for node in down:
        role = "primary" if node.primary else "replica"
        if node.primary and node.slots and node.failing == "fail":
            worst = "error"
        described.append(f"{node.name} ({role}, {node.failing})")
    return Finding(
        "error" if worst == "error" else "warn",
        "nodes",
        f"{len(down)} of {len(nodes)} nodes flagged down: {', '.join(described)}",
        "restart them or replace them (CLUSTER FORGET a node that is gone for good)",
        data={"failing": {n.name: n.failing for n in down}},
    )


async def cluster_nodes(settings: ConnectionSettings, node: str) -> str:
    """The ``CLUSTER NODES`` text of ``node``."""
    host, _, port = node.rpartition(":")
    client = Redis.from_pool(settings.pool(host, int(port)))
    try:
        async with asyncio.timeout(settings.timeout):
            # Two words, so that no client-side parsing of CLUSTER NODES applies.
            reply = await client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
    finally:
        await client.aclose()
    return _text(reply)
