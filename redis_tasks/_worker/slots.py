"""Handler slots, and the worker's own background tasks.

Readers wait for a free slot before reading but do not reserve it while
blocked, so idle partitions hold no capacity; a slot is taken only for an entry
in hand (or a batch about to be claimed) and given back as soon as its handler
is done, before the outcome is written.

When several partitions' readers wait for slots, each takes no more than an even
share of those that free up (:meth:`Slots.take_share`): handlers started
together end together, and the first reader to wake would otherwise take them
all, batch after batch, while the other partitions (and the tenants whose tasks
wait there) waited whole rounds.
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
        #: Readers blocked in :meth:`wait_free` (the others a free slot is shared with).
        self.waiting = 0

    async def wait_free(self) -> bool:
        """Wait until a slot is free (taking none); ``False`` once closed."""
        while self.free == 0 and not self.closed:
            self._available.clear()
            self.waiting += 1
            try:
                await self._available.wait()
            finally:
                self.waiting -= 1
        return not self.closed

    def take_share(self, wanted: int) -> int:
        """Take up to ``wanted`` free slots, but at most an even share (at least one)
        of them among this reader and those still waiting; how many were taken."""
        share = max(1, self.free // (self.waiting + 1))
        return self.take_up_to(min(wanted, share))

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
