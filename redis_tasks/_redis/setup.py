"""What a manager checks once when it starts: eviction, persistence, whether it may publish.

Each is a question a manager asks the server on entering and never again; none
changes what a script does, only what the manager logs or sends.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from redis.exceptions import NoPermissionError

from redis_tasks._errors import BackendError

from .client import CLIENT_ERRORS
from .topology import Topology

__all__ = ["hush_start_warnings", "may_publish", "warn_if_evicting", "warn_if_not_persisting"]

logger = logging.getLogger("redis_tasks")

# What this process said already, as (event, primary): a process that enters several
# managers (a FastMCP worker: its app's and its own) says each once, not once a manager.
_said: set[tuple[str, str]] = set()
# Set by a process that only reads (``inspect``, ``tenants``): the warnings are for
# those that store tasks, and ``check`` reports them.
_hushed = False


def hush_start_warnings() -> None:
    """This process only reads: its managers do not warn of eviction or persistence (the
    processes that store tasks do, and ``redis-tasks check`` reports both)."""
    global _hushed
    _hushed = True


def _fresh(event: str, nodes: list[str]) -> list[str]:
    """The ``nodes`` not yet warned of for ``event`` in this process (now noted)."""
    if _hushed:
        return []
    fresh = [n for n in nodes if (event, n) not in _said]
    _said.update((event, n) for n in fresh)
    return fresh


async def warn_if_evicting(topology: Topology) -> None:
    """Log a warning when Redis may evict keys: an evicted task is a lost task.

    Best effort: a server that refuses ``CONFIG GET`` (a restricted ACL user, a
    managed service) is not asked again and nothing is logged.
    """
    try:
        async with asyncio.timeout(topology.timeout):
            configs = await asyncio.gather(
                *(node.client.config_get("maxmemory-policy") for node in topology.primaries())
            )
    except (*CLIENT_ERRORS, TimeoutError):
        return
    named = [
        (node.name, _config_value(config, "maxmemory-policy"))
        for node, config in zip(topology.primaries(), configs, strict=True)
    ]
    nodes = _fresh("eviction_policy", [n for n, p in named if p not in (None, "noeviction")])
    evicting = sorted({p for n, p in named if n in nodes and p is not None})
    if evicting:
        logger.warning(
            "Redis maxmemory-policy is %s, not noeviction: under memory pressure Redis "
            "may evict task keys, and an evicted task is lost. Set noeviction.",
            "/".join(evicting),
            extra={"event": "eviction_policy", "policy": "/".join(evicting)},
        )


async def warn_if_not_persisting(topology: Topology) -> None:
    """Log a warning, once at start, when a primary keeps nothing on disk (no AOF and no
    RDB snapshots): its restart loses every task, whatever ``wait_replicas`` says.

    What ``redis-tasks check`` reports as its ``persistence`` finding, said by every
    process that enters a manager (workers, MCP servers), not only by whoever runs the
    check. Best effort, like :func:`warn_if_evicting`: a server that refuses
    ``CONFIG GET`` is not judged.
    """
    primaries = topology.primaries()
    try:
        async with asyncio.timeout(topology.timeout):
            configs = await asyncio.gather(
                *(node.client.config_get("appendonly") for node in primaries),
                *(node.client.config_get("save") for node in primaries),
            )
    except (*CLIENT_ERRORS, TimeoutError):
        return
    bare = []
    for i, node in enumerate(primaries):
        aof = _config_value(configs[i], "appendonly")
        save = _config_value(configs[len(primaries) + i], "save")
        if aof == "no" and save is not None and not save.strip():
            bare.append(node.name)
    bare = _fresh("no_persistence", bare)
    if bare:
        logger.warning(
            "Redis keeps no tasks on disk (no AOF, no RDB snapshots) on %s: a restart there "
            "loses every task, acknowledged or not. Turn on AOF (appendonly yes) or snapshots.",
            ", ".join(sorted(bare)),
            extra={"event": "no_persistence", "primaries": len(bare)},
        )


def _config_value(config: dict[Any, Any], name: str) -> str | None:
    for key, value in config.items():
        key = key.decode() if isinstance(key, bytes) else key
        if key == name:
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


async def may_publish(topology: Topology, stream: str) -> bool:
    """Whether this user may ``SPUBLISH`` (tried with an empty message on ``stream``'s
    channel, which tails ignore); a refusal is logged once."""
    try:
        await topology.execute(stream, lambda client: client.spublish(stream, b""))
    except BackendError as exc:
        if not isinstance(exc.__cause__, NoPermissionError):
            raise
        logger.warning(
            "SPUBLISH refused: task events are not published on shard channels, so "
            "other processes read them with one blocking XREAD per partition "
            "(grant +spublish +ssubscribe and the channel pattern to save that work)",
            extra={"event": "events_unpublished"},
        )
        return False
    return True
