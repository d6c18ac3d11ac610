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

__all__ = ["may_publish", "warn_if_evicting", "warn_if_not_persisting"]

logger = logging.getLogger("redis_tasks")


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
    policies = {_config_value(config, "maxmemory-policy") for config in configs}
    evicting = sorted(p for p in policies - {"noeviction"} if p is not None)
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
