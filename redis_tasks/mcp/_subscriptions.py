"""``notifications/tasks``: task status pushed to ``subscriptions/listen`` streams.

A client opens a listen stream naming ``taskIds``; this server middleware serves
it (the SDK's own listen handler knows only the core notification types). The
acknowledgement agrees to the IDs the caller may see (unknown and unauthorized
IDs are left out alike); each notification then carries exactly what
``tasks/get`` would return at that moment (built by the same function, after the
same authorized ``find_task``). Changes are learned from the manager's event
publisher, and every open task is re-read every ``recheck`` seconds as well,
because events are hints that may be lost. The stream ends, with
``SubscriptionsListenResult``, once every agreed task has been sent terminal or
has expired, or when the server shuts down.

Listen streams without ``taskIds`` go to the SDK untouched. A stream with
``taskIds`` carries only task notifications: its acknowledgement lists no core
types, so a client opens a second stream for those.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Final

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY
from mcp_types import (
    INTERNAL_ERROR,
    Notification,
    NotificationParams,
    SubscriptionsListenResult,
)
from pydantic import ConfigDict

from redis_tasks._manager import TaskManager
from redis_tasks._models import RequestContext, Task, TaskRequestContext
from redis_tasks._status import TERMINAL_STATUSES

from ._wire import declares_extension, invalid_params, missing_capability, notification_params

__all__ = ["TaskSubscriptions"]

logger = logging.getLogger("redis_tasks.mcp")

#: Task IDs one listen stream may name.
MAX_TASK_IDS: Final = 256


class _TaskParams(NotificationParams):
    # A DetailedTask is an open JSON object; the SDK's params model keeps extras.
    model_config = ConfigDict(extra="allow")


class _Frame(Notification[_TaskParams, str]):
    """One notification on a task stream (the SDK's typed notifications are closed)."""


def _task_ids(ctx: ServerRequestContext[Any, Any]) -> list[str] | None:
    """The ``taskIds`` of a listen request, or ``None`` when it names none."""
    if ctx.method != "subscriptions/listen" or ctx.request_id is None:
        return None
    notifications = (ctx.params or {}).get("notifications")
    if not isinstance(notifications, dict) or "taskIds" not in notifications:
        return None
    ids = notifications["taskIds"]
    if not isinstance(ids, list) or not all(isinstance(i, str) and len(i) <= 4096 for i in ids):
        raise invalid_params("taskIds must be a list of task IDs")
    if len(ids) > MAX_TASK_IDS:
        raise invalid_params(f"at most {MAX_TASK_IDS} taskIds per stream")
    return list(dict.fromkeys(ids))


class TaskSubscriptions:
    """A server middleware serving ``subscriptions/listen`` streams that name ``taskIds``.

    :class:`~redis_tasks.mcp.TasksExtension` installs it on the server it is bound
    to; ``max_streams`` bounds the open streams of this process (``-32603`` past
    it) and ``recheck`` is the fallback re-read interval in seconds.
    """

    def __init__(
        self,
        manager: TaskManager,
        authorize: Callable[[ServerRequestContext[Any, Any]], RequestContext],
        *,
        max_streams: int = 1024,
        recheck: float = 5.0,
    ) -> None:
        self._manager = manager
        self._authorize = authorize
        self._max_streams = max_streams
        self._recheck = recheck
        self._streams = 0
        self._closing = asyncio.Event()

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Serve streams inside this block; leaving it ends every open stream."""
        self._closing = asyncio.Event()
        try:
            yield
        finally:
            self._closing.set()

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        task_ids = _task_ids(ctx)
        if task_ids is None:
            return await call_next(ctx)
        if not declares_extension(ctx):
            raise missing_capability()
        if self._streams >= self._max_streams:
            raise MCPError(INTERNAL_ERROR, "Subscription limit reached")
        self._streams += 1
        try:
            return await self._serve(ctx, task_ids)
        finally:
            self._streams -= 1

    async def _find(self, request: RequestContext, task_id: str) -> Task | None:
        try:
            return await self._manager.find_task(TaskRequestContext(request, task_id))
        except Exception as exc:
            logger.warning("task subscription read failed: %s", type(exc).__name__)
            raise

    async def _serve(
        self, ctx: ServerRequestContext[Any, Any], task_ids: list[str]
    ) -> SubscriptionsListenResult:
        request = self._authorize(ctx)
        stream_id = ctx.request_id
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: stream_id}
        dirty: set[str] = set()
        changed = asyncio.Event()

        def on_event(task_id: str) -> None:
            if task_id in open_ids:
                dirty.add(task_id)
                changed.set()

        async def send(method: str, body: dict[str, Any]) -> None:
            params = _TaskParams.model_validate({**body, "_meta": meta})
            await ctx.session.send_notification(
                _Frame(method=method, params=params),  # type: ignore[arg-type]
                related_request_id=stream_id,
            )

        publisher = self._manager.event_publisher
        open_ids: set[str] = set()
        sent: dict[str, dict[str, Any]] = {}
        # Subscribe before the first reads, so a change between a read and the
        # subscription cannot be missed.
        with publisher.subscribe(on_event):
            await publisher.wait_ready()
            snapshots: dict[str, Task] = {}
            try:
                for task_id in task_ids:
                    task = await self._find(request, task_id)
                    if task is not None:
                        snapshots[task_id] = task
            except Exception:
                raise MCPError(INTERNAL_ERROR, "Internal error") from None
            open_ids.update(snapshots)
            await send(
                "notifications/subscriptions/acknowledged",
                {"notifications": {"taskIds": list(snapshots)}},
            )
            pending = dict(snapshots)
            while open_ids and not self._closing.is_set():
                for task_id, task in pending.items():
                    body = notification_params(task)
                    if sent.get(task_id) != body:
                        sent[task_id] = body
                        await send("notifications/tasks", body)
                    if task.status in TERMINAL_STATUSES:
                        open_ids.discard(task_id)
                if not open_ids:
                    break
                await self._wait(changed)
                recheck = set(dirty) if changed.is_set() else set(open_ids)
                changed.clear()
                dirty.clear()
                pending = {}
                for task_id in sorted(recheck & open_ids):
                    try:
                        task = await self._find(request, task_id)
                    except Exception:  # noqa: S112 - logged by _find; read again next time
                        continue
                    if task is None:
                        open_ids.discard(task_id)  # expired: nothing more will come
                    else:
                        pending[task_id] = task
        return SubscriptionsListenResult(_meta=meta)

    async def _wait(self, changed: asyncio.Event) -> None:
        """Until an event for an open task, shutdown, or the recheck interval."""
        waits = {
            asyncio.ensure_future(changed.wait()),
            asyncio.ensure_future(self._closing.wait()),
        }
        try:
            await asyncio.wait(waits, timeout=self._recheck, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
