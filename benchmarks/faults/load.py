"""The load: clients creating tasks and following each to terminal, every call timed."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Awaitable
from datetime import timedelta
from typing import TypeVar

from redis_tasks import BackendError, RedisTaskManager, TaskRequestContext
from redis_tasks._bench._adapter import ORIGIN, WHO

from .records import BACKOFF, WAKE, Op, Settings

T = TypeVar("T")


class Load:
    """The lifecycle load: clients creating tasks and following each to terminal."""

    def __init__(self, manager: RedisTaskManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings
        self.t0 = time.monotonic()
        self.creating = True
        self.ops: list[Op] = []
        self.created: dict[str, int] = {}  # task ID -> its create's op number
        self.created_at: dict[str, float] = {}  # task ID -> when its create began
        self.failed_creates: dict[int, str] = {}  # op number -> what the create raised
        self.ran_by: dict[str, int] = {}  # task ID -> the pid in its result, seen terminal
        self.vanished: set[str] = set()  # created, then not found while followed
        self.lags: list[float] = []  # event-loop lag samples, seconds
        self.last_event = -1.0  # when the event publisher last delivered a task ID
        self._numbers = itertools.count()
        self._changed: dict[str, asyncio.Event] = {}

    def on_change(self, task_id: str) -> None:
        """Event-publisher listener: wake the client following ``task_id``."""
        self.last_event = self.now()
        event = self._changed.get(task_id)
        if event is not None:
            event.set()

    def now(self) -> float:
        """Seconds since the load started."""
        return time.monotonic() - self.t0

    async def _timed(self, kind: str, call: Awaitable[T]) -> tuple[Op, T | None]:
        began = time.monotonic()
        value: T | None = None
        try:
            value = await call
            outcome = "ok"
        except BackendError:
            outcome = "backend_error"  # allowed while a fault lasts
        except Exception as exc:  # any other failure breaks a promise; its type is kept
            outcome = type(exc).__name__
        op = Op(kind, began - self.t0, time.monotonic() - began, outcome)
        self.ops.append(op)
        return op, value

    async def client(self) -> None:
        """Create and follow tasks until creating stops."""
        while self.creating:
            await self.once(until_stopped=True)

    async def once(self, *, until_stopped: bool) -> None:
        """Create one task and follow it to terminal (or, with ``until_stopped``, until
        creating stops: the final check follows the rest)."""
        op = next(self._numbers)
        began = self.now()
        call, task = await self._timed(
            "create",
            self.manager.create_task(
                WHO, ORIGIN, ttl=timedelta(seconds=self.settings.ttl), metadata={"op": op}
            ),
        )
        if task is None:
            self.failed_creates[op] = call.outcome
            await asyncio.sleep(BACKOFF)
            return
        self.created[task.task_id] = op
        self.created_at[task.task_id] = began
        await self._follow(task.task_id, until_stopped)

    async def _follow(self, task_id: str, until_stopped: bool) -> None:
        event = self._changed[task_id] = asyncio.Event()
        ctx = TaskRequestContext(WHO, task_id)
        try:
            while self.creating or not until_stopped:
                event.clear()
                call, found = await self._timed("find", self.manager.find_task(ctx))
                if call.outcome == "ok" and found is None:
                    self.vanished.add(task_id)
                    call.outcome = "none"
                    return
                if found is not None and found.is_terminal:
                    if found.result is not None:
                        self.ran_by[task_id] = int(found.result["pid"])
                    return
                if found is None:  # the call failed: back off, then look again
                    await asyncio.sleep(BACKOFF)
                    continue
                # The publisher wakes us; the timeout only bounds a missed event.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(WAKE):
                        await event.wait()
        finally:
            del self._changed[task_id]

    async def watch_loop(self) -> None:
        """Sample this process's event-loop lag (how late a short sleep wakes) until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.05)
            self.lags.append(max(0.0, loop.time() - before - 0.05))
