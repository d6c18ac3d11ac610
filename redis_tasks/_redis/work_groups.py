"""The ``workers`` consumer group on each partition's work stream: made on start, and
again when the server lost it.

A group that the server lost (a flush, a restart without persistence) answers
``NOGROUP``: the work queue creates it again and reports an empty read, so a
worker never has to know what a consumer group is. Starting a manager creates
every partition's group here, and loads every script on every primary with it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from redis.exceptions import ResponseError

from redis_tasks._errors import BackendError

from . import scripts as lua
from .client import CLIENT_ERRORS, counted
from .keys import WORK_GROUP, KeySpace
from .topology import Node, Topology

__all__ = ["ensure_groups", "no_group", "recreate_group"]

logger = logging.getLogger("redis_tasks.worker")


def no_group(exc: BaseException) -> bool:
    """Whether ``exc`` (a :class:`BackendError`) says the stream's group is missing."""
    cause = exc.__cause__
    return isinstance(cause, ResponseError) and "NOGROUP" in str(cause)


async def ensure_groups(
    topology: Topology,
    keys: KeySpace,
    partitions: Iterable[int],
    *,
    call_timeout: float,
    load_scripts: bool = False,
) -> None:
    """Create the ``workers`` group on each partition's work stream if it is missing,
    within twice ``call_timeout`` (the seconds one Redis call may take).

    Reading from offset 0, so entries added before the group existed (or after
    a server lost it) are still delivered. ``load_scripts`` also loads every
    script on every primary.
    """
    # One pipeline per node, on one connection: sixteen calls in parallel opened
    # sixteen connections at every start, and over TLS on a loaded host their
    # handshakes ran past the connect timeout.
    try:
        groups = topology.by_node((keys.work(p) for p in partitions), str)
    except CLIENT_ERRORS as exc:
        raise counted(BackendError("could not prepare the work streams on Redis")) from exc
    if load_scripts:  # scripts go to every primary, with streams or without
        serving = {node.name for node, _ in groups}
        groups += [(node, []) for node in topology.primaries() if node.name not in serving]

    async def prepare(node: Node, streams: list[str]) -> list[Any]:
        pipe = node.client.pipeline(transaction=False)
        if load_scripts:
            for script in lua.scripts.values():
                pipe.script_load(script.source)
        for stream in streams:
            pipe.xgroup_create(stream, WORK_GROUP, id="0", mkstream=True)
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        return replies

    try:
        async with asyncio.timeout(call_timeout * 2):
            replies = await asyncio.gather(*(prepare(node, streams) for node, streams in groups))
    except CLIENT_ERRORS as exc:
        topology.failed()
        raise counted(BackendError("could not prepare the work streams on Redis")) from exc
    for reply in (r for node_replies in replies for r in node_replies):
        # BUSYGROUP: another process created the group first, as intended.
        if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
            topology.failed()  # a MOVED here means the slot map is stale
            raise counted(BackendError("could not prepare the work streams on Redis")) from reply


async def recreate_group(
    topology: Topology, keys: KeySpace, partition: int, call_timeout: float
) -> None:
    """Create ``partition``'s group again after the server lost it (NOGROUP)."""
    await ensure_groups(topology, keys, [partition], call_timeout=call_timeout)
    logger.warning(
        "recreated a missing work group",
        extra={"event": "group_recreated", "partition": partition},
    )
