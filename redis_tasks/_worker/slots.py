"""Handler slots, and the worker's own background tasks.

Readers wait for a free slot before reading but do not reserve it while
blocked, so idle partitions hold no capacity; a slot is taken only for an entry
in hand (or a batch about to be claimed) and given back as soon as its handler
is done, before the outcome is written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from redis_tasks._cancel import cancel_and_wait

__all__ = ["Background", "Slots"]


class Slots:
    """Free handler slots (see the module)."""

    def __init__(self, total: int) -> None:
        self.free = total
        self._available = asyncio.Event()
        self._available.set()
        self.closed = False

    async def wait_free(self) -> bool:
        """Wait until a slot is free (taking none); ``False`` once closed."""
        while self.free == 0 and not self.closed:
            self._available.clear()
            await self._available.wait()
        return not self.closed

    def close(self) -> None:
        """Wake every waiter: the worker is stopping."""
        self.closed = True
        self._available.set()

    def take_up_to(self, wanted: int) -> int:
        """Take up to ``wanted`` free slots; how many were taken."""
        taken = min(wanted, self.free)
        self.free -= taken
        return taken

    def give(self, count: int = 1) -> None:
        """Give ``count`` slots back."""
        self.free += count
        if self.free > 0:
            self._available.set()


class Background:
    """Tasks the worker starts and must not lose: asyncio keeps only weak
    references to tasks, so these are held here until done."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def spawn(self, coroutine: Coroutine[Any, Any, Any]) -> asyncio.Future[Any]:
        """Run ``coroutine`` as a task held until it ends."""
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def cancel_all(self) -> None:
        """Cancel whatever is still running and wait for it to end (cancelling again
        what goes on: see :mod:`redis_tasks._cancel`)."""
        await cancel_and_wait(list(self._tasks))
