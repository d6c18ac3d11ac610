"""The one retry rule (``Topology.call``) and the cluster's slot map, without a server.

A scripted topology answers each attempt with what the test says: a reply, a
redirect or a failure. The real cluster tests (tests/cluster/test_cluster.py) show the
same rule at work against failovers and slot migrations.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import (
    AskError,
    AuthenticationError,
    ClusterDownError,
    MovedError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from redis_tasks._errors import BackendError
from redis_tasks._redis.client import ConnectionSettings
from redis_tasks._redis.cluster_topology import ClusterTopology
from redis_tasks._redis.topology import Node, Topology, pause_after
from redis_tasks._telemetry.metrics import METRICS


class Scripted(Topology):
    """Nodes by name; ``outcomes`` is what successive attempts meet (raise or return)."""

    def __init__(self, outcomes: list[Any], timeout: float = 5.0) -> None:
        super().__init__(timeout)
        self.outcomes = outcomes
        self.attempts: list[tuple[str, bool]] = []
        self.moves: list[tuple[int, str, int]] = []
        self.failures = 0
        self.owner = "a:1"
        self.nodes: dict[str, Node] = {}

    def _get(self, name: str) -> Node:
        if name not in self.nodes:
            client = Redis()
            self.nodes[name] = Node(name, client.connection_pool, client, self.timeout)
        return self.nodes[name]

    def node_for_slot(self, slot: int) -> Node:
        return self._get(self.owner)

    def slot(self, key: str) -> int:
        return 7

    def primaries(self) -> list[Node]:
        return [self._get(self.owner)]

    def node_at(self, host: str, port: int) -> Node:
        return self._get(f"{host}:{port}")

    def moved(self, slot: int, host: str, port: int) -> None:
        self.moves.append((slot, host, port))
        self.owner = f"{host}:{port}"

    def failed(self) -> None:
        self.failures += 1

    async def aclose(self) -> None:
        for node in self.nodes.values():
            await node.client.aclose()

    async def attempt(self, node: Node, asking: bool) -> Any:
        self.attempts.append((node.name, asking))
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome


def deadline(seconds: float) -> float:
    return asyncio.get_running_loop().time() + seconds


async def test_moved_is_followed_at_once_and_recorded() -> None:
    topology = Scripted([MovedError("7 b:2"), "ok"])
    assert await topology.call(7, topology.attempt, deadline=deadline(5)) == "ok"
    assert topology.moves == [(7, "b", 2)]
    assert topology.attempts == [("a:1", False), ("b:2", False)]
    assert topology.stats.moved == 1
    await topology.aclose()


async def test_ask_goes_to_the_named_node_with_asking_once() -> None:
    topology = Scripted([AskError("7 c:3"), "ok", "again"])
    assert await topology.call(7, topology.attempt, deadline=deadline(5)) == "ok"
    assert topology.attempts == [("a:1", False), ("c:3", True)]
    assert topology.moves == []  # ASK moves nothing: the next call goes to the owner
    assert await topology.call(7, topology.attempt, deadline=deadline(5)) == "again"
    assert topology.attempts[-1] == ("a:1", False)
    await topology.aclose()


@pytest.mark.parametrize(
    "failure",
    [
        TryAgainError("TRYAGAIN"),
        ClusterDownError("CLUSTERDOWN"),
        RedisConnectionError("refused"),
        TimeoutError(),
        ConnectionRefusedError(),
    ],
)
async def test_transient_failures_are_retried_after_a_pause(failure: Exception) -> None:
    topology = Scripted([failure, failure, "ok"])
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert await topology.call(7, topology.attempt, deadline=deadline(5)) == "ok"
    assert loop.time() - started >= pause_after(1) + pause_after(2)
    assert topology.failures == 2  # each failure may mean a stale slot map
    assert topology.stats.retried == 2
    await topology.aclose()


async def test_the_deadline_ends_the_retries_with_the_last_error() -> None:
    topology = Scripted([ClusterDownError("CLUSTERDOWN")] * 1000)
    loop = asyncio.get_running_loop()
    started = loop.time()
    with pytest.raises(ClusterDownError):
        await topology.call(7, topology.attempt, deadline=deadline(0.3))
    assert loop.time() - started <= 0.3 + 0.05
    await topology.aclose()


async def test_a_timed_attempt_is_cut_at_the_deadline() -> None:
    topology = Scripted([])

    async def hangs(node: Node, asking: bool) -> None:
        await asyncio.Event().wait()

    with pytest.raises(TimeoutError):
        await topology.call(7, hangs, deadline=deadline(0.1))
    await topology.aclose()


@pytest.mark.parametrize(
    "failure", [AuthenticationError("WRONGPASS"), ResponseError("NOPERM"), ValueError("bug")]
)
async def test_other_failures_are_not_retried(failure: Exception) -> None:
    topology = Scripted([failure, "never"])
    with pytest.raises(type(failure)):
        await topology.call(7, topology.attempt, deadline=deadline(5))
    assert len(topology.attempts) == 1
    await topology.aclose()


async def test_execute_maps_failures_to_backend_error_with_the_cause() -> None:
    topology = Scripted([])
    with pytest.raises(BackendError) as caught:
        await topology.execute("k", lambda client: _raise(ResponseError("WRONGTYPE")))
    assert isinstance(caught.value.__cause__, ResponseError)
    assert "WRONGTYPE" not in str(caught.value)
    await topology.aclose()


async def _raise(exc: Exception) -> None:
    raise exc


@pytest.mark.parametrize("bug", [TypeError("bug"), KeyError("bug")])
async def test_a_bug_passes_the_boundary_as_what_it_is_and_is_not_counted(
    bug: Exception, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted: list[None] = []
    monkeypatch.setattr(METRICS, "redis_error", lambda: counted.append(None))
    topology = Scripted([])
    with pytest.raises(type(bug)) as caught:
        await topology.execute("k", lambda client: _raise(bug))
    assert caught.value is bug
    assert counted == []
    # An error reply is Redis's: mapped, and counted once.
    with pytest.raises(BackendError) as mapped:
        await topology.execute("k", lambda client: _raise(ResponseError("WRONGTYPE")))
    assert isinstance(mapped.value.__cause__, ResponseError)
    assert counted == [None]
    await topology.aclose()


def test_the_slot_map_comes_from_cluster_slots() -> None:
    settings = ConnectionSettings.from_url(
        "redis://127.0.0.1:7000", timeout=1, max_connections=2, options={}
    )
    topology = ClusterTopology(settings)
    topology._apply(
        [
            [0, 5460, [b"127.0.0.1", 7000, b"id-a"], [b"127.0.0.1", 7003, b"id-d"]],
            [5461, 10922, [b"", 7001, b"id-b"]],  # "" means: the address you asked
            [10923, 16383, [b"10.0.0.3", 7002, b"id-c"]],
        ],
        "192.168.1.9",
    )
    assert topology.node_for_slot(0).name == "127.0.0.1:7000"
    assert topology.node_for_slot(5460).name == "127.0.0.1:7000"
    assert topology.node_for_slot(5461).name == "192.168.1.9:7001"
    assert topology.node_for_slot(16383).name == "10.0.0.3:7002"
    assert {node.name for node in topology.primaries()} == {
        "127.0.0.1:7000",
        "192.168.1.9:7001",
        "10.0.0.3:7002",
    }
    assert topology.node_for("{rt:0.1}:work") is topology.node_for_slot(topology.slot("{rt:0.1}"))
