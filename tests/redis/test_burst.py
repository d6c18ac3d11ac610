"""Bursts: two processes fire 5,000 calls each at once, on standalone and on the cluster.

Every call must be answered (no pool exhaustion, no timeout, no internal error),
and among the distinct terminal outcomes racing on a task exactly one wins.
"""

from __future__ import annotations

import multiprocessing
from collections import Counter, defaultdict
from typing import Any

import pytest

from redis_tasks import (
    InputRequest,
    RedisTaskManager,
    TaskRequestContext,
    TaskStatus,
)
from tests.support import burst
from tests.support.backends import SERVERS, server_url
from tests.support.helpers import ALICE, ORIGIN

pytestmark = pytest.mark.slow

SPAWN = multiprocessing.get_context("spawn")
PROCESSES = 2
RACE_TASKS = 100
INPUT_TASKS = 50
INPUT_KEYS = 16
STATUS = {
    "complete": TaskStatus.COMPLETED,
    "fail": TaskStatus.FAILED,
    "cancel": TaskStatus.CANCELLED,
}


def _question(key: str) -> InputRequest:
    return InputRequest(
        method="elicitation/create",
        params={"mode": "form", "message": key, "requestedSchema": {"type": "object"}},
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("server", SERVERS)
async def test_two_bursts_of_5000_calls_get_every_answer_and_one_winner_per_task(
    request: pytest.FixtureRequest, server: str, prefix: str
) -> None:
    url = server_url(request, server)
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        race = [(await manager.create_task(ALICE, ORIGIN)).task_id for _ in range(RACE_TASKS)]
        inputs = []
        for _ in range(INPUT_TASKS):
            task = await manager.create_task(ALICE, ORIGIN)
            await manager.request_input(
                task.task_id, {f"k{i}": _question(f"k{i}") for i in range(INPUT_KEYS)}
            )
            inputs.append(task.task_id)
        plan = burst.Plan(
            race_ids=race,
            input_ids=inputs,
            input_keys=INPUT_KEYS,
            creates=1000,
            finds=1500,
            updates=1000,
            transitions_per_task=15,
        )
        assert burst.total(plan) == 5000
        barrier = SPAWN.Barrier(PROCESSES)
        results: Any = SPAWN.Queue()
        children = [
            SPAWN.Process(target=burst.burst, args=(url, prefix, plan, who, barrier, results))
            for who in range(PROCESSES)
        ]
        for child in children:
            child.start()
        outcomes = [row for _ in children for row in results.get(timeout=240)]
        for child in children:
            child.join(timeout=30)
            assert child.exitcode == 0

        got = Counter(g if g.startswith("error") else "answered" for _, _, _, g in outcomes)
        print(f"{server}: {len(outcomes)} calls, {dict(got)}")
        assert len(outcomes) == PROCESSES * 5000
        assert got == {"answered": PROCESSES * 5000}

        # Distinct terminal outcomes: exactly one winner per task, and it is stored.
        attempts: dict[str, list[tuple[str, str, str]]] = defaultdict(list)
        for kind, subject, token, g in outcomes:
            if kind in STATUS:
                attempts[subject].append((kind, token, g))
        assert sorted(attempts) == sorted(race)
        for task_id, tries in attempts.items():
            assert Counter(g for _, _, g in tries) == {"won": 1, "terminal": len(tries) - 1}
            way, token, _ = next(t for t in tries if t[2] == "won")
            ended = await manager.find_task(TaskRequestContext(ALICE, task_id))
            assert ended is not None
            assert ended.status is STATUS[way]
            stored = (
                ended.result["winner"]
                if ended.result
                else ended.error.data
                if ended.error
                else ended.status_message
            )
            assert stored == f"{token}"

        # Every create returned a task that any process can find.
        created = [g for kind, _, _, g in outcomes if kind == "create"]
        assert len(set(created)) == PROCESSES * 1000
        for task_id in created[::50]:
            assert await manager.find_task(TaskRequestContext(ALICE, task_id)) is not None
        assert all(g == "found" for kind, _, _, g in outcomes if kind == "find")

        # Every outstanding key got exactly one accepted answer, from one of its senders.
        for task_id in inputs:
            answered = await manager.find_task(TaskRequestContext(ALICE, task_id))
            assert answered is not None
            assert answered.status is TaskStatus.WORKING  # all keys answered
            answers = await manager.take_input_responses(task_id)
            assert sorted(answers) == sorted(f"k{i}" for i in range(INPUT_KEYS))
            sent = {
                label
                for kind, subject, label, _ in outcomes
                if kind == "update" and subject == task_id
            }
            for key, answer in answers.items():
                assert f"{key}/{answer['content']['by']}" in sent
