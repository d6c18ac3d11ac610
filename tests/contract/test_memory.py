"""InMemoryTaskManager specifics: bounded defaults, capacity, an injectable clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from redis_tasks import (
    CapacityError,
    InMemoryTaskManager,
    TaskNotFoundError,
    TaskRequestContext,
    TaskStatus,
)
from tests.support.helpers import ALICE, ORIGIN


class ManualClock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC).timestamp()

    def __call__(self) -> float:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta.total_seconds()


async def test_defaults_are_bounded() -> None:
    manager = InMemoryTaskManager()
    task = await manager.create_task(ALICE, ORIGIN)
    assert task.ttl == timedelta(hours=1)
    assert task.poll_interval == timedelta(seconds=1)
    for _ in range(1023):
        await manager.create_task(ALICE, ORIGIN)
    assert len(manager) == 1024
    with pytest.raises(CapacityError):
        await manager.create_task(ALICE, ORIGIN)


async def test_a_full_manager_never_evicts_a_live_task_but_purges_expired_ones() -> None:
    clock = ManualClock()
    manager = InMemoryTaskManager(max_tasks=3, clock=clock)
    short = await manager.create_task(ALICE, ORIGIN, ttl=timedelta(seconds=10))
    keep = [await manager.create_task(ALICE, ORIGIN) for _ in range(2)]
    await manager.complete_task(keep[0].task_id, {"ok": True})  # terminal is still live
    with pytest.raises(CapacityError):
        await manager.create_task(ALICE, ORIGIN)
    assert await manager.find_task(TaskRequestContext(ALICE, short.task_id)) is not None
    clock.advance(timedelta(seconds=11))
    fresh = await manager.create_task(ALICE, ORIGIN)
    assert await manager.find_task(TaskRequestContext(ALICE, short.task_id)) is None
    for task in (*keep, fresh):
        assert await manager.find_task(TaskRequestContext(ALICE, task.task_id)) is not None


async def test_the_injected_clock_drives_timestamps_and_expiry() -> None:
    clock = ManualClock()
    manager = InMemoryTaskManager(clock=clock)
    task = await manager.create_task(ALICE, ORIGIN, ttl=timedelta(minutes=1))
    assert task.created_at == datetime(2026, 1, 1, tzinfo=UTC)
    clock.advance(timedelta(seconds=30))
    await manager.mark_working(task.task_id, "half way")
    found = await manager.find_task(TaskRequestContext(ALICE, task.task_id))
    assert found is not None
    assert found.last_updated_at == datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
    clock.advance(timedelta(seconds=-20))  # the clock steps back: updated never does
    await manager.mark_working(task.task_id, "again")
    found = await manager.find_task(TaskRequestContext(ALICE, task.task_id))
    assert found is not None
    assert found.last_updated_at == datetime(2026, 1, 1, 0, 0, 30, tzinfo=UTC)
    assert found.status is TaskStatus.WORKING
    clock.advance(timedelta(seconds=51))
    assert await manager.find_task(TaskRequestContext(ALICE, task.task_id)) is None
    with pytest.raises(TaskNotFoundError):
        await manager.complete_task(task.task_id, {"ok": True})
