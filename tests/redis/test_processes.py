"""Concurrency and visibility across real processes, on a real redis-server."""

from __future__ import annotations

import multiprocessing
from collections import Counter, defaultdict
from typing import Any

import pytest

from redis_tasks import (
    RedisTaskManager,
    TaskOrigin,
    TaskRequestContext,
    TaskStatus,
    TaskUpdateContext,
)
from redis_tasks.testing import RedisServer
from tests.support import procs
from tests.support.helpers import ALICE, ELICIT, ELICIT_ANSWER, ORIGIN, ROOTS

pytestmark = pytest.mark.slow

SPAWN = multiprocessing.get_context("spawn")
TASKS = 200
PROCESSES = 2
COROUTINES = 25


async def test_exactly_one_terminal_transition_wins_across_processes(
    redis_server: RedisServer, prefix: str
) -> None:
    async with RedisTaskManager.from_url(redis_server.url, prefix=prefix) as manager:
        task_ids = [(await manager.create_task(ALICE, ORIGIN)).task_id for _ in range(TASKS)]
        barrier = SPAWN.Barrier(PROCESSES)
        results: Any = SPAWN.Queue()
        children = [
            SPAWN.Process(
                target=procs.race,
                args=(redis_server.url, prefix, task_ids, who, COROUTINES, barrier, results),
            )
            for who in range(PROCESSES)
        ]
        for child in children:
            child.start()
        outcomes = [row for _ in children for row in results.get(timeout=120)]
        for child in children:
            child.join(timeout=30)
            assert child.exitcode == 0

        by_task: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
        for task_id, way, token, got in outcomes:
            by_task[task_id].append((way, token, got))
        assert len(by_task) == TASKS
        winning_processes: Counter[str] = Counter()
        for task_id, attempts in by_task.items():
            assert len(attempts) == PROCESSES * COROUTINES
            assert Counter(got for _, _, got in attempts) == {
                "won": 1,
                "terminal": PROCESSES * COROUTINES - 1,
            }
            way, token, _ = next(a for a in attempts if a[2] == "won")
            winning_processes[token[:2]] += 1
            task = await manager.find_task(TaskRequestContext(ALICE, task_id))
            assert task is not None
            expected_status = {
                "complete": TaskStatus.COMPLETED,
                "fail": TaskStatus.FAILED,
                "cancel": TaskStatus.CANCELLED,
            }[way]
            assert task.status is expected_status
            stored = (
                task.result["winner"]
                if task.result
                else task.error.data
                if task.error
                else task.status_message
            )
            assert stored == token  # the stored outcome belongs to the winner
        # Both processes won some races: they really raced each other.
        assert set(winning_processes) == {"p0", "p1"}


async def test_a_subscriber_in_another_process_receives_every_change(
    redis_server: RedisServer, prefix: str
) -> None:
    ready = SPAWN.Event()
    expected: Any = SPAWN.Queue()
    results: Any = SPAWN.Queue()
    child = SPAWN.Process(
        target=procs.subscribe, args=(redis_server.url, prefix, ready, expected, results, 30.0)
    )
    child.start()
    try:
        assert ready.wait(timeout=60)
        changes: Counter[str] = Counter()
        async with RedisTaskManager.from_url(redis_server.url, prefix=prefix) as manager:
            for n in range(30):
                task_id = (await manager.create_task(ALICE, ORIGIN)).task_id
                changes[task_id] += 1
                if n % 3 == 0:
                    await manager.request_input(task_id, {"a": ELICIT, "b": ROOTS})
                    await manager.update_task(
                        TaskUpdateContext(ALICE, task_id, {"a": ELICIT_ANSWER})
                    )
                    changes[task_id] += 2
                if n % 2 == 0:
                    # No worker holds it: the request ends it (one change).
                    await manager.request_cancellation(TaskRequestContext(ALICE, task_id))
                else:
                    await manager.complete_task(task_id, {"n": n})
                changes[task_id] += 1
        expected.put(dict(changes))
        received = results.get(timeout=60)
    finally:
        child.join(timeout=30)
    assert child.exitcode == 0
    assert received == dict(changes)


@pytest.mark.parametrize(
    "text",
    [' {"b" : 1.50,\n"a":["\\u00e9", 1e3]}\t', '{"long":0.1000000000000000000000000000000000001}'],
)
async def test_find_from_another_process_right_after_create_returns_an_equal_origin(
    redis_server: RedisServer, prefix: str, text: str
) -> None:
    async with RedisTaskManager.from_url(redis_server.url, prefix=prefix) as manager:
        origin = TaskOrigin.from_persisted_string(text)
        task = await manager.create_task(ALICE, origin)
        results: Any = SPAWN.Queue()
        child = SPAWN.Process(
            target=procs.find_origin, args=(redis_server.url, prefix, task.task_id, results)
        )
        child.start()
        persisted = results.get(timeout=60)
        child.join(timeout=30)
        assert child.exitcode == 0
        assert persisted == text
        assert TaskOrigin.from_persisted_string(persisted) == origin
