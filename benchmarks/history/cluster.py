"""Faults on a private 3+3 Redis Cluster while the recorder runs, in turn:

- ``failover``: a primary SIGKILLed; its replica is promoted; the dead node starts
  again, empty, and rejoins as the new primary's replica.
- ``lagging_failover``: the same, but the replica lags first: it is stopped (SIGSTOP),
  24 MiB are written to its primary ahead of the load (more than the sockets between
  them buffer), the load writes for 0.3 s, then the primary is killed and the replica
  goes on: whatever the primary acknowledged behind the filler never reaches the
  replica that takes over. (A replication link cut with ``CLIENT KILL TYPE master``
  comes back within 10 ms, too soon to lag.) The load's bytes it missed are measured
  by the primary's replication offset.
- ``migrate``: one partition's slot moved to another primary while it is written, every
  key in one ``MIGRATE`` (the way the Cluster page supports: moved a few keys a call, a
  script that reaches a key it cannot declare may write a second copy on the other node
  and a later ``MIGRATE`` fails ``BUSYKEY``: twice in about 200 migrations of 5 keys a
  call): the scripts sent after it meet ``ASK`` redirections until the slot is reassigned.
- ``pause``: ``CLIENT PAUSE ALL`` on one primary, alternately shorter and longer than a
  call's deadline.
- ``kill``: every client connection of every primary killed.

Redis Cluster replicates asynchronously: with ``wait_replicas=0`` a write acknowledged
by a primary that dies before its replica has it is gone. ``wait_replicas=1`` makes
every write wait for a replica's acknowledgement (``WAIT``), so an acknowledged write
survives the failover of its primary; a write whose ``WAIT`` timed out reports
:class:`~redis_tasks.ReplicationError` (an unknown outcome). Cost of a round: a
failover takes about two node timeouts (detection, then the election) and the
rejoin's full sync; the nodes here time out after 1 s so that a hundred failovers fit
in minutes.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import redis
from redis.asyncio import Redis
from redis.crc import key_slot

from redis_tasks._redis.keys import KeySpace
from redis_tasks.testing import (
    RedisCluster,
    RedisServer,
    start_redis_cluster,
    start_redis_server,
    wait_cluster_ok,
    wait_failover,
)

__all__ = ["CLUSTER_KINDS", "ClusterFaults"]

#: The cluster's faults, in the order they are injected.
#: How many keys one ``MIGRATE`` may move: more than any partition's slot holds here.
MIGRATE_ALL: Final = 1_000_000
CLUSTER_KINDS: Final = ("failover", "kill", "lagging_failover", "migrate", "pause")

#: How long a primary may be unreachable before its replica takes over (ms).
NODE_TIMEOUT_MS: Final = 1000


#: Bytes written ahead of the load while the replica is stopped: more than the loopback
#: sockets' buffers hold (a few MiB each way), less than a replica's output buffer limit.
FILLER_BYTES: Final = 24 * 1024 * 1024
#: How long the load writes behind the filler before the primary dies (s).
LAG_SECONDS: Final = 0.3


def _node_options(directory: Path) -> tuple[str, ...]:
    # The options start_redis_cluster gives each node: a restart must use the same.
    return (
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        str(directory / "nodes.conf"),
        "--cluster-node-timeout",
        str(NODE_TIMEOUT_MS),
        "--repl-diskless-sync-delay",
        "0",
    )


def _info(client: redis.Redis, section: str) -> dict[str, Any]:
    info: dict[str, Any] = client.info(section)
    return info


@dataclass
class ClusterFaults:
    """A private cluster and the faults injected on it (see the module)."""

    cluster: RedisCluster
    prefix: str
    partitions: int
    call_timeout: float
    faults: Counter[str] = field(default_factory=Counter)
    #: Replication bytes the promoted replica had not received, per lagging failover.
    missed_bytes: list[int] = field(default_factory=list)
    nodes: list[RedisServer] = field(default_factory=list)
    _rng: random.Random = field(default_factory=lambda: random.Random(7))

    @classmethod
    async def start(
        cls, directory: Path, *, prefix: str, partitions: int, call_timeout: float
    ) -> ClusterFaults:
        """Start a 3+3 cluster in ``directory``."""
        cluster = await asyncio.to_thread(
            start_redis_cluster, directory, node_timeout_ms=NODE_TIMEOUT_MS
        )
        return cls(cluster, prefix, partitions, call_timeout, nodes=list(cluster.servers))

    @property
    def url(self) -> str:
        """A seed URL: any live node."""
        return next(n.url for n in self.nodes if n.process.poll() is None)

    def stop(self) -> None:
        """Stop every node."""
        for node in self.nodes:
            node.stop()

    def _client(self, node: RedisServer) -> redis.Redis:
        return redis.Redis.from_url(node.url, socket_timeout=10, decode_responses=True)

    def _primaries(self) -> list[RedisServer]:
        """The nodes serving slots now, by ``CLUSTER NODES`` as a live node sees it."""
        with self._client(self.nodes[0] if self._alive(self.nodes[0]) else self._any()) as c:
            text = str(c.execute_command("CLUSTER", "NODES"))
        ports = {
            int(row[1].split("@")[0].rsplit(":", 1)[1])
            for row in (line.split() for line in text.splitlines() if line)
            if "master" in row[2] and "fail" not in row[2] and len(row) > 8
        }
        return [n for n in self.nodes if n.port in ports]

    def _alive(self, node: RedisServer) -> bool:
        return node.process.poll() is None

    def _any(self) -> RedisServer:
        return next(n for n in self.nodes if self._alive(n))

    def _replica_of(self, primary: RedisServer) -> RedisServer:
        with self._client(primary) as c:
            info = _info(c, "replication")
        ports = [int(v["port"]) for k, v in info.items() if k.startswith("slave")]
        return next(n for n in self.nodes if n.port in ports)

    async def inject(self, kind: str) -> None:
        """Inject one fault of ``kind`` and wait until the cluster has healed."""
        if kind in ("failover", "lagging_failover"):
            await asyncio.to_thread(self._failover, kind == "lagging_failover")
        elif kind == "migrate":
            await asyncio.to_thread(self._migrate)
        elif kind == "pause":
            primaries = await asyncio.to_thread(self._primaries)
            node = primaries[self.faults[kind] % len(primaries)]
            pause = self.call_timeout * (0.5 if self.faults[kind] % 2 == 0 else 1.5)
            admin = Redis.from_url(node.url, socket_timeout=10)
            try:
                await admin.client_pause(int(pause * 1000), all=True)
            finally:
                await admin.aclose()
            await asyncio.sleep(pause)  # the pause's own length: let it end
        else:
            assert kind == "kill"
            for node in await asyncio.to_thread(self._primaries):
                admin = Redis.from_url(node.url, socket_timeout=10)
                try:
                    await admin.client_kill_filter(_type="normal", skipme=True)
                finally:
                    await admin.aclose()
        self.faults[kind] += 1

    def _failover(self, lagging: bool) -> None:
        primaries = self._primaries()
        victim = primaries[sum(self.faults.values()) % len(primaries)]
        replica = self._replica_of(victim)
        if lagging:
            self.missed_bytes.append(self._lag_then_kill(victim, replica))
        else:
            victim.process.kill()
        victim.process.wait(30)
        wait_failover(RedisCluster(self.nodes, []), victim, timeout=60)
        # Only now may it start again: started before its replica took over, it would
        # come back as an empty primary of its slots.
        restarted = start_redis_server(
            victim.directory, *_node_options(victim.directory), port=victim.port
        )
        self.nodes[self.nodes.index(victim)] = restarted
        self._wait_synced(restarted)
        wait_cluster_ok(self.nodes, timeout=60)

    def _lag_then_kill(self, victim: RedisServer, replica: RedisServer) -> int:
        """Stop the replica (SIGSTOP), bury what the load writes next behind more bytes
        than the sockets between them hold, kill the primary, let the replica go on;
        returns the load's replication bytes it never received."""
        replica.process.send_signal(signal.SIGSTOP)
        try:
            with self._client(victim) as p:
                # The kernel's socket buffers would still deliver what they hold after
                # the primary dies: a filler larger than both puts the load's writes
                # in the primary's own output buffer, which dies with it.
                p.set(self._filler_key(victim), b"x" * FILLER_BYTES)
                buried = int(_info(p, "replication")["master_repl_offset"])
                time.sleep(LAG_SECONDS)  # the lag itself: the load writes meanwhile
                missed = int(_info(p, "replication")["master_repl_offset"]) - buried
            victim.process.kill()
        finally:
            replica.process.send_signal(signal.SIGCONT)
        return missed

    def _filler_key(self, node: RedisServer) -> str:
        """A key (outside the recording's prefix) in a slot ``node`` serves."""
        with self._client(node) as c:
            rows = c.execute_command("CLUSTER", "SLOTS")
            me = c.execute_command("CLUSTER", "MYID")
        ranges = [(int(r[0]), int(r[1])) for r in rows if r[2][2] == me]
        for n in itertools.count():
            key = f"history-filler-{n}"
            if any(lo <= key_slot(key.encode()) <= hi for lo, hi in ranges):
                return key
        raise AssertionError("unreachable")

    def _wait_synced(self, node: RedisServer, timeout: float = 60.0) -> None:
        """Wait until ``node`` is a replica whose link to its primary is up."""
        deadline = time.monotonic() + timeout
        with self._client(node) as c:
            while True:
                info = _info(c, "replication")
                if info.get("role") == "slave" and info.get("master_link_status") == "up":
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError("the restarted node did not rejoin as a replica")
                time.sleep(0.05)  # polling another process's state

    def _migrate(self) -> None:
        partition = self.faults["migrate"] % self.partitions
        slot = KeySpace(self.prefix).slot(partition)
        primaries = self._primaries()
        ids = {n.port: self._node_id(n) for n in primaries}
        source = next(n for n in primaries if self._owns(n, slot))
        target = self._rng.choice([n for n in primaries if n is not source])
        with self._client(source) as src, self._client(target) as dst:
            dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[source.port])
            src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[target.port])
            # Every key in one MIGRATE (see the module); the loop's next turn takes
            # any key a script made between the GETKEYSINSLOT and the MIGRATE, when
            # nothing had moved yet.
            while keys := src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, MIGRATE_ALL):
                src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
            for node in (target, source, *(n for n in primaries if n not in (source, target))):
                with self._client(node) as c:
                    c.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[target.port])
        wait_cluster_ok(self.nodes, timeout=60)

    def _node_id(self, node: RedisServer) -> str:
        with self._client(node) as c:
            return str(c.execute_command("CLUSTER", "MYID"))

    def _owns(self, node: RedisServer, slot: int) -> bool:
        with self._client(node) as c:
            rows = c.execute_command("CLUSTER", "SLOTS")
        me = self._node_id(node)
        return any(int(r[0]) <= slot <= int(r[1]) and r[2][2] == me for r in rows)
