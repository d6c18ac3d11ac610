"""Cancel a task whose client never got its handle.

The extension creates a task inside FastMCP's middleware chain (its ``tools/call``
interceptor is the last gate before the tool), so the app's middleware runs around the
creation, once, in the server, and sees the task handle as the call's result. A
middleware that fails after the task was stored (an exception on the way out, a result
it replaces, a ``call_next`` it repeats) would leave a task that runs while its client
got an error or another answer, and can never poll, answer or cancel it.

:class:`HandleGuard` is put outermost in the app's middleware by the extension's
lifespan: it gives each client ``tools/call`` a list the extension notes every task it
creates in (:func:`note_created`), and cancels each noted task whose handle is not the
result leaving the chain (``request_cancellation``: a task no worker holds yet ends
``cancelled`` at once; one a fast worker already claimed gets the intent, which cancels
its tool). The server's log says so, naming the task by reference.

The cost: one list and a context variable per ``tools/call``; a script call only when
the app's middleware lost a handle.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext

from redis_tasks._errors import RedisTasksError
from redis_tasks._ids import task_ref
from redis_tasks._models import RequestContext, TaskRequestContext
from redis_tasks._redis.manager import RedisTaskManager

__all__ = ["HandleGuard", "created_mark", "forget_since", "note_created"]

logger = logging.getLogger("redis_tasks.fastmcp")

#: The tasks the current client ``tools/call`` created (``None`` outside a guarded call).
_CREATED: ContextVar[list[tuple[RequestContext, str]] | None] = ContextVar(
    "redis_tasks_fastmcp_created", default=None
)


def note_created(caller: RequestContext, task_id: str) -> None:
    """Note a task this call is creating, bound to ``caller`` (before it is stored: a
    create whose reply is lost may still have stored it)."""
    created = _CREATED.get()
    if created is not None:
        created.append((caller, task_id))


def created_mark() -> int:
    """How many tasks this call has noted so far (for :func:`forget_since`)."""
    created = _CREATED.get()
    return 0 if created is None else len(created)


def forget_since(mark: int) -> None:
    """Forget the tasks noted after ``mark``: their create was refused (a quota, a rate,
    a full Redis, a bad tenant), so nothing was stored and nothing is to cancel."""
    created = _CREATED.get()
    if created is not None:
        del created[mark:]


class HandleGuard(Middleware):
    """The app's outermost middleware, put there by the extension's lifespan: cancels a
    task the call created whose handle is not what the call answers (see the module)."""

    def __init__(self, manager: RedisTaskManager) -> None:
        self._manager = manager

    async def on_call_tool(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]
    ) -> Any:
        """Run the call with a fresh list of created tasks; cancel the lost ones."""
        created: list[tuple[RequestContext, str]] = []
        token = _CREATED.set(created)
        try:
            result = await call_next(context)
        except BaseException as error:
            _CREATED.reset(token)
            await self._cancel(created, keep=None, why=type(error).__name__)
            raise
        _CREATED.reset(token)
        if created:
            await self._cancel(created, keep=getattr(result, "taskId", None), why="replaced")
        return result

    async def _cancel(
        self, created: list[tuple[RequestContext, str]], *, keep: object, why: str
    ) -> None:
        for caller, task_id in created:
            if task_id == keep:
                continue
            try:
                await self._manager.request_cancellation(TaskRequestContext(caller, task_id))
            except RedisTasksError:
                continue  # never stored, already ended or expired: nothing runs unseen
            logger.warning(
                "the app's middleware lost a task's handle; the task is cancelled",
                extra={"event": "task_handle_lost", "task": task_ref(task_id), "reason": why},
            )
