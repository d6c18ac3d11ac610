"""The burst: one process fires thousands of calls at once (imported under spawn).

Each process starts all of its calls in one event-loop turn, after a barrier shared
with the other process, so both bursts hit Redis together. Every call reports what
it got as a short string; anything but the expected answers is an error the parent
test counts.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from redis_tasks import (
    RedisTaskManager,
    TaskRequestContext,
    TaskTerminalError,
    TaskUpdateContext,
)

from .helpers import ALICE, ORIGIN
from .procs import WAYS, _attempt


@dataclass(frozen=True)
class Plan:
    """What one process's burst holds (its calls, by kind)."""

    race_ids: list[str]  # tasks every process tries to end
    input_ids: list[str]  # tasks in input_required, answered by updates
    input_keys: int  # keys outstanding on each input task
    creates: int
    finds: int
    updates: int
    transitions_per_task: int  # terminal attempts per race task, per process


def total(plan: Plan) -> int:
    """How many calls one process makes."""
    return plan.creates + plan.finds + plan.updates + plan.transitions_per_task * len(plan.race_ids)


async def _guard(kind: str, subject: str, token: str, call: Any) -> tuple[str, str, str, str]:
    try:
        got = await call
    except TaskTerminalError:
        got = "terminal"
    except Exception as exc:  # the parent fails the test on any of these
        got = f"error:{type(exc).__name__}"
    return kind, subject, token, got


async def _find(manager: RedisTaskManager, task_id: str) -> str:
    task = await manager.find_task(TaskRequestContext(ALICE, task_id))
    return "missing" if task is None else "found"


async def _create(manager: RedisTaskManager) -> str:
    task = await manager.create_task(ALICE, ORIGIN)
    return task.task_id


async def _update(manager: RedisTaskManager, task_id: str, key: str, token: str) -> str:
    answer = {"action": "accept", "content": {"by": token}}
    await manager.update_task(TaskUpdateContext(ALICE, task_id, {key: answer}))
    return "ok"


def calls(manager: RedisTaskManager, plan: Plan, who: int) -> list[Any]:
    """The burst's coroutines, interleaved by kind so every batch mixes them."""
    by_kind: list[list[Any]] = [[], [], [], []]
    for n in range(plan.creates):
        by_kind[0].append(_guard("create", "", f"p{who}c{n}", _create(manager)))
    watched = plan.race_ids + plan.input_ids
    for n in range(plan.finds):
        task_id = watched[n % len(watched)]
        by_kind[1].append(_guard("find", task_id, "", _find(manager, task_id)))
    for n in range(plan.updates):
        task_id = plan.input_ids[n % len(plan.input_ids)]
        key = f"k{(n // len(plan.input_ids)) % plan.input_keys}"
        token = f"p{who}u{n}"
        label = f"{key}/{token}"
        by_kind[2].append(_guard("update", task_id, label, _update(manager, task_id, key, token)))
    for task_id in plan.race_ids:
        for n in range(plan.transitions_per_task):
            way = WAYS[(n + who) % len(WAYS)]
            token = f"p{who}t{n}"
            by_kind[3].append(_guard(way, task_id, token, _attempt(manager, task_id, way, token)))
    mixed: list[Any] = []
    longest = max(len(kind) for kind in by_kind)
    for i in range(longest):
        mixed += [kind[i] for kind in by_kind if i < len(kind)]
    return mixed


def burst(
    url: str, prefix: str, plan: Plan, who: int, barrier: Barrier, results: Queue[Any]
) -> None:
    """Enter a manager, wait at the barrier, fire every call of the plan at once."""

    async def main() -> list[tuple[str, str, str, str]]:
        async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
            pending = calls(manager, plan, who)
            await asyncio.to_thread(barrier.wait)
            return list(await asyncio.gather(*pending))

    results.put(asyncio.run(main()))
