"""Redis Cluster specifics on a real 3-primary, 3-replica cluster: layout, WAIT, failover,
slot migration. (The contract, worker and process suites also run on the cluster.)"""

from __future__ import annotations

import asyncio
import json
import subprocess
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis

from redis_tasks import (
    LeaseLostError,
    RedisTaskManager,
    RedisTasksError,
    ReplicationError,
    TaskExecution,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
    Worker,
)
from redis_tasks._redis.keys import KeySpace
from redis_tasks.testing import RedisCluster, RedisServer, wait_failover
from tests.contract.test_parking import answer, claimed_waiting
from tests.contract.test_tenants import FLOOD, next_one
from tests.support import burst
from tests.support.fleet import Fleet, all_completed_once
from tests.support.helpers import ALICE, ELICIT, ELICIT_ANSWER, ORIGIN, wait_until
from tests.support.mcp_stack import McpStack


def owner(
    cluster: RedisCluster, slot: int, seed: RedisServer | None = None
) -> tuple[int, int | None]:
    """(primary port, a replica's port) of ``slot``, from ``CLUSTER NODES``.

    (``CLUSTER SLOTS`` on Redis 7.0 leaves out replicas that have not been sent
    any write yet.)
    """
    client = redis.Redis.from_url((seed or cluster.primaries[0]).url)
    try:
        text = client.execute_command("CLUSTER", "NODES")  # type: ignore[no-untyped-call]
    finally:
        client.close()
    nodes = [
        line.split()
        for line in (text.decode() if isinstance(text, bytes) else text).splitlines()
        if line.strip()
    ]
    for fields in nodes:
        node_id, address, flags = fields[0], fields[1], fields[2]
        if "master" not in flags or "fail" in flags:
            continue
        for span in fields[8:]:
            if span.startswith("["):
                continue  # a slot being imported or migrated
            first, _, last = span.partition("-")
            if int(first) <= slot <= int(last or first):
                replica = next(
                    (
                        int(f[1].split("@")[0].rsplit(":", 1)[1])
                        for f in nodes
                        if f[3] == node_id and "fail" not in f[2]
                    ),
                    None,
                )
                return int(address.split("@")[0].rsplit(":", 1)[1]), replica
    raise AssertionError(f"slot {slot} is not served")


def on_replica(cluster: RedisCluster, port: int, key: str) -> dict[bytes, bytes]:
    """The hash ``key`` as the replica on ``port`` holds it (READONLY read)."""
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        client.execute_command("READONLY")  # type: ignore[no-untyped-call]
        data: dict[bytes, bytes] = client.hgetall(key)  # type: ignore[assignment]
        return data
    finally:
        client.close()


async def test_a_cluster_is_detected_from_any_nodes_url(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    for node in (redis_cluster.primaries[1], redis_cluster.replicas[0]):
        async with RedisTaskManager.from_url(node.url, prefix=prefix) as manager:
            assert manager.is_cluster
            task = await manager.create_task(ALICE, ORIGIN)
            assert await manager.find_task(TaskRequestContext(ALICE, task.task_id)) == task


async def test_a_standalone_server_is_not_mistaken_for_a_cluster(
    redis_server: RedisServer, prefix: str
) -> None:
    async with RedisTaskManager.from_url(redis_server.url, prefix=prefix) as manager:
        assert not manager.is_cluster


def test_the_default_partitions_spread_evenly_over_three_primaries(
    redis_cluster: RedisCluster,
) -> None:
    for prefix in ("rt", "app", f"t{uuid.uuid4().hex[:12]}"):
        keys = KeySpace(prefix)
        per_primary = Counter(owner(redis_cluster, keys.slot(p))[0] for p in range(16))
        assert sorted(per_primary.values()) == [5, 5, 6], prefix


async def test_tasks_of_one_run_land_on_every_primary(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    async with RedisTaskManager.from_url(redis_cluster.url, prefix=prefix) as manager:
        await asyncio.gather(*(manager.create_task(ALICE, ORIGIN) for _ in range(300)))
        counts = {}
        for node in redis_cluster.primaries:
            client = redis.Redis.from_url(node.url)
            counts[node.port] = sum(
                1
                for key in client.scan_iter(match=f"{{{prefix}:*:task:*", count=1000)
                if key.count(b":") == 3  # the record hash, not its companion keys
            )
            client.close()
    assert sum(counts.values()) == 300
    assert all(count >= 300 * 0.2 for count in counts.values()), counts


async def test_wait_replicas_returns_only_once_a_replica_holds_the_write(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    async with RedisTaskManager.from_url(
        redis_cluster.url, prefix=prefix, wait_replicas=1
    ) as manager:
        for _ in range(20):
            task = await manager.create_task(ALICE, ORIGIN)
            partition = int(task.task_id.split(".")[0])
            key = manager.keyspace.task(partition, task.task_id).task
            _, replica = owner(redis_cluster, manager.keyspace.slot(partition))
            assert replica is not None
            assert on_replica(redis_cluster, replica, key)[b"st"] == b"working"
            await manager.complete_task(task.task_id, {"ok": True})
            assert on_replica(redis_cluster, replica, key)[b"st"] == b"completed"


async def test_asking_for_more_replicas_than_exist_raises_replication_error(
    redis_cluster: RedisCluster, redis_server: RedisServer, prefix: str
) -> None:
    for url, replicas in ((redis_cluster.url, 2), (redis_server.url, 1)):
        async with RedisTaskManager.from_url(
            url, prefix=prefix, wait_replicas=replicas, wait_timeout=0.2
        ) as manager:
            with pytest.raises(ReplicationError):
                await manager.create_task(ALICE, ORIGIN)


async def test_scripts_are_reloaded_after_every_node_empties_its_cache(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    async with RedisTaskManager.from_url(
        redis_cluster.url, prefix=prefix, wait_replicas=1
    ) as manager:
        task = await manager.create_task(ALICE, ORIGIN)
        for node in redis_cluster.primaries:
            client = redis.Redis.from_url(node.url)
            client.script_flush()
            client.close()
        assert await manager.find_task(TaskRequestContext(ALICE, task.task_id)) is not None
        await manager.complete_task(task.task_id, {"ok": True})  # the WAIT path reloads too
        again = await manager.create_task(ALICE, ORIGIN)
        assert again.task_id != task.task_id


async def _create_while(
    manager: RedisTaskManager, total: int, on_progress: Any
) -> tuple[list[str], int]:
    """Create ``total`` no-op tasks in batches; returns the created IDs and the failures."""
    created: list[str] = []
    failed = 0
    payload = json.dumps({"mode": "noop"}).encode()
    while len(created) + failed < total:
        batch = min(25, total - len(created) - failed)
        outcomes = await asyncio.gather(
            *(manager.create_task(ALICE, ORIGIN, payload=payload) for _ in range(batch)),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, RedisTasksError):
                failed += 1  # create_task did not return: not promised to anyone
            elif isinstance(outcome, BaseException):
                raise outcome
            else:
                created.append(outcome.task_id)
        await on_progress(len(created) + failed)
    return created, failed


@pytest.mark.slow
async def test_a_primary_killed_mid_run_loses_no_task_with_wait_replicas(
    private_cluster: RedisCluster, prefix: str, tmp_path: Path
) -> None:
    seed = private_cluster.primaries[0]
    victim = private_cluster.primaries[2]
    fleet = Fleet(seed.url, prefix, f"ns-{uuid.uuid4().hex[:8]}", tmp_path, cluster=True)
    try:
        for _ in range(2):
            fleet.start("--lease", "3", "--wait-replicas", "1", "--concurrency", "16")
        await fleet.wait_started()
        # Once promoted, the victim's replica has no replica of its own: every create
        # in its slots waits out wait_timeout and is refused (ReplicationError). A
        # short wait_timeout and 400 creates after the kill keep that near 10 s.
        async with RedisTaskManager.from_url(
            seed.url, prefix=prefix, wait_replicas=1, timeout=5.0, wait_timeout=0.5
        ) as manager:
            killed = False

            async def progress(count: int) -> None:
                nonlocal killed
                if count >= 500 and not killed:
                    victim.process.kill()  # SIGKILL: no goodbye to the cluster
                    killed = True

            created, failed = await _create_while(manager, 900, progress)
            assert killed
            await asyncio.to_thread(wait_failover, private_cluster, victim)
            await all_completed_once(manager, fleet.workers, created)
        assert len(created) + failed == 900
        assert len(created) > 600
        print(f"failover run: {len(created)} creates returned, {failed} refused")
        for worker in fleet.workers:
            assert worker.process.poll() is None  # carried on without a restart
    finally:
        fleet.stop_all()


async def test_raising_the_partition_count_keeps_serving_the_old_partitions(
    redis_cluster: RedisCluster, prefix: str
) -> None:
    """The count goes from 16 to 32 (what ``check --partitions`` advises on three
    primaries) while tasks made under 16 are queued for their tenants, parked waiting
    for input, and still being made by a creator not yet moved: a worker at 32 runs
    each of them once, beside the tasks of the new partitions."""
    runs: Counter[str] = Counter()

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        if execution.payload == b"ask":
            answers = await execution.request_input({"name": ELICIT}, "waiting for you")
            return {"answers": sorted(answers)}
        runs[execution.task_id] += 1
        return {"ok": True}

    async def make(m: RedisTaskManager, count: int, payload: bytes = b"run") -> list[str]:
        made = [
            await m.create_task(ALICE, ORIGIN, payload=payload, tenant=("a", "b")[i % 2])
            for i in range(count)
        ]
        return [task.task_id for task in made]

    async def all_completed(m: RedisTaskManager, task_ids: list[str]) -> bool:
        for task_id in task_ids:
            task = await m.find_task(TaskRequestContext(ALICE, task_id))
            assert task is not None, "a task was lost"
            if task.status is not TaskStatus.COMPLETED:
                return False
        return True

    async with (
        RedisTaskManager.from_url(redis_cluster.url, prefix=prefix) as old,
        RedisTaskManager.from_url(redis_cluster.url, prefix=prefix, partitions=32) as new,
    ):
        assert (old.partitions, new.partitions) == (16, 32)
        asking = await make(old, 2, b"ask")
        done_before = await make(old, 20)
        worker = Worker(old, handler, concurrency=4, park_after=timedelta(0))
        async with worker:
            runner = asyncio.create_task(worker.run())

            async def parked() -> bool:
                for task_id in asking:
                    seen = await old.inspect_task(task_id)
                    if seen is None or seen.entry_state != "parked":
                        return False
                return await all_completed(old, done_before)

            await wait_until(parked, what="the old worker's tasks run and the asks parked")
            await worker.stop()
            await runner
        # No worker now: these wait in their tenants' queues of the old partitions.
        queued = await make(old, 60)
        async with Worker(new, handler, concurrency=8) as worker:
            runner = asyncio.create_task(worker.run())
            fresh = await make(new, 60)
            queued += await make(old, 20)  # a creator not yet told of the new count
            for task_id in asking:
                await new.update_task(TaskUpdateContext(ALICE, task_id, {"name": ELICIT_ANSWER}))
            everything = asking + done_before + queued + fresh
            await wait_until(
                lambda: all_completed(new, everything), within=60, what="every task completed"
            )
            await worker.stop()
            await runner
    assert max(int(task_id.split(".")[0]) for task_id in fresh) >= 16  # the new ones used
    assert max(int(task_id.split(".")[0]) for task_id in queued) < 16
    assert runs == Counter(dict.fromkeys(done_before + queued + fresh, 1))


@pytest.mark.slow
async def test_a_parked_tasks_answer_survives_a_failover_and_resumes_it_once(
    private_cluster: RedisCluster, prefix: str
) -> None:
    """The answer that resumes a parked task is confirmed by a replica (the default
    waits where one is); the primary dies before any worker claims the task: the
    promoted replica has it queued, and one claim runs it, with its answer."""
    async with RedisTaskManager.from_url(
        private_cluster.url, prefix=prefix, partitions=1, timeout=5.0
    ) as m:
        task_id, fence = await claimed_waiting(m, {"name": ELICIT})
        assert await m.work_queue.park(task_id, fence=fence)
        await answer(m, task_id, {"name": ELICIT_ANSWER})
        partition = int(task_id.split(".")[0])
        port, replica = owner(private_cluster, m.keyspace.slot(partition))
        assert replica is not None
        victim = next(s for s in private_cluster.primaries if s.port == port)
        victim.process.kill()  # SIGKILL: the answer's only copy is the replica's
        await asyncio.to_thread(wait_failover, private_cluster, victim)

        async def resumed() -> Any:
            try:
                return await next_one(m)
            except RedisTasksError:
                return None  # the cluster still settling

        entry, claim = await wait_until(resumed, within=60, what="the resumed claim")
        assert (entry.task_id, claim.parks, claim.attempt) == (task_id, 1, 1)
        assert [key for key, _, _ in claim.recorded] == [b"name"]
        await m.complete_task(task_id, {"ok": True}, fence=claim.fence)
        assert await next_one(m) is None  # resumed once
        task = await m.find_task(TaskRequestContext(FLOOD, task_id))
        assert task is not None
        assert task.status is TaskStatus.COMPLETED


@pytest.mark.slow
async def test_a_partitions_slot_migrating_mid_run_loses_no_task(
    private_cluster: RedisCluster, prefix: str, tmp_path: Path
) -> None:
    seed = private_cluster.primaries[0]
    move = SlotMove.of(private_cluster, prefix)
    fleet = Fleet(seed.url, prefix, f"ns-{uuid.uuid4().hex[:8]}", tmp_path, cluster=True)
    try:
        for _ in range(2):
            fleet.start("--lease", "3", "--partitions", "2", "--concurrency", "16")
        await fleet.wait_started()
        async with RedisTaskManager.from_url(seed.url, prefix=prefix, partitions=2) as manager:
            resharding: asyncio.Task[Any] | None = None

            async def progress(count: int) -> None:
                nonlocal resharding
                if count >= 300 and resharding is None:
                    resharding = asyncio.create_task(asyncio.to_thread(move.run))

            created, failed = await _create_while(manager, 1500, progress)
            assert resharding is not None
            await resharding
            assert move.moved()
            await all_completed_once(manager, fleet.workers, created)
        assert failed == 0
    finally:
        fleet.stop_all()


def _node_id(node: RedisServer) -> str:
    client = redis.Redis.from_url(node.url)
    try:
        node_id: bytes = client.execute_command("CLUSTER", "MYID")  # type: ignore[no-untyped-call]
        return node_id.decode()
    finally:
        client.close()


@dataclass(frozen=True)
class SlotMove:
    """Partition 0's slot, the primary that owns it and another one to move it to."""

    cluster: RedisCluster
    slot: int
    source: RedisServer
    target: RedisServer

    @classmethod
    def of(cls, cluster: RedisCluster, prefix: str) -> SlotMove:
        slot = KeySpace(prefix).slot(0)  # in the first 64 slots, on the first primary
        source_port, _ = owner(cluster, slot)
        source = next(p for p in cluster.primaries if p.port == source_port)
        target = next(p for p in cluster.primaries if p.port != source_port)
        return cls(cluster, slot, source, target)

    def run(self, keys_per_migrate: int = 10) -> None:
        """``redis-cli --cluster reshard``: move the source's slots up to ours to target."""
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "reshard",
                f"127.0.0.1:{self.cluster.primaries[0].port}",
                "--cluster-from",
                _node_id(self.source),
                "--cluster-to",
                _node_id(self.target),
                "--cluster-slots",
                str(self.slot + 1),
                "--cluster-yes",
                "--cluster-pipeline",
                str(keys_per_migrate),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
        )

    def moved(self) -> bool:
        """Whether the target owns the slot now."""
        return owner(self.cluster, self.slot)[0] == self.target.port


async def test_a_refused_write_is_reported_as_refused_not_as_unconfirmed(
    redis_cluster: RedisCluster, redis_server: RedisServer, prefix: str
) -> None:
    """A fenced write refused for a stale fence changed nothing: it raises
    LeaseLostError even though the replicas cannot confirm anything after it."""
    for url, replicas in ((redis_cluster.url, 2), (redis_server.url, 1)):
        async with (
            RedisTaskManager.from_url(url, prefix=prefix) as plain,
            RedisTaskManager.from_url(
                url, prefix=prefix, wait_replicas=replicas, wait_timeout=0.1
            ) as waiting,
        ):
            task = await plain.create_task(ALICE, ORIGIN)
            claimed = await plain.work_queue.claim_next(
                int(task.task_id.split(".")[0]),
                consumer="w",
                count=100,
                lease=timedelta(seconds=30),
                max_attempts=3,
            )
            (claim,) = [c for entry, c in claimed if entry.task_id == task.task_id]
            with pytest.raises(LeaseLostError):
                await waiting.complete_task(task.task_id, {"ok": 1}, fence=claim.fence - 1)
            with pytest.raises(ReplicationError):  # the real write: applied, unconfirmed
                await waiting.complete_task(task.task_id, {"ok": 1}, fence=claim.fence)
            found = await plain.find_task(TaskRequestContext(ALICE, task.task_id))
            assert found is not None
            assert found.status is TaskStatus.COMPLETED


MCP_CLIENTS = 12
#: How often the test's clients poll ``tasks/get`` (a client's own poll interval).
POLL_EVERY = 0.02
#: The deadline the servers and the worker run with: it must cover the failover, which
#: took 3.4-4.7 s here with cluster-node-timeout 2 s (the Redis Cluster page: 2 x node
#: timeout + 2 s).
FAILOVER_DEADLINE = 6.0


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_primary_killed_under_mcp_load_costs_the_clients_no_error(
    private_cluster: RedisCluster, tmp_path: Path
) -> None:
    """MCP clients create tasks and poll them to completion through two servers while
    a primary is SIGKILLed and its replica promoted (cluster-node-timeout 2 s). The
    managers' deadline covers the failover, so no client sees an error: every call
    made during the window waits for the new primary and goes through."""
    victim = private_cluster.primaries[2]
    stack = McpStack(
        private_cluster.primaries[0].url,
        f"f{uuid.uuid4().hex[:10]}",
        tmp_path,
        timeout=FAILOVER_DEADLINE,
    )
    stack.start()
    errors: list[str] = []
    completed: list[float] = []  # when each task was seen completed
    slowest = 0.0
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def rpc(server: int, method: str, params: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal slowest
        began = loop.time()
        try:
            reply = await stack.rpc(server, method, params)
        except Exception as exc:  # a transport failure is a client-visible error too
            errors.append(f"{method}: {type(exc).__name__}")
            return None
        slowest = max(slowest, loop.time() - began)
        if "error" in reply:
            errors.append(f"{method}: {reply['error']['code']} {reply['error']['message']}")
            return None
        result: dict[str, Any] = reply["result"]
        return result

    async def one_task(n: int) -> None:
        created = await rpc(n % 2, "tools/call", {"name": "add", "arguments": {"a": n, "b": 1}})
        if created is None:
            return
        while True:
            task = await rpc((n + 1) % 2, "tasks/get", {"taskId": created["taskId"]})
            if task is None:
                return
            if task["status"] == "completed":
                if task["result"]["structuredContent"] != {"result": n + 1}:
                    errors.append("wrong result")
                completed.append(loop.time())
                return
            if task["status"] != "working":
                errors.append(f"task ended {task['status']}")
                return
            await asyncio.sleep(POLL_EVERY)

    async def client(first: int) -> None:
        n = first
        while not stop.is_set():
            await one_task(n)
            n += MCP_CLIENTS

    clients = [asyncio.create_task(client(c)) for c in range(MCP_CLIENTS)]
    try:
        await wait_until(lambda: _at_least(completed, 100), within=60, what="load before the kill")
        victim.process.kill()  # SIGKILL: no goodbye to the cluster
        killed_at = loop.time()
        await asyncio.to_thread(wait_failover, private_cluster, victim)
        failed_over_at = loop.time()
        await wait_until(
            lambda: _at_least([t for t in completed if t > failed_over_at], 100),
            within=60,
            what="load after the failover",
        )
    finally:
        stop.set()
        await asyncio.gather(*clients, return_exceptions=True)
        stack.stop()
    during = sum(1 for t in completed if killed_at <= t <= failed_over_at)
    print(
        f"failover under MCP load: {len(completed)} tasks completed, {during} of them during "
        f"the {failed_over_at - killed_at:.1f} s failover; slowest call {slowest:.2f} s; "
        f"errors {errors}"
    )
    assert errors == []
    assert slowest < FAILOVER_DEADLINE + 1.0  # the deadline, and the server's own work


async def _at_least(values: list[float], count: int) -> bool:
    return len(values) >= count


@pytest.mark.slow
@pytest.mark.timeout(300)
async def test_a_slot_migrating_under_pipelined_bursts_loses_and_duplicates_nothing(
    private_cluster: RedisCluster, prefix: str
) -> None:
    """Every key in one partition (one slot); bursts of 1,000 auto-pipelined calls go
    out back to back while ``redis-cli --cluster reshard`` moves that slot. Calls that
    meet MOVED, ASK or TRYAGAIN are re-sent alone: every call is answered, every create
    made exactly one task, and one of each task's racing outcomes won."""
    seed = private_cluster.primaries[0]
    keys = KeySpace(prefix)
    move = SlotMove.of(private_cluster, prefix)
    async with RedisTaskManager.from_url(seed.url, prefix=prefix, partitions=1) as manager:
        # Keys to migrate: the slot holds a few thousand, moved one per MIGRATE, so
        # the move takes long enough for bursts to meet it. (Key by key, a script can
        # split a key it does not declare: the Cluster page's "Moving slots". These
        # creates, finds and outcomes have not met it in this test's runs; the
        # history checker's batch claims did.)
        await asyncio.gather(*(manager.create_task(ALICE, ORIGIN) for _ in range(1500)))
        made = 1500
        resharding = asyncio.create_task(asyncio.to_thread(move.run, 1))
        bursts = finished = 0
        outcomes: Counter[str] = Counter()
        while not resharding.done() or bursts < 2:
            race = [
                t.task_id
                for t in await asyncio.gather(
                    *(manager.create_task(ALICE, ORIGIN) for _ in range(20))
                )
            ]
            plan = burst.Plan(
                race_ids=race,
                input_ids=[],
                input_keys=1,
                creates=400,
                finds=400,
                updates=0,
                transitions_per_task=10,
            )
            got = await asyncio.gather(*burst.calls(manager, plan, bursts % 2))
            bursts += 1
            made += 20 + plan.creates
            finished += len(race)
            outcomes.update(g if g.startswith("error") else "answered" for *_, g in got)
            for task_id in race:
                tries = [g for kind, subject, _, g in got if subject == task_id and kind != "find"]
                assert Counter(tries) == {"won": 1, "terminal": len(tries) - 1}
            created = [g for kind, _, _, g in got if kind == "create"]
            assert len(set(created)) == plan.creates
            assert all(g == "found" for kind, _, _, g in got if kind == "find")
        await resharding
        assert move.moved()
        stats = manager._topology.stats
        print(f"slot migration under {bursts} bursts of 1,000 calls: {dict(outcomes)}, {stats}")
        assert set(outcomes) == {"answered"}
        assert stats.moved + stats.asked + stats.retried > 0  # the bursts met the move
        # Exactly one task record per create, and each task that is not terminal in
        # exactly one place: a work entry, or its tenant's queue (fair dispatch keeps
        # waiting tasks there); none twice.
        target_client = redis.Redis.from_url(move.target.url)
        try:
            records = [
                key
                for key in target_client.scan_iter(match=f"{{{prefix}:*:task:*", count=1000)
                if key.count(b":") == 3
            ]
            statuses = target_client.pipeline(transaction=False)
            for key in records:
                statuses.hget(key, "st")
            live = {
                key.split(b":task:")[1].decode()
                for key, status in zip(records, statuses.execute(), strict=True)
                if status == b"working"
            }
            entries: list[tuple[bytes, dict[bytes, bytes]]] = target_client.xrange(  # type: ignore[assignment]
                keys.work(0)
            )
            places = Counter(fields[b"t"].decode() for _, fields in entries)
            for queue in target_client.scan_iter(match=f"{{{prefix}:*:tq:*", count=1000):
                waiting: list[bytes] = target_client.lrange(queue, 0, -1)  # type: ignore[assignment]
                places.update(t.decode() for t in waiting)
        finally:
            target_client.close()
        assert len(records) == made
        assert len(live) == made - finished
        assert live <= set(places)
        assert max(places.values()) == 1
