"""``run_as_task``: a tool gathers its input inline, then hands the rest to a task.

The MRTR-to-task composition of SEP-2663 (conformance scenario
``tasks-mrtr-composition``): a tool registered in ``TasksExtension(input_first=...)``
runs in the server for its multi-round-trip rounds, answering ``InputRequiredResult``
until it has its input, and then calls :func:`run_as_task`. That call ends the
server's part: the extension answers the ``tools/call`` with a new task, whose origin
keeps the gathered ``inputResponses`` and ``requestState``; a worker then runs the
tool again from the top with those answers in ``ctx.input_responses``, and there
``run_as_task`` returns at once, so the tool goes on with the long part.

Why this shape: the tool is one function, the same in both places, written in the
SDK's own MRTR style; the answers travel in the task's origin, durable with it, so
any worker (and any retry after a crash) sees them; and the server's part stays short
and bounded (``input_first_timeout``), since it runs in the process that serves HTTP.
The signal is an exception that is not an ``Exception`` (the SDK turns those into tool
errors), raised only inside the extension's inline phase.
"""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, Literal

from ._wire import internal_error

if TYPE_CHECKING:
    from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

__all__ = ["run_as_task", "run_inline"]

logger = logging.getLogger("redis_tasks.mcp")

#: Where a tool of ``input_first`` runs now: inline in the server, or in a worker.
_PHASE: Final[ContextVar[Literal["inline", "task"] | None]] = ContextVar(
    "redis_tasks_mcp_phase", default=None
)


class RunAsTask(BaseException):
    """Raised by :func:`run_as_task` inline: the extension turns the call into a task."""


def run_as_task() -> None:
    """Hand the rest of this tool call to a durable task, with the input gathered so far.

    Call it once the tool has its input (its ``InputRequiredResult`` rounds are done).
    In the server's inline phase it does not return: the extension answers the
    ``tools/call`` with a ``CreateTaskResult``. In the worker that runs the task it
    returns at once. Anywhere else (a tool not in ``input_first``) it raises
    :class:`RuntimeError`.
    """
    phase = _PHASE.get()
    if phase == "task":
        return
    if phase == "inline":
        raise RunAsTask
    raise RuntimeError("run_as_task() is for tools in TasksExtension(input_first=...)")


async def run_inline(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext, limit_s: float
) -> HandlerResult | None:
    """Run an ``input_first`` tool in the server for one round, within ``limit_s``
    seconds (the server runs it); ``None`` once it called :func:`run_as_task`, the rest
    then being a task."""
    token = _PHASE.set("inline")
    try:
        async with asyncio.timeout(limit_s):
            return await call_next(ctx)
    except RunAsTask:
        return None
    except TimeoutError:
        logger.error("an input_first tool ran past input_first_timeout inline")
        raise internal_error() from None
    finally:
        _PHASE.reset(token)
