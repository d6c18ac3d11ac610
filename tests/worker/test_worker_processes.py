"""Workers as real processes on a real redis-server: crashes, zombies, restarts, poison.

Workers run the CLI (``python -m redis_tasks worker tests.support.handlers:handler``);
handlers report to Redis lists so the tests wait on conditions, never on time.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from redis_tasks import (
    JsonRpcError,
    RedisTaskManager,
    TaskOrigin,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
    task_ref,
)
from redis_tasks.testing import start_redis_server
from tests.support.fleet import (
    Fleet,
    all_completed_once,
    create,
    go,
    next_start,
    recorded,
    terminal,
)
from tests.support.helpers import ALICE, ELICIT_ANSWER, ROOTS_ANSWER, reaches, wait_until

pytestmark = pytest.mark.slow


@pytest.fixture
async def manager(fleet_server: tuple[str, str], prefix: str) -> AsyncIterator[RedisTaskManager]:
    async with RedisTaskManager.from_url(fleet_server[1], prefix=prefix) as m:
        yield m


async def test_a_worker_killed_mid_handler_is_replaced_and_each_task_completes_once(
    fleet: Fleet, manager: RedisTaskManager, control: Redis
) -> None:
    """A dead worker's tasks run again elsewhere, each once, with a higher fence: those
    it read from the stream (XAUTOCLAIM takes their entries over) and those its batch
    claim took straight from their tenant's queue (no entry: taken over from the
    partition's lease set once their deadline passed)."""
    # Created before any worker: a partition's first task goes to its stream, the next
    # ones wait in the tenant's queue, which a batch claim takes them from.
    by_partition: dict[int, list[str]] = {}
    while max((len(ids) for ids in by_partition.values()), default=0) < 3:
        task_id = await create(manager, mode="hold")
        by_partition.setdefault(int(task_id.split(".")[0]), []).append(task_id)
    created = [task_id for ids in by_partition.values() for task_id in ids]
    first = fleet.start("--lease", "1", "--concurrency", str(len(created)))
    starts = {start["task"]: start for start in [await next_start(control, fleet) for _ in created]}
    assert {start["pid"] for start in starts.values()} == {first.process.pid}

    async def entry_of(task_id: str) -> Any:
        keys = manager.keyspace.task(int(task_id.split(".")[0]), task_id)
        return await control.hget(keys.task, "wk")

    entries = [await entry_of(task_id) for task_id in created]
    assert entries.count(b"0-1") >= 2, "no task was claimed straight from its queue"
    assert len(entries) - entries.count(b"0-1") >= 1, "no task was claimed from the stream"
    first.signal(signal.SIGKILL)
    first.process.wait(timeout=30)

    second = fleet.start("--lease", "1", "--concurrency", str(len(created)))
    again = [await next_start(control, fleet) for _ in created]  # once the leases ran out
    assert {start["pid"] for start in again} == {second.process.pid}
    assert {start["attempt"] for start in again} == {2}
    assert all(start["fence"] > starts[start["task"]]["fence"] for start in again)
    for start in again:
        await go(control, fleet, start)
    await all_completed_once(manager, fleet.workers, created)
    for task_id in created:
        task = await manager.find_task(TaskRequestContext(ALICE, task_id))
        assert task is not None
        assert task.result is not None
        assert task.result["fence"] in {start["fence"] for start in again}
    for ids in by_partition.values():
        partition = int(ids[0].split(".")[0])
        assert await control.zcard(manager.keyspace.leases(partition)) == 0


async def test_a_zombie_workers_late_complete_is_refused_by_the_fence(
    fleet: Fleet, manager: RedisTaskManager, control: Redis
) -> None:
    zombie = fleet.start("--lease", "1", "--concurrency", "1")
    task_id = await create(manager, mode="hold")
    first = await next_start(control, fleet)
    assert first["pid"] == zombie.process.pid
    zombie.signal(signal.SIGSTOP)  # stalls past its lease: renewals stop
    try:
        rescuer = fleet.start("--lease", "1")
        second = await next_start(control, fleet)
        assert second["pid"] == rescuer.process.pid
        assert second["fence"] > first["fence"]
        await go(control, fleet, second)
        done = await terminal(manager, task_id)
        assert done.result["fence"] == second["fence"]
        await go(control, fleet, first)  # the zombie's handler may now finish...
    finally:
        zombie.signal(signal.SIGCONT)

    def refused() -> list[dict[str, Any]]:
        return [
            e
            for e in zombie.events()
            if e.get("task") == task_ref(task_id)
            and e.get("event") in ("lease_lost", "lease_ended")
        ]

    async def zombie_refused() -> bool:
        return bool(refused())

    await wait_until(zombie_refused, within=30, what="the zombie to be refused")
    assert refused()[0]["fence"] == first["fence"]
    # ...but its late write is refused: the stored result is still the rescuer's.
    task = await manager.find_task(TaskRequestContext(ALICE, task_id))
    assert task is not None
    assert task.result is not None
    assert task.result["fence"] == second["fence"]
    assert await recorded(fleet.workers, {task_id}) == {task_ref(task_id): 1}


async def test_a_task_killed_while_waiting_for_input_replays_to_the_recorded_answers(
    fleet: Fleet, manager: RedisTaskManager, control: Redis
) -> None:
    first = fleet.start("--lease", "1")
    task_id = await create(manager, mode="ask")
    started = await next_start(control, fleet)

    await reaches(manager, task_id, TaskStatus.INPUT_REQUIRED)
    # The client answers one question through another process (this one)...
    await manager.update_task(TaskUpdateContext(ALICE, task_id, {"name": ELICIT_ANSWER}))
    first.signal(signal.SIGKILL)  # ...and the worker dies before the second answer.
    first.process.wait(timeout=30)
    await manager.update_task(TaskUpdateContext(ALICE, task_id, {"dirs": ROOTS_ANSWER}))

    fleet.start("--lease", "1")
    replay = await next_start(control, fleet)
    assert replay["fence"] > started["fence"]
    popped = await control.blpop([f"{fleet.namespace}:answered"], timeout=30)
    assert popped is not None
    answered = json.loads(popped[1])
    assert answered["fence"] == replay["fence"]
    assert answered["answers"] == {"name": ELICIT_ANSWER, "dirs": ROOTS_ANSWER}
    await go(control, fleet, replay)
    task = await terminal(manager, task_id)
    assert task.result["answers"] == {"name": ELICIT_ANSWER, "dirs": ROOTS_ANSWER}


async def test_input_round_trip_across_processes(
    fleet: Fleet, manager: RedisTaskManager, control: Redis
) -> None:
    fleet.start("--park-after", "60")  # answered in the run that asked (parking: below)
    task_id = await create(manager, mode="ask")
    started = await next_start(control, fleet)

    task = await reaches(manager, task_id, TaskStatus.INPUT_REQUIRED)
    assert set(task.input_requests) == {"name", "dirs"}
    assert task.status_message == "waiting for you"
    await manager.update_task(
        TaskUpdateContext(ALICE, task_id, {"name": ELICIT_ANSWER, "dirs": ROOTS_ANSWER})
    )
    await go(control, fleet, started)
    done = await terminal(manager, task_id)
    assert done.result["answers"] == {"name": ELICIT_ANSWER, "dirs": ROOTS_ANSWER}


async def test_a_parked_task_resumes_on_another_worker_once_through_a_kill_mid_resume(
    fleet: Fleet, manager: RedisTaskManager, control: Redis
) -> None:
    """A worker parks its waiting task at once and stops without waiting for anyone;
    the answers, given through this process, queue it again; another worker resumes
    it from the top (the answered round returns at once) and is killed mid-resume; a
    third reclaims it after the lease and completes it, once."""
    first = fleet.start("--lease", "1", "--park-after", "0")
    task_id = await create(manager, mode="ask")
    started = await next_start(control, fleet)

    async def parked() -> bool:
        seen = await manager.inspect_task(task_id)
        return seen is not None and seen.entry_state == "parked"

    await wait_until(parked, what="the task parked")
    first.signal(signal.SIGTERM)
    assert first.process.wait(timeout=30) == 0  # it held nothing: no grace to wait out
    second = fleet.start("--lease", "1")
    await manager.update_task(
        TaskUpdateContext(ALICE, task_id, {"name": ELICIT_ANSWER, "dirs": ROOTS_ANSWER})
    )
    resumed = await next_start(control, fleet)
    assert resumed["pid"] == second.process.pid
    assert resumed["fence"] > started["fence"]
    assert resumed["attempt"] == 1  # a park is no attempt
    popped = await control.blpop([f"{fleet.namespace}:answered"], timeout=30)
    assert popped is not None
    assert json.loads(popped[1])["fence"] == resumed["fence"]
    second.signal(signal.SIGKILL)  # mid-resume: past its wait, before its outcome
    second.process.wait(timeout=30)

    fleet.start("--lease", "1")
    again = await next_start(control, fleet)
    assert (again["attempt"], again["fence"] > resumed["fence"]) == (2, True)
    await go(control, fleet, again)
    task = await terminal(manager, task_id)
    assert task.status is TaskStatus.COMPLETED
    assert task.result["answers"] == {"name": ELICIT_ANSWER, "dirs": ROOTS_ANSWER}
    assert task.result["fence"] == again["fence"]
    assert await recorded(fleet.workers, {task_id}) == {task_ref(task_id): 1}


async def test_a_poison_task_that_crashes_its_worker_fails_after_max_attempts(
    fleet: Fleet, manager: RedisTaskManager, control: Redis
) -> None:
    task_id = await create(manager, mode="crash")
    for _ in range(3):  # each run kills its worker process mid-handler
        crashed = fleet.start("--lease", "0.5", "--max-attempts", "3")
        assert crashed.process.wait(timeout=60) == -signal.SIGKILL
    fleet.start("--lease", "0.5", "--max-attempts", "3")
    task = await terminal(manager, task_id)
    assert task.status is TaskStatus.FAILED
    assert task.error == JsonRpcError(code=-32603, message="Internal error")
    assert await control.llen(f"{fleet.namespace}:started") == 3  # ran max_attempts times

    async def poisoned() -> list[str]:
        events = fleet.workers[-1].events()
        return [e["task"] for e in events if e.get("event") == "claim_poisoned"]

    assert await wait_until(poisoned, what="the poisoned claim in the log") == [task_ref(task_id)]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_a_stop_signal_hands_running_tasks_to_another_worker_at_once(
    fleet: Fleet, manager: RedisTaskManager, control: Redis, sig: int
) -> None:
    leaving = fleet.start("--lease", "60", "--grace", "0.2")
    task_id = await create(manager, mode="hold")
    first = await next_start(control, fleet)
    assert first["pid"] == leaving.process.pid
    staying = fleet.start("--lease", "60")
    leaving.signal(sig)
    assert leaving.process.wait(timeout=30) == 0
    second = await next_start(control, fleet, within=20)  # far sooner than the 60 s lease
    assert second["pid"] == staying.process.pid
    assert second["attempt"] == 1  # the hand-back did not count as an attempt
    assert second["fence"] > first["fence"] + 1
    await go(control, fleet, second)
    assert (await terminal(manager, task_id)).result["pid"] == staying.process.pid
    released = [e for e in leaving.events() if e.get("event") == "task_released"]
    assert [e["task"] for e in released] == [task_ref(task_id)]


async def test_work_streams_and_pending_lists_are_empty_after_ten_thousand_tasks(
    fleet: Fleet, manager: RedisTaskManager, control: Redis
) -> None:
    fleet.start("--concurrency", "64")
    total = 10_000
    ids: list[str] = []
    for _start in range(0, total, 500):
        ids += await asyncio.gather(*(create(manager, mode="noop") for _ in range(500)))
    client = manager.client
    streams = [manager.keyspace.work(p) for p in range(manager.partitions)]
    rings = [manager.keyspace.ring(p) for p in range(manager.partitions)]

    async def drained() -> bool:
        # A stream may be empty for a moment while its partition's ring still holds
        # tenants with queued tasks (fair dispatch moves them in as workers claim).
        lengths = [await client.xlen(s) for s in streams]
        waiting = [await client.zcard(r) for r in rings]
        return sum(lengths) + sum(waiting) == 0

    await wait_until(drained, within=240, what="the work streams to drain")
    for stream in streams:
        assert await client.xlen(stream) == 0
        assert (await client.xpending(stream, "workers"))["pending"] == 0
    for task_id in ids[:: total // 50]:
        task = await manager.find_task(TaskRequestContext(ALICE, task_id))
        assert task is not None
        assert task.status is TaskStatus.COMPLETED


@pytest.mark.standalone_only
async def test_workers_survive_their_connections_being_killed(
    fleet: Fleet, manager: RedisTaskManager, control: Redis
) -> None:
    fleet.start("--lease", "2")
    first = await create(manager, mode="noop")
    assert (await terminal(manager, first)).status is TaskStatus.COMPLETED
    await control.client_kill_filter(_type="normal", skipme=True)  # every other client
    later = [await create(manager, mode="noop") for _ in range(20)]
    for task_id in later:
        assert (await terminal(manager, task_id)).status is TaskStatus.COMPLETED


async def test_every_task_created_before_a_redis_restart_ends_terminal_once(
    prefix: str, tmp_path: Path
) -> None:
    server = start_redis_server(tmp_path, "--appendonly", "yes", "--appendfsync", "always")
    namespace = f"ns-{uuid.uuid4().hex[:8]}"
    crew = Fleet(server.url, prefix, namespace, tmp_path)
    try:
        async with RedisTaskManager.from_url(server.url, prefix=prefix) as manager:
            for _ in range(2):
                crew.start("--lease", "2", "--concurrency", "16")
            created = [await create(manager, mode="count", seconds=0.005) for _ in range(500)]
            # Mid-run: kill -9 the server, then start it again on the same port and data.
            server.process.kill()
            server.process.wait(timeout=30)
            restarted = start_redis_server(
                tmp_path,
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                port=server.port,
            )
            try:

                async def create_again() -> bool:
                    try:
                        created.append(await create(manager, mode="count", seconds=0.005))
                    except Exception:
                        return False
                    return True

                await wait_until(create_again, within=30, what="Redis to come back")
                created += [await create(manager, mode="count", seconds=0.005) for _ in range(499)]

                # A completion whose reply was lost in the crash is retried and found
                # already applied: every task ends completed, none recorded twice.
                await all_completed_once(manager, crew.workers, created, within=120)
            finally:
                crew.stop_all()
                restarted.process.terminate()
                restarted.process.wait(timeout=30)
    finally:
        crew.stop_all()
        if server.process.poll() is None:
            server.process.kill()


async def test_worker_logs_never_contain_task_data(
    fleet: Fleet, manager: RedisTaskManager, control: Redis
) -> None:
    worker = fleet.start("--log-level", "debug")
    secret = "s3cr3t-" + uuid.uuid4().hex
    origin = TaskOrigin.from_persisted_state({"tool": "t", "arguments": {"token": secret}})
    ids = []
    for explode in (False, True):
        payload = json.dumps({"mode": "secrets", "secret": secret, "explode": explode}).encode()
        ids.append((await manager.create_task(ALICE, origin, payload=payload)).task_id)
    answer = {"action": "accept", "content": {"name": secret}}
    roots = {"roots": [{"uri": f"file:///{secret}"}]}
    for task_id in ids:
        await reaches(manager, task_id, TaskStatus.INPUT_REQUIRED)
        await manager.update_task(
            TaskUpdateContext(ALICE, task_id, {"name": answer, "dirs": roots})
        )
    done = [await terminal(manager, task_id) for task_id in ids]
    assert done[0].result["secret"] == secret
    assert done[1].error == JsonRpcError(code=-32603, message="Internal error")

    async def logged() -> bool:
        events = {e.get("event") for e in worker.events()}
        return {"task_complete", "handler_error", "task_fail"} <= events

    await wait_until(logged, what="the outcomes in the log")
    text = worker.log_path.read_text()
    assert "task_started" in text
    assert "ValueError" in text
    assert secret not in text


async def test_a_worker_process_sees_cancellation_within_one_renewal_interval(
    fleet: Fleet, manager: RedisTaskManager, control: Redis
) -> None:
    lease = 1.5  # renewals every 0.5 s; with hints off, renewal is the only messenger
    fleet.start("--lease", str(lease), "--no-cancel-hints")
    task_id = await create(manager, mode="until_cancelled")
    await next_start(control, fleet)
    asked = time.monotonic()
    await manager.request_cancellation(TaskRequestContext(ALICE, task_id))
    popped = await control.blpop([f"{fleet.namespace}:saw_cancel"], timeout=30)
    seen = time.monotonic()
    assert popped is not None
    assert seen - asked <= lease / 3 + 0.5
    assert (await terminal(manager, task_id)).status is TaskStatus.CANCELLED
