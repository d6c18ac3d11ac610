"""The worker in one process: outcomes, cancellation, leases.

Tests that use only the contract and the work queue take ``worker_backend`` and run
on the in-memory backend, a standalone redis-server, the cluster, Valkey 9.1 and
Redis 8.2; the rest look at Redis streams themselves and take ``redis_worker_backend``,
every real server but the in-memory one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import pytest

from redis_tasks import (
    ClaimOutcome,
    InMemoryTaskManager,
    InputRequest,
    JsonRpcError,
    LeaseLostError,
    RedisTaskManager,
    TaskExecution,
    TaskFailed,
    TaskOrigin,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
    Worker,
)
from redis_tasks._redis.keys import DIRECT_ENTRY, WORK_GROUP
from redis_tasks._work_queue import WorkEntry, WorkerBackend
from redis_tasks._worker import runs as runs_module
from redis_tasks._worker.intake import Intake
from redis_tasks._worker.slots import Slots
from tests.support.backends import EXTRA_SERVERS, SERVERS, Backend, real_backend, server_url
from tests.support.helpers import ALICE, ELICIT, ELICIT_ANSWER, ORIGIN, reaches, wait_until

Handler = Any


def holds(fact: Any) -> Any:
    """``fact`` (a plain callable) as ``wait_until``'s condition."""

    async def condition() -> bool:
        return bool(fact())

    return condition


@pytest.fixture(params=["memory", *SERVERS, *EXTRA_SERVERS])
async def worker_backend(request: pytest.FixtureRequest, prefix: str) -> AsyncIterator[Backend]:
    """A backend a worker runs on: in memory, standalone Redis, the cluster, and the
    other server builds."""
    manager: WorkerBackend
    if request.param == "memory":
        manager = InMemoryTaskManager()
    else:
        manager = RedisTaskManager.from_url(server_url(request, request.param), prefix=prefix)
    async with manager:
        yield Backend(request.param, manager, prefix)


@pytest.fixture(params=[*SERVERS, *EXTRA_SERVERS])
async def redis_worker_backend(
    request: pytest.FixtureRequest, prefix: str
) -> AsyncIterator[Backend]:
    """Conftest's ``redis_backend`` here on the other server builds too: these tests
    read the work streams and their group (``XINFO``), whose replies a version may change."""
    kind = request.param
    async with real_backend(kind, server_url(request, kind), prefix) as subject:
        yield subject


@asynccontextmanager
async def running(
    manager: WorkerBackend, handler: Handler, **options: Any
) -> AsyncIterator[Worker]:
    """A worker running in the background for the duration of the block."""
    worker = Worker(manager, handler, **options)
    async with worker:
        runner = asyncio.create_task(worker.run())
        try:
            yield worker
        finally:
            await worker.stop(grace=options.get("lease", timedelta(seconds=1)).total_seconds())
            await runner


@asynccontextmanager
async def one_partition(backend: Backend) -> AsyncIterator[WorkerBackend]:
    """A manager of ``backend``'s kind with one partition, so that tenants without a
    home partition meet in one ring (a newcomer needs others waiting where it lands)."""
    manager: WorkerBackend
    if isinstance(backend.manager, RedisTaskManager):
        manager = RedisTaskManager(backend.manager.client, prefix=backend.prefix, partitions=1)
    else:
        manager = InMemoryTaskManager(partitions=1)
    async with manager:
        yield manager


async def settled(manager: WorkerBackend, task_id: str, within: float = 15.0) -> Any:
    async def terminal() -> Any:
        task = await manager.find_task(TaskRequestContext(ALICE, task_id))
        return task if task is not None and task.is_terminal else None

    return await wait_until(terminal, within=within, what="a terminal task")


async def create(manager: WorkerBackend, payload: bytes = b"", **options: Any) -> str:
    return (await manager.create_task(ALICE, ORIGIN, payload=payload, **options)).task_id


async def test_handler_results_complete_tasks_even_with_is_error(worker_backend: Backend) -> None:
    m = worker_backend.manager
    seen: list[tuple[str, int, int, bytes]] = []

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        seen.append((execution.task_id, execution.attempt, execution.fence, execution.payload))
        assert execution.origin == ORIGIN
        return {"content": [], "isError": execution.payload == b"tool-error"}

    ok, tool_error = await create(m, b"fine"), await create(m, b"tool-error")
    async with running(m, handler):
        done = await settled(m, ok)
        flagged = await settled(m, tool_error)
    assert done.status is TaskStatus.COMPLETED
    assert done.result == {"content": [], "isError": False}
    assert flagged.status is TaskStatus.COMPLETED
    assert flagged.result["isError"] is True
    assert sorted((t, a, p) for t, a, _, p in seen) == sorted(
        [(ok, 1, b"fine"), (tool_error, 1, b"tool-error")]
    )
    assert all(fence > 0 for _, _, fence, _ in seen)


async def test_task_failed_ends_the_task_with_its_error(
    worker_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    m = worker_backend.manager

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        raise TaskFailed(JsonRpcError(code=-32001, message="quota exceeded", data={"n": 1}))

    task_id = await create(m)
    with caplog.at_level(logging.INFO, logger="redis_tasks.worker"):
        async with running(m, handler):
            task = await settled(m, task_id)
    assert task.status is TaskStatus.FAILED
    assert task.error == JsonRpcError(code=-32001, message="quota exceeded", data={"n": 1})
    # Its log line says why by code, never by message (a message may carry secrets).
    (failed,) = [r for r in caplog.records if getattr(r, "event", None) == "task_fail"]
    assert failed.code == -32001  # type: ignore[attr-defined]
    assert "quota exceeded" not in f"{failed.getMessage()} {vars(failed)}"


async def test_other_exceptions_fail_with_a_generic_error_and_log_no_secret(
    worker_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    m = worker_backend.manager

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        raise RuntimeError("password=hunter2 in " + execution.payload.decode())

    task_id = await create(m, b"payload-s3cret")
    with caplog.at_level(logging.DEBUG, logger="redis_tasks"):
        async with running(m, handler):
            task = await settled(m, task_id)
    assert task.status is TaskStatus.FAILED
    assert task.error == JsonRpcError(code=-32603, message="Internal error")
    logged = " ".join(f"{r.getMessage()} {vars(r)}" for r in caplog.records)
    assert "RuntimeError" in logged
    assert "test_worker.py" in logged
    assert "hunter2" not in logged
    assert "s3cret" not in logged


@pytest.mark.parametrize(
    "result", [["not", "a", "dict"], {"nan": float("nan")}, {"big": "x" * 2_000_000}]
)
async def test_a_result_that_cannot_be_stored_fails_the_task(
    worker_backend: Backend, result: Any
) -> None:
    m = worker_backend.manager

    async def handler(execution: TaskExecution) -> Any:
        return result

    task_id = await create(m)
    async with running(m, handler):
        task = await settled(m, task_id)
    assert task.status is TaskStatus.FAILED
    assert task.error == JsonRpcError(code=-32603, message="Internal error")


async def test_a_bug_in_the_outcome_write_is_told_once_and_left_to_the_lease(
    worker_backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Only Redis failing is retried within the lease. A bug in the write (a planted
    TypeError) is logged once with where it was raised; the task is left to its lease,
    after which it runs again, and the worker goes on."""
    m = worker_backend.manager
    complete = m.complete_task
    writes = 0

    async def planted_write(task_id: str, result: dict[str, Any], *, fence: int) -> None:
        nonlocal writes
        writes += 1
        if writes == 1:
            raise TypeError("planted")
        await complete(task_id, result, fence=fence)

    monkeypatch.setattr(m, "complete_task", planted_write)

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        return {"content": [], "isError": False}

    task_id = await create(m)
    with caplog.at_level(logging.INFO, logger="redis_tasks"):
        async with running(m, handler, lease=timedelta(seconds=1)):
            task = await settled(m, task_id)
    assert task.status is TaskStatus.COMPLETED
    assert writes == 2  # the bug once, then the run after the lease
    (failed,) = [r for r in caplog.records if getattr(r, "event", "") == "finish_failed"]
    assert failed.levelno == logging.ERROR
    assert vars(failed)["error"] == "TypeError"
    assert "in planted_write" in vars(failed)["where"]


async def test_a_bug_in_a_read_loop_is_told_once_and_the_other_partitions_are_served(
    worker_backend: Backend, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A read loop retries Redis failing, not a bug: a TypeError planted in partition
    0's loop ends that loop with one log line naming it and where it was raised (not
    the message), and the other partitions' loops go on."""
    m = worker_backend.manager
    read = Intake.read

    async def planted_read(self: Intake, partition: int) -> None:
        if partition == 0:
            raise TypeError("planted")
        await read(self, partition)

    monkeypatch.setattr(Intake, "read", planted_read)

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        return {"content": [], "isError": False}

    task_id = await create(m)
    while task_id.startswith("0."):  # a task partition 0's loop would have served
        task_id = await create(m)
    with caplog.at_level(logging.INFO, logger="redis_tasks"):
        async with running(m, handler):
            task = await settled(m, task_id)
    assert task.status is TaskStatus.COMPLETED
    (failed,) = [r for r in caplog.records if getattr(r, "event", "") == "loop_failed"]
    assert failed.levelno == logging.ERROR
    assert vars(failed)["loop"] == "redis-tasks-read-0"
    assert vars(failed)["error"] == "TypeError"
    assert "in planted_read" in vars(failed)["where"]
    assert "planted" not in failed.getMessage()


@pytest.mark.parametrize("kind", ["memory", "redis"])
async def test_a_start_that_fails_mid_batch_hands_that_batch_back_at_once(
    kind: str,
    request: pytest.FixtureRequest,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run that cannot start (a bug planted in its launch: the second of four runs,
    the first of a batch of three) is logged, forgotten (not left among the runs),
    and its task and the rest of its batch are handed back at once: all four
    complete long before the 60 s lease their claims took would run out, each
    handler once."""
    m: WorkerBackend
    if kind == "memory":
        m = InMemoryTaskManager(partitions=1)
    else:
        url = request.getfixturevalue("redis_server").url
        m = RedisTaskManager.from_url(url, prefix=prefix, partitions=1)
    launches = 0

    class Planted:
        """``asyncio`` as the runs see it, whose second ``ensure_future`` raises."""

        def __getattr__(self, name: str) -> Any:
            return getattr(asyncio, name)

        @staticmethod
        def ensure_future(body: Any) -> Any:
            nonlocal launches
            launches += 1
            if launches == 2:
                raise RuntimeError("planted")
            return asyncio.ensure_future(body)

    monkeypatch.setattr(runs_module, "asyncio", Planted())
    ran: list[str] = []

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        ran.append(execution.task_id)
        return {"content": [], "isError": False}

    async with m:
        tasks = [await create(m) for _ in range(4)]
        with caplog.at_level(logging.INFO, logger="redis_tasks"):
            async with running(m, handler, concurrency=4, lease=timedelta(seconds=60)) as w:
                for task_id in tasks:
                    assert (await settled(m, task_id, within=10)).status is TaskStatus.COMPLETED
                await wait_until(holds(lambda: w.running == 0), what="every run let go")
    assert sorted(ran) == sorted(tasks)
    failed = [r for r in caplog.records if getattr(r, "event", "") == "internal_error"]
    assert [vars(r)["error"] for r in failed] == ["RuntimeError"]
    assert len([r for r in caplog.records if getattr(r, "event", "") == "task_released"]) == 3


async def test_a_read_loop_cancelled_while_it_waits_for_a_slot_is_no_longer_waiting() -> None:
    """A read loop waiting for a free slot is busy, not stuck, for the health check;
    cancelled while it waits, it must stop counting as waiting, or the check would
    take a dead loop for a busy one forever."""
    m = InMemoryTaskManager(partitions=1)
    release = asyncio.Event()

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        await release.wait()
        return {"content": [], "isError": False}

    task_id = await create(m)
    async with running(m, handler, concurrency=1) as worker:
        await wait_until(holds(lambda: worker.running == 1), what="the slot taken")
        health = worker._health
        await wait_until(holds(lambda: 0 in health._waiting), what="the loop waiting")
        (loop,) = [t for t in asyncio.all_tasks() if t.get_name() == "redis-tasks-read-0"]
        loop.cancel()
        await wait_until(holds(loop.done), what="the loop cancelled")
        assert health._waiting == set()
        release.set()
        await settled(m, task_id)


async def test_cancellation_is_observed_within_one_renewal_interval(
    worker_backend: Backend,
) -> None:
    m = worker_backend.manager
    started = asyncio.Event()
    observed: list[float] = []

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        started.set()
        await execution.cancelled.wait()
        observed.append(time.monotonic())
        raise asyncio.CancelledError

    lease = timedelta(seconds=1.5)  # renewals every 0.5 s
    task_id = await create(m)
    async with running(m, handler, lease=lease, cancel_hints=False):
        await asyncio.wait_for(started.wait(), 10)
        asked = time.monotonic()
        await m.request_cancellation(TaskRequestContext(ALICE, task_id))
        task = await settled(m, task_id)
    assert task.status is TaskStatus.CANCELLED
    assert observed[0] - asked <= lease.total_seconds() / 3 + 0.4


async def test_a_cancellation_hint_delivers_it_sooner_than_renewal(worker_backend: Backend) -> None:
    m = worker_backend.manager
    started = asyncio.Event()

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        started.set()
        await execution.cancelled.wait()
        raise asyncio.CancelledError

    task_id = await create(m)
    async with running(m, handler, lease=timedelta(seconds=60)):  # renewals every 20 s
        await asyncio.wait_for(started.wait(), 10)
        await m.request_cancellation(TaskRequestContext(ALICE, task_id))
        task = await settled(m, task_id, within=10)
    assert task.status is TaskStatus.CANCELLED


async def test_a_worker_hears_only_the_signals_of_what_it_must_see(
    worker_backend: Backend,
) -> None:
    """Workers tail the signals, not every change: a drain of plain tasks signals
    nothing, while answers, a cancellation and an outcome written by another caller
    each signal once, and reach their handlers long before a renewal would (renewals
    every 20 s here)."""
    m = worker_backend.manager
    heard: list[str] = []
    registration = m.work_queue.signals.subscribe(heard.append)
    await m.work_queue.signals.wait_ready()
    holding: list[str] = []
    stopped: list[str] = []

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        mode = execution.payload
        if mode == b"ask":
            return {"answers": await execution.request_input({"name": ELICIT}, "who?")}
        if mode == b"hold":
            holding.append(execution.task_id)
            try:
                # Until cancelled, or stopped by the worker (ended elsewhere).
                await execution.cancelled.wait()
                raise asyncio.CancelledError
            finally:
                stopped.append(execution.task_id)
        return {}

    try:
        # The asking handler keeps its slot (park_after=None): a parked task's answer
        # signals no worker, since none holds it.
        async with running(m, handler, lease=timedelta(seconds=60), park_after=None):
            plain = [await create(m) for _ in range(20)]
            for task_id in plain:
                await settled(m, task_id)
            asking = await create(m, b"ask")
            cancelled, ended = await create(m, b"hold"), await create(m, b"hold")
            await reaches(m, asking, TaskStatus.INPUT_REQUIRED)
            await m.update_task(TaskUpdateContext(ALICE, asking, {"name": ELICIT_ANSWER}))

            async def both_holding() -> bool:
                return sorted(holding) == sorted([cancelled, ended])

            await wait_until(both_holding, what="both holding handlers running")
            await m.request_cancellation(TaskRequestContext(ALICE, cancelled))
            await m.fail_task(ended, JsonRpcError(code=-32001, message="ended elsewhere"))
            assert (await settled(m, asking, within=10)).status is TaskStatus.COMPLETED
            assert (await settled(m, cancelled, within=10)).status is TaskStatus.CANCELLED

            async def both_stopped() -> bool:
                return sorted(stopped) == sorted([cancelled, ended])

            await wait_until(both_stopped, within=10, what="both holding handlers stopped")

            async def all_heard() -> bool:
                return sorted(heard) == sorted([asking, cancelled, ended])

            await wait_until(all_heard, within=10, what="one signal each")
    finally:
        registration.close()
    assert not set(heard) & set(plain)


async def test_a_change_signal_sends_no_other_worker_after_the_task(
    worker_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two workers on the same partitions; one runs a task, which is cancelled: the
    signal stops its handler, and the other worker takes it for no newcomer (it sent a
    batch claim with that task as ``first``, spending a newcomers' slot on it). A
    newcomer then is heard as one."""
    hinted: list[str] = []
    monkeypatch.setattr(Intake, "hint", lambda self, task_id: hinted.append(task_id))
    holding: list[str] = []
    release = asyncio.Event()

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        holding.append(execution.task_id)
        if execution.payload == b"hold":
            await execution.cancelled.wait()
            raise asyncio.CancelledError
        await release.wait()
        return {}

    options: dict[str, Any] = {"concurrency": 1, "lease": timedelta(seconds=60)}
    async with (
        one_partition(worker_backend) as m,
        running(m, handler, **options),
        running(m, handler, **options),
    ):
        held = await create(m, b"hold")
        await wait_until(holds(lambda: holding == [held]), what="the task running")
        await m.request_cancellation(TaskRequestContext(ALICE, held))
        assert (await settled(m, held)).status is TaskStatus.CANCELLED
        # Both workers busy (one task each), a third waiting in the stream, a fourth
        # queued: the late tenant joins a ring where the flood waits, a newcomer.
        for _ in range(4):
            await create(m, tenant="flood")
        await wait_until(holds(lambda: len(holding) == 3), what="both workers busy")
        newcomer = await create(m, tenant="late")
        await wait_until(holds(lambda: newcomer in hinted), what="the newcomer hinted")
        release.set()
    # (The flood's tasks that went straight into a stream while both workers were
    # saturated were signalled as newcomers: rightly, see redis_tasks._worker.busy.)
    assert held not in hinted


async def test_a_worker_without_cancel_hints_still_starts_newcomers_early(
    worker_backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    hinted: list[str] = []
    monkeypatch.setattr(Intake, "hint", lambda self, task_id: hinted.append(task_id))
    started: list[str] = []
    release = asyncio.Event()

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        started.append(execution.task_id)
        await release.wait()
        return {}

    async with (
        one_partition(worker_backend) as m,
        running(m, handler, concurrency=1, cancel_hints=False),
    ):
        flood = [await create(m, tenant="flood") for _ in range(3)]
        await wait_until(holds(lambda: started == flood[:1]), what="the worker busy")
        newcomer = await create(m, tenant="late")
        await wait_until(holds(lambda: newcomer in hinted), what="the newcomer hinted")
        release.set()
        for task_id in (*flood, newcomer):
            assert (await settled(m, task_id)).status is TaskStatus.COMPLETED


async def test_a_handler_that_ignores_cancellation_may_still_complete(
    worker_backend: Backend,
) -> None:
    m = worker_backend.manager
    started, release = asyncio.Event(), asyncio.Event()

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        started.set()
        await release.wait()
        return {"saw_cancel": execution.cancelled.is_set()}

    task_id = await create(m)
    async with running(m, handler, lease=timedelta(seconds=0.6)):
        await asyncio.wait_for(started.wait(), 10)
        await m.request_cancellation(TaskRequestContext(ALICE, task_id))

        async def noticed() -> bool:
            return bool(await m.is_cancellation_requested(task_id))

        await wait_until(noticed)
        release.set()
        task = await settled(m, task_id)
    assert task.status is TaskStatus.COMPLETED  # intent, not force


async def test_a_task_cancelled_before_any_claim_ends_cancelled_without_running(
    worker_backend: Backend,
) -> None:
    m = worker_backend.manager
    ran: list[str] = []

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        ran.append(execution.task_id)
        return {}

    task_id = await create(m)
    await m.request_cancellation(TaskRequestContext(ALICE, task_id))
    marker = await create(m)
    async with running(m, handler):
        task = await settled(m, task_id)
        await settled(m, marker)
    assert task.status is TaskStatus.CANCELLED
    assert ran == [marker]


async def test_input_round_trip_resumes_the_handler_with_the_answers(
    worker_backend: Backend,
) -> None:
    m = worker_backend.manager

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        answers = await execution.request_input({"name": ELICIT}, "need a name")
        return {"hello": answers["name"]["content"]["name"]}

    task_id = await create(m)
    async with running(m, handler, input_poll_interval=timedelta(seconds=30)):
        await reaches(m, task_id, TaskStatus.INPUT_REQUIRED)
        await m.update_task(TaskUpdateContext(ALICE, task_id, {"name": ELICIT_ANSWER}))
        task = await settled(m, task_id, within=10)  # the event hint wakes it, not the poll
    assert task.result == {"hello": "Luca"}


async def test_graceful_stop_hands_unfinished_tasks_to_another_worker_at_once(
    worker_backend: Backend,
) -> None:
    await stop_and_hand_over(worker_backend.manager, ignores_stop=False)


async def test_a_stop_hands_back_the_task_of_a_handler_that_ignores_it() -> None:
    """The handler swallows the cancellation that stops it: the stop hands its task
    back after a call's timeout and gives its slot back, and the handler, ending
    later on its own, writes nothing. (What runs here is the worker's own; the
    hand-back itself is the test above's, on every backend.)"""
    async with InMemoryTaskManager() as m:
        await stop_and_hand_over(m, ignores_stop=True)


async def stop_and_hand_over(m: WorkerBackend, *, ignores_stop: bool) -> None:
    runs: list[tuple[str, int, int]] = []
    first_started = asyncio.Event()
    let_go = asyncio.Event()

    async def stubborn(execution: TaskExecution) -> dict[str, Any]:
        runs.append(("a", execution.fence, execution.attempt))
        first_started.set()
        while True:
            try:
                await let_go.wait()  # never finishes by itself
                return {"by": "a"}
            except asyncio.CancelledError:
                if not ignores_stop:
                    raise

    async def finisher(execution: TaskExecution) -> dict[str, Any]:
        runs.append(("b", execution.fence, execution.attempt))
        return {"by": "b"}

    lease = timedelta(seconds=60)  # far longer than the test may take: no reclaim involved
    task_id = await create(m)
    async with running(m, stubborn, lease=lease, name="a") as a:
        await asyncio.wait_for(first_started.wait(), 10)
        async with running(m, finisher, lease=lease, name="b"):
            stopped_at = time.monotonic()
            await a.stop(grace=0.1)
            assert a._slots.out == 0  # the stop gave back every slot, the stubborn one's too
            task = await settled(m, task_id, within=10)
            let_go.set()  # the handler that ignored its stop ends now, to no effect

            async def a_is_done() -> bool:
                return a.running == 0

            await wait_until(a_is_done)
    assert time.monotonic() - stopped_at < lease.total_seconds() / 4
    assert task.result == {"by": "b"}
    assert (await settled(m, task_id)).result == {"by": "b"}
    # The hand-back bumped the fence and did not count as a failed attempt.
    (a_name, a_fence, a_attempt), (b_name, b_fence, b_attempt) = runs
    assert (a_name, a_attempt, b_name, b_attempt) == ("a", 1, "b", 1)
    assert b_fence > a_fence + 1


async def test_a_worker_that_loses_its_lease_stops_its_handler(worker_backend: Backend) -> None:
    m = worker_backend.manager
    cancelled_runs: list[int] = []
    started: asyncio.Queue[int] = asyncio.Queue()

    first_fence: list[int] = []

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        await started.put(execution.fence)
        if not first_fence or execution.fence == first_fence[0]:
            first_fence.append(execution.fence)
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                cancelled_runs.append(execution.fence)
                raise
        return {"fence": execution.fence}

    task_id = await create(m)
    async with running(m, handler, lease=timedelta(seconds=0.6), cancel_hints=False):
        fence = await asyncio.wait_for(started.get(), 10)
        # Another owner takes over (as a reclaim would): the fence moves on.
        await m.work_queue.release(task_id, fence=fence)
        task = await settled(m, task_id)
    assert cancelled_runs == [fence]
    assert task.result["fence"] > fence + 1


async def test_expired_and_malformed_entries_are_dropped(redis_worker_backend: Backend) -> None:
    m = redis_worker_backend.manager
    client = m.client
    ran: list[str] = []

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        ran.append(execution.task_id)
        return {}

    short = await create(m, ttl=timedelta(milliseconds=50))

    async def expired() -> bool:
        return await m.find_task(TaskRequestContext(ALICE, short)) is None

    await wait_until(expired)
    for partition in range(m.partitions):
        await client.xadd(m.keyspace.work(partition), {"t": "{not-a-task}"})
        await client.xadd(m.keyspace.work(partition), {"other": "x"})

    async def streams_empty() -> bool:
        lengths = [await client.xlen(m.keyspace.work(p)) for p in range(m.partitions)]
        return bool(sum(lengths) == 0)

    async with running(m, handler):
        await wait_until(streams_empty)
    assert ran == []


async def test_a_lost_work_group_is_recreated(redis_worker_backend: Backend) -> None:
    m = redis_worker_backend.manager

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        return {"ok": True}

    async with running(m, handler, partitions=[0, 1]):
        for partition in (0, 1):
            await m.client.xgroup_destroy(m.keyspace.work(partition), WORK_GROUP)
        tasks = [await create(m) for _ in range(12)]
        ours = [t for t in tasks if int(t.split(".")[0]) in (0, 1)]
        for task_id in ours:
            assert (await settled(m, task_id)).status is TaskStatus.COMPLETED


async def test_stopping_an_idle_worker_is_prompt_and_removes_its_consumer(
    redis_worker_backend: Backend,
) -> None:
    m = redis_worker_backend.manager

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        return {}

    async with running(m, handler, name="idle-one") as worker:
        # Redis 7.0 registers a consumer once it is delivered an entry.
        await settled(m, await create(m))
        assert await _consumers(m, "idle-one")
        started = time.monotonic()
        await worker.stop()
    assert time.monotonic() - started < 3
    assert not await _consumers(m, "idle-one")


async def _consumers(m: RedisTaskManager, name: str) -> bool:
    for partition in range(m.partitions):
        consumers = await m.client.xinfo_consumers(m.keyspace.work(partition), WORK_GROUP)
        if any(c["name"] in (name, name.encode()) for c in consumers):
            return True
    return False


def test_execution_repr_hides_origin_and_payload() -> None:
    execution = TaskExecution(
        None,  # type: ignore[arg-type]
        "1." + "A" * 24,
        origin=TaskOrigin.from_persisted_string('{"k":"0rigin"}'),
        payload=b"pay1oad",
        attempt=1,
        fence=3,
        input_poll=1.0,
    )
    assert "0rigin" not in repr(execution)
    assert "pay1oad" not in repr(execution)
    assert "fence=3" in repr(execution)


def test_worker_refuses_bad_settings(redis_worker_backend: Backend) -> None:
    m = redis_worker_backend.manager

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        return {}

    bad: dict[str, Any]
    for bad in (
        {"concurrency": 0},
        {"max_attempts": 0},
        {"lease": timedelta(milliseconds=10)},
        {"partitions": []},
    ):
        with pytest.raises(ValueError):
            Worker(m, handler, **bad)
    with pytest.raises(TypeError):
        TaskFailed({"code": 1})  # type: ignore[arg-type]
    assert InputRequest(method="roots/list").kind == "r"


async def test_a_worker_with_fewer_slots_than_partitions_serves_every_partition(
    worker_backend: Backend,
) -> None:
    m = worker_backend.manager

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        return {"ok": True}

    tasks = [await create(m) for _ in range(40)]
    assert len({t.split(".")[0] for t in tasks}) > 8  # spread over many partitions
    async with running(m, handler, concurrency=1):
        for task_id in tasks:
            assert (await settled(m, task_id)).status is TaskStatus.COMPLETED


async def test_requeue_puts_an_unclaimed_entry_back_at_the_tail(
    redis_worker_backend: Backend,
) -> None:
    m = redis_worker_backend.manager
    client = m.client
    task_id = await create(m)
    stream = m.keyspace.work(int(task_id.split(".")[0]))
    delivered: Any = await client.xreadgroup(WORK_GROUP, "busy", {stream: ">"}, count=1)
    entry_id = delivered[0][1][0][0].decode()
    entry = WorkEntry(int(task_id.split(".")[0]), entry_id, task_id)
    await m.work_queue.requeue(entry)
    await m.work_queue.requeue(entry)  # a retry changes nothing more
    assert (await client.xpending(stream, WORK_GROUP))["pending"] == 0
    entries: Any = await client.xrange(stream)
    assert len(entries) == 1
    ((new_id, fields),) = entries
    assert fields[b"t"].decode() == task_id
    assert new_id.decode() > entry_id
    again: Any = await client.xreadgroup(WORK_GROUP, "idle", {stream: ">"}, count=1)
    claim = await m.work_queue.claim(
        WorkEntry(entry.partition, again[0][1][0][0].decode(), task_id),
        consumer="idle",
        lease=timedelta(seconds=5),
        max_attempts=5,
    )
    assert claim.attempt == 1  # never claimed before: nothing counted
    await m.complete_task(task_id, {"ok": True}, fence=claim.fence)
    assert await client.xlen(stream) == 0


async def test_claim_next_reads_and_claims_a_batch_in_one_call(
    redis_worker_backend: Backend,
) -> None:
    m = redis_worker_backend.manager
    client = m.client
    lease = timedelta(seconds=30)
    # Tasks of one partition, in creation order: created until five share one.
    by_partition: dict[int, list[str]] = {}
    while max((len(ids) for ids in by_partition.values()), default=0) < 5:
        task_id = await create(m, payload=b"job")
        by_partition.setdefault(int(task_id.split(".")[0]), []).append(task_id)
    partition, ids = max(by_partition.items(), key=lambda item: len(item[1]))
    ids = ids[:5]
    stream = m.keyspace.work(partition)
    # Make three of them interesting: cancelled before any worker held it (ended by the
    # request: no claim meets it), expired (its record gone), and an entry that is not
    # ours at all.
    await m.request_cancellation(TaskRequestContext(ALICE, ids[1]))
    await client.delete(m.keyspace.task(partition, ids[2]).task)
    await client.xadd(stream, {"t": "no}{such:task"})
    await client.xadd(stream, {"other": "field"})

    queue = m.work_queue
    claimed = await queue.claim_next(
        partition, consumer="w1", count=50, lease=lease, max_attempts=3
    )
    by_task = {entry.task_id: claim for entry, claim in claimed if entry.task_id}
    outcomes = {task_id: claim.outcome for task_id, claim in by_task.items()}
    entries_of_this_test = {t: o for t, o in outcomes.items() if t in ids}
    assert entries_of_this_test == {
        ids[0]: ClaimOutcome.RUN,
        ids[2]: ClaimOutcome.EXPIRED,
        ids[3]: ClaimOutcome.RUN,
        ids[4]: ClaimOutcome.RUN,
    }
    foreign = [claim for entry, claim in claimed if not entry.task_id]
    assert [claim.outcome for claim in foreign] == [ClaimOutcome.EXPIRED] * 2
    run = by_task[ids[0]]
    assert (run.attempt, run.payload, run.origin) == (1, b"job", ORIGIN)
    assert run.fence > 0
    # Settled and foreign entries are gone from the stream; the three claimed ones stay
    # held: pending with their entry, or (the tasks that waited in their tenant's queue,
    # claimed straight from it) in the lease set by deadline.
    direct = [
        e.task_id
        for e, c in claimed
        if e.entry_id == DIRECT_ENTRY and c.outcome is ClaimOutcome.RUN
    ]
    assert sorted(await client.zrange(m.keyspace.leases(partition), 0, -1)) == sorted(
        task_id.encode() for task_id in direct if task_id
    )
    assert await client.xlen(stream) + len(direct) == 3
    assert (await client.xpending(stream, WORK_GROUP))["pending"] + len(direct) == len(
        [c for c in by_task.values() if c.outcome is ClaimOutcome.RUN]
    )
    cancelled = await m.find_task(TaskRequestContext(ALICE, ids[1]))
    assert cancelled is not None
    assert cancelled.status is TaskStatus.CANCELLED
    # Nothing new to read; the claimed lease is ours and fences our writes.
    again = await queue.claim_next(partition, consumer="w2", count=50, lease=lease, max_attempts=3)
    assert again == []
    with pytest.raises(LeaseLostError):
        await m.complete_task(ids[0], {"ok": True}, fence=run.fence - 1)
    await m.complete_task(ids[0], {"ok": True}, fence=run.fence)
    done = await m.find_task(TaskRequestContext(ALICE, ids[0]))
    assert done is not None
    assert done.status is TaskStatus.COMPLETED


async def test_reclaiming_an_entry_whose_lease_this_worker_holds_starts_no_second_run(
    worker_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    """The reclaim loop takes over entries idle for a lease, its own included. When a
    late renewal of its own run lands between that takeover and the claim, the claim
    answers with the lease the run already holds (as it answers a retry): the worker
    must not start the task a second time beside the first (seen in the fault tests
    as one task completed twice)."""
    m = worker_backend.manager
    starts: list[int] = []
    release = asyncio.Event()

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        starts.append(execution.fence)
        await release.wait()
        return {"content": [], "isError": False}

    task_id = await create(m)
    partition = int(task_id.split(".")[0])
    with caplog.at_level(logging.INFO, logger="redis_tasks"):
        async with running(m, handler, name="w-own", lease=timedelta(seconds=30)) as worker:

            async def started() -> bool:
                return len(starts) == 1

            await wait_until(started, what="the first start")
            # What the reclaim loop does with an entry idle for a lease, the idle time
            # here 0: the takeover of our own entry, then its claim.
            _, entries = await m.work_queue.reclaim(
                partition, consumer="w-own", idle=timedelta(0), cursor="0-0", count=10
            )
            (entry,) = [e for e in entries if e.task_id == task_id]
            slot = worker._slots.take_up_to(1)
            assert slot is not None
            assert slot.count == 1
            worker._runs.start_reclaimed(entry, slot)

            async def refused() -> bool:
                return any(getattr(r, "event", "") == "claim_held_here" for r in caplog.records)

            await wait_until(refused, what="the claim to be refused a second run")
            release.set()
            task = await settled(m, task_id)
    assert task.status is TaskStatus.COMPLETED
    assert len(starts) == 1


def _events(caplog: pytest.LogCaptureFixture, *names: str) -> list[tuple[str, Any]]:
    found = [(getattr(r, "event", None), getattr(r, "slots", None)) for r in caplog.records]
    return [(event, slots) for event, slots in found if event in names]


def test_every_slot_taken_is_given_back_exactly_once(caplog: pytest.LogCaptureFixture) -> None:
    """The rule of the slots, where it lives (SlotLease): a lease gives back what it
    still holds once; a second give-back gives nothing and is counted, and so is a run
    started beyond the slots taken for it (the pool lends that slot, so the count of
    slots out stays true)."""
    slots = Slots(3)
    with caplog.at_level(logging.ERROR, logger="redis_tasks"):
        batch = slots.take_up_to(5)
        assert batch is not None
        assert (batch.count, slots.out, slots.free) == (3, 3, 0)
        assert slots.take_up_to(1) is None  # none free: no lease
        run = batch.split()
        assert (batch.count, run.count) == (2, 1)
        batch.give_back()
        assert (batch.count, slots.out) == (0, 1)
        batch.give_back()  # twice: refused
        assert (slots.out, slots.given_twice) == (1, 1)
        beyond = batch.split()  # a run the batch had no slot left for
        assert (slots.out, slots.overdrawn) == (2, 1)
        run.give_back()
        beyond.give_back()
        assert (slots.out, slots.free) == (0, 3)
    assert _events(caplog, "slot_given_twice", "slots_overdrawn") == [
        ("slot_given_twice", None),
        ("slots_overdrawn", None),
    ]
    # Balanced again: what the suites' check (conftest) asks of every worker.
    slots.given_twice = slots.overdrawn = 0


async def test_a_reader_first_in_line_or_overflowing_takes_the_slots_it_may() -> None:
    """The newcomers' reader waits first in line and may take an overflow slot when
    no slot is free; a lease with a companion (the newcomers' share) splits and gives
    back both together, the companion first, so its reader wakes first."""
    slots = Slots(1, overflow=Slots(1))
    share = Slots(1)
    assert slots.overflow is not None
    held = slots.take_up_to(1)
    assert held is not None
    order: list[str] = []

    async def reader(name: str, **how: bool) -> None:
        assert await slots.wait_free(**how)
        pool = slots if slots.free else slots.overflow
        assert pool is not None
        taken = pool.take_up_to(1)
        assert taken is not None
        order.append(f"{name}:{'slot' if pool is slots else 'overflow'}")
        taken.give_back()

    plain = asyncio.ensure_future(reader("plain"))
    await asyncio.sleep(0)  # in line first
    # An overflow slot is free: the newcomers' reader takes it at once, ahead of the line.
    await reader("newcomer", first=True, overflow=True)
    assert order == ["newcomer:overflow"]
    extra = slots.overflow.take_up_to(1)
    assert extra is not None
    newcomer = asyncio.ensure_future(reader("newcomer", first=True, overflow=True))
    await asyncio.sleep(0)
    extra.give_back()  # an overflow slot comes back: it wakes the overflowing reader
    await newcomer
    held.give_back()  # a slot comes back: the plain reader's turn
    await plain
    assert order == ["newcomer:overflow", "newcomer:overflow", "plain:slot"]
    batch = slots.take_up_to(1)
    shared = share.take_up_to(1)
    assert batch is not None
    assert shared is not None
    run = batch.with_companion(shared).split()
    assert (slots.out, share.out) == (1, 1)
    batch.give_back()
    run.give_back()
    assert (slots.out, share.out, slots.given_twice, share.given_twice) == (0, 0, 0, 0)


async def test_a_batch_gathers_the_slots_that_free_together_keeping_its_turn() -> None:
    """``Slots.gather``: a reader whose turn it is waits (up to its patience) until
    enough slots are free, and no reader behind it takes them meanwhile; past the
    patience it goes with what is free. A batch then claims the slots that free up
    together, not one call each."""
    slots = Slots(4)
    held = slots.take_up_to(4)
    assert held is not None
    runs = [held.split() for _ in range(4)]
    held.give_back()
    took: list[tuple[str, int]] = []

    async def reader(name: str, patience: float) -> None:
        assert await slots.wait_free()
        await slots.gather(3, patience)
        taken = slots.take_up_to(16)
        assert taken is not None
        took.append((name, taken.count))
        taken.give_back()

    first = asyncio.ensure_future(reader("first", 60.0))
    second = asyncio.ensure_future(reader("second", 60.0))
    await asyncio.sleep(0)
    for run in runs[:3]:  # three runs end one after another: "first" waits for all three
        run.give_back()
        await asyncio.sleep(0)
    await first
    assert took == [("first", 3)]
    runs[3].give_back()
    await second  # four free again: at once
    assert took == [("first", 3), ("second", 4)]
    # Past its patience a reader goes with what is free.
    lone = slots.take_up_to(3)
    assert lone is not None
    await reader("patient", 0.001)
    assert took[-1] == ("patient", 1)
    lone.give_back()
    assert (slots.out, slots.free) == (0, 4)


async def test_a_slot_never_given_back_is_reported_when_the_worker_stops(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Every run has ended once a worker has stopped, so every slot must be back: one
    that is not was lost on some path, and the stop says so (the suites' check in
    conftest fails the test as well)."""
    m = InMemoryTaskManager(partitions=1)

    async def handler(execution: TaskExecution) -> dict[str, Any]:
        return {"content": [], "isError": False}

    task_id = await create(m)
    with caplog.at_level(logging.INFO, logger="redis_tasks"):
        async with running(m, handler, lease=timedelta(seconds=1)) as worker:
            await settled(m, task_id)
            lost = worker._slots.take_up_to(1)  # as a path that forgot its lease would
            assert lost is not None
    assert _events(caplog, "slots_leaked") == [("slots_leaked", 1)]
    lost.give_back()
    assert worker._slots.out == 0
