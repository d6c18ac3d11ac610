"""Calls made in one event-loop turn, gathered per partition into one script call.

A worker's handlers that end together (a batch claimed together, jobs of equal
length) each wrote their outcome with a ``finish`` call of its own. Per task that
was nine keys and nine arguments packed, a route, a reply parsed and three
coroutines on the worker; and a script run, a ``TIME``, an ``XACK``, an ``XDEL``
and an ``HINCRBY`` on the server. A partition's tasks share its hash tag, so on a
cluster too they can go as one call to one node, which writes what they share
once (``lua/finish_batch.lua``). Profiled, the outcome write was about 28 % of a
draining worker's CPU.

The cost: a lone call waits for the end of its turn, which the auto-pipeline
(:mod:`.pipeline`) makes it wait anyway, and each batch is sent from a task of
its own. A batch of one goes the way a single call always went. Each caller
still gets its own answer (its own result or its own error), and a caller
cancelled before its batch is sent withdraws its call.

Creates go the same way (``lua/create.lua``): an MCP server under load
creates many tasks at once, and a create's fixed cost on the server (the script
call, its arguments, its helpers' closures, the clock, the counts and the event)
was more than half of its Redis work.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from redis_tasks._errors import InternalError

__all__ = ["TurnBatches"]

_ItemT = TypeVar("_ItemT")
_ResultT = TypeVar("_ResultT")


class _Pending(Generic[_ItemT, _ResultT]):
    __slots__ = ("future", "item")

    def __init__(self, item: _ItemT, future: asyncio.Future[_ResultT]) -> None:
        self.item = item
        self.future = future


class TurnBatches(Generic[_ItemT, _ResultT]):
    """Gathers the items submitted in one loop turn per partition (see the module).

    ``one(item)`` sends an item alone (returning its result, raising its error);
    ``many(partition, items)`` sends two or more of one partition in one call and
    returns each one's result, or its error (an exception instance), in order. At
    most ``limit`` items go in one call.
    """

    def __init__(
        self,
        one: Callable[[_ItemT], Awaitable[_ResultT]],
        many: Callable[[int, list[_ItemT]], Awaitable[list[_ResultT | BaseException]]],
        limit: int,
    ) -> None:
        self._one = one
        self._many = many
        self._limit = limit
        self._pending: dict[int, list[_Pending[_ItemT, _ResultT]]] = {}
        self._scheduled = False
        # The sends under way (asyncio keeps only weak references to tasks).
        self._sends: set[asyncio.Task[None]] = set()

    async def submit(self, partition: int, item: _ItemT) -> _ResultT:
        """Send ``item`` with the others of ``partition`` submitted this turn; return
        its result, or raise its error."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_ResultT] = loop.create_future()
        pending = self._pending.get(partition)
        if pending is None:
            pending = self._pending[partition] = []
        pending.append(_Pending(item, future))
        if not self._scheduled:
            self._scheduled = True
            # A batch belongs to no one caller: not to the first one's context (its
            # span, say), which the sends would otherwise inherit. A new empty one
            # each turn: one shared Context cannot be entered by two loops' threads
            # at once.
            loop.call_soon(self._flush, context=contextvars.Context())
        return await future

    def _flush(self) -> None:
        self._scheduled = False
        gathered, self._pending = self._pending, {}
        limit = self._limit
        for partition, pending in gathered.items():
            live = [p for p in pending if not p.future.done()]  # withdrawn: cancelled
            for start in range(0, len(live), limit):
                send = asyncio.ensure_future(self._send(partition, live[start : start + limit]))
                self._sends.add(send)
                send.add_done_callback(self._sends.discard)

    async def _send(self, partition: int, batch: list[_Pending[_ItemT, _ResultT]]) -> None:
        results: list[_ResultT | BaseException]
        try:
            if len(batch) == 1:
                results = [await self._one(batch[0].item)]
            else:
                results = await self._many(partition, [p.item for p in batch])
                if len(results) != len(batch):
                    raise InternalError("a batch answered for another number of calls")
        except BaseException as exc:
            for pending in batch:
                if pending.future.done():
                    continue
                if isinstance(exc, Exception):
                    pending.future.set_exception(exc)
                else:
                    pending.future.cancel()  # the send itself was cancelled (a shutdown)
            if not isinstance(exc, Exception):
                raise
            return
        for pending, result in zip(batch, results, strict=True):
            if pending.future.done():
                continue
            if isinstance(result, BaseException):
                pending.future.set_exception(result)
            else:
                pending.future.set_result(result)
