"""The snapshot key's ID, kept under the prefix, so a worker proves at start that it
holds its servers' key.

Why: a worker without the key, or with another one, started without complaint and
then failed every sealed task it claimed, for good: one misconfigured worker in a
fleet failed a share of all the work, and its log said neither which tasks nor why.
Now every server records at its start the ID of the key it seals callers with
(:attr:`SnapshotKey.key_id`, an HKDF output of the secret: it reveals nothing of the
key), or ``none``; a worker compares its own at its start and refuses to run on a
mismatch, naming which it is: its key missing, another key, or a key where the
servers keep callers in clear (every task would be refused as unbound).

Cost: one ``SET`` a server start, one ``GET`` a worker start; one key a prefix, kept
without expiry (:attr:`redis_tasks._redis.keys.KeySpace.snapshot_key_id`). Servers
of one prefix that disagree are said at the start of the later one; a worker started
before any server finds nothing to compare, and says so.
"""

from __future__ import annotations

import logging
from typing import Final

from redis_tasks._redis.manager import RedisTaskManager

from ._snapshot import SnapshotKey

__all__ = ["NO_KEY", "SnapshotKeyMismatchError", "check_worker_key", "record_server_key"]

logger = logging.getLogger("redis_tasks.fastmcp")

#: What a server without a key records.
NO_KEY: Final = "none"


class SnapshotKeyMismatchError(ValueError):
    """A worker's snapshot key is not its servers' (the message says how, in one line)."""


def _text(key: SnapshotKey | None) -> str:
    return NO_KEY if key is None else key.key_id.hex()


async def record_server_key(manager: RedisTaskManager, key: SnapshotKey | None) -> None:
    """Record the ID of the key this server seals with (``none``: it keeps callers in
    clear); say so when another server of the prefix recorded another."""
    mine = _text(key)
    before = await manager.client.set(manager.keyspace.snapshot_key_id, mine, get=True)
    if isinstance(before, bytes | str) and _decoded(before) != mine:
        logger.warning(
            "another server of this prefix sealed callers with another snapshot key (or "
            "none): workers check theirs against this server's from now on; give every "
            "server and worker the same key",
            extra={"event": "snapshot_key_changed"},
        )


async def check_worker_key(
    manager: RedisTaskManager, key: SnapshotKey | None, *, accept_unbound: bool = False
) -> None:
    """Raise :class:`SnapshotKeyMismatchError` unless ``key`` opens what the prefix's
    servers seal (or the servers keep callers in clear and ``accept_unbound`` takes
    them)."""
    recorded = await manager.client.get(manager.keyspace.snapshot_key_id)
    if recorded is None:
        logger.warning(
            "no server of this prefix has recorded its snapshot key yet: this worker's "
            "key cannot be checked",
            extra={"event": "snapshot_key_unchecked"},
        )
        return
    theirs, mine = _decoded(recorded), _text(key)
    if theirs == mine:
        return
    if theirs == NO_KEY:
        if accept_unbound:
            return
        raise SnapshotKeyMismatchError(
            "this worker has a snapshot key and the servers keep callers without one: it "
            "would refuse every task (give the servers the key too, or set "
            "accept_unbound_snapshots while moving to a key)"
        )
    if key is None:
        raise SnapshotKeyMismatchError(
            "missing snapshot key: the servers seal callers with one and this worker has "
            "none (set $REDIS_TASKS_SNAPSHOT_KEY)"
        )
    raise SnapshotKeyMismatchError(
        "wrong snapshot key: this worker's is not the one the servers seal callers with "
        "(give every server and worker the same)"
    )


def _decoded(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
