"""What bench runs leave on a server, and its removal: this run's, and killed runs'.

:class:`RunKeys` is a :class:`~._probe.Probe` that may also delete: it SCANs every
primary for a pattern and UNLINKs what it finds, in batches of one slot (a cluster
takes a multi-key command only within a slot). A run against a Redis it did not
start keeps one open (:class:`~._run_guard.RunGuard`), its connections named after
the run, so the name says the run is alive for as long as the process is.

:func:`remove_earlier_runs` finds the keys of runs whose connections are gone (the
process was killed outright, or lost the server), by the namespace's pattern
(:mod:`._namespace`), and removes them; runs still going are left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from redis.crc import key_slot
from redis.exceptions import RedisError

from ._namespace import ANY_RUN, NAMESPACE, REGISTRY, RunNames, run_of
from ._probe import Probe

__all__ = ["Removed", "RunKeys", "remove_earlier_runs"]

_BATCH: Final = 500  # keys per UNLINK
_SCAN_COUNT: Final = 1000
_TIMEOUT: Final = 30.0  # seconds for one SCAN step or one UNLINK


@dataclass
class Removed:
    """What a clean-up removed: keys, and the runs (labels) they were of; the runs it
    left alone because they are still going."""

    keys: int = 0
    runs: list[str] = field(default_factory=list)
    live: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """One phrase for the operator, e.g. ``removed 1,204 keys of 1 earlier run``."""
        said = (
            f"removed {self.keys:,} keys of {len(self.runs)} earlier "
            f"run{'s' if len(self.runs) != 1 else ''} ({', '.join(self.runs)})"
            if self.runs
            else "found no keys of earlier runs"
        )
        if self.live:
            said += f"; left {', '.join(self.live)} alone: still running"
        return said


class RunKeys(Probe):
    """A :class:`Probe` that also removes keys by pattern and keeps the run registry."""

    async def scan(self, pattern: str) -> dict[str, list[bytes]]:
        """Every key matching ``pattern`` on every primary, by primary (its name)."""
        assert self._topology is not None
        found: dict[str, list[bytes]] = {}
        for node in self._topology.primaries():
            keys = found.setdefault(node.name, [])
            cursor: int = 0
            while True:
                async with asyncio.timeout(_TIMEOUT):
                    reply = await node.client.scan(cursor, match=pattern, count=_SCAN_COUNT)
                cursor = int(reply[0])
                # The connections do not decode: keys come as bytes.
                keys.extend(key for key in reply[1] if isinstance(key, bytes))
                if cursor == 0:
                    break
        return found

    async def unlink(self, by_node: dict[str, list[bytes]]) -> int:
        """UNLINK the keys of each primary, one slot and :data:`_BATCH` keys at a time."""
        assert self._topology is not None
        nodes = {node.name: node for node in self._topology.primaries()}
        removed = 0
        for name, keys in by_node.items():
            by_slot: dict[int, list[bytes]] = {}
            for key in keys:
                by_slot.setdefault(key_slot(key) if self.cluster else 0, []).append(key)
            for group in by_slot.values():
                for start in range(0, len(group), _BATCH):
                    async with asyncio.timeout(_TIMEOUT):
                        batch = group[start : start + _BATCH]
                        removed += int(await nodes[name].client.unlink(*batch))
        return removed

    async def remove(self, pattern: str) -> int:
        """Remove every key matching ``pattern`` on every primary; how many went."""
        return await self.unlink(await self.scan(pattern))

    async def live_runs(self) -> set[str]:
        """The IDs of the runs with a connection open to a primary (:class:`RunNames`)."""
        prefix = f"{NAMESPACE}-"
        names = await self.client_names()
        return {name[len(prefix) :] for name in names if name.startswith(prefix)}

    async def registered(self) -> set[str]:
        """The IDs in the run registry."""
        assert self._topology is not None
        async with asyncio.timeout(_TIMEOUT):
            fields = await self._topology.node_for(REGISTRY).client.hkeys(REGISTRY)
        return {f.decode() if isinstance(f, bytes) else str(f) for f in fields}

    async def register(self, names: RunNames) -> None:
        """Enter the run in the registry: who runs it, since when (no secret: host, pid)."""
        assert self._topology is not None
        who = {"host": socket.gethostname(), "pid": os.getpid(), "started": round(time.time())}
        async with asyncio.timeout(_TIMEOUT):
            await self._topology.node_for(REGISTRY).client.hset(
                REGISTRY, names.run_id, json.dumps(who)
            )

    async def deregister(self, run_ids: Iterable[str]) -> None:
        """Take runs out of the registry (the hash goes with its last run)."""
        assert self._topology is not None
        ids = list(run_ids)
        if ids:
            async with asyncio.timeout(_TIMEOUT):
                await self._topology.node_for(REGISTRY).client.hdel(REGISTRY, *ids)

    async def keep_alive(self, every: float) -> None:
        """PING every primary each ``every`` seconds, until cancelled: the named
        connections stay open whatever the server's idle ``timeout``."""
        while True:
            await asyncio.sleep(every)  # the period of the keep-alive, not a wait for a state
            # A failed round changes nothing: the next one reconnects.
            with contextlib.suppress(RedisError, OSError, TimeoutError):
                await self._each_primary("PING")


async def remove_earlier_runs(keys: RunKeys, *, everything: bool) -> Removed:
    """Remove the keys of bench runs that are no longer running.

    With ``everything`` (``redis-tasks bench --clean``) every key of the namespace is
    looked at, a run registered or not. Otherwise (the start of a run) only the
    registered runs are, and without one in the registry nothing is scanned.
    Liveness is read after the scan: a run names its connections before it writes a
    key, so a run whose keys the scan met is either still named then or gone.
    """
    registered = await keys.registered()
    if not everything and not registered:
        return Removed()
    found = await keys.scan(ANY_RUN)
    live = await keys.live_runs()
    doomed: dict[str, list[bytes]] = {}
    runs: set[str] = set()
    seen_live: set[str] = set()
    for node, node_keys in found.items():
        for key in node_keys:
            run = run_of(key)
            if run is None:
                continue  # a key that only looks like ours: not a bench run's
            if run in live:
                seen_live.add(run)
            elif everything or run in registered:
                doomed.setdefault(node, []).append(key)
                runs.add(run)
    removed = await keys.unlink(doomed)
    dead = (registered - live) | runs
    await keys.deregister(dead)
    return Removed(
        keys=removed,
        runs=[f"{NAMESPACE}-{run}" for run in sorted(runs)],
        live=[f"{NAMESPACE}-{run}" for run in sorted(seen_live | (registered & live))],
    )
