"""A FastMCP app whose task tools run on redis-tasks: progress, input and cancellation.

Serve it and run its tools (any number of each, on one Redis)::

    export REDIS_URL=redis://localhost:6379/0
    uvicorn fastmcp_app:app --port 8000            # from this directory
    redis-tasks worker --fastmcp fastmcp_app.py:mcp

then drive it with ``python fastmcp_client.py http://127.0.0.1:8000/mcp``. The same
file runs on fastmcp-tasks with the import of ``TasksExtension`` changed to
``from fastmcp_tasks import TasksExtension`` (and its worker,
``python -m fastmcp_tasks.worker_cli worker fastmcp_app.py:mcp``):
``tests/mcp/test_fastmcp_backends.py`` runs the client against both.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.utilities.tasks import TaskConfig
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

from redis_tasks.fastmcp import TasksExtension

mcp = FastMCP("reports")
mcp.add_extension(TasksExtension())  # the Redis: $REDIS_URL


@mcp.tool(task=TaskConfig(mode="required"))
async def report(quarter: str, ctx: Context) -> str:
    """Write a quarter's report (a task: the call returns a task handle at once)."""
    await ctx.report_progress(1, 2, "collecting")  # the task's statusMessage
    await asyncio.sleep(0.2)
    return f"report for {quarter}"


@mcp.tool(task=TaskConfig(mode="required"))
async def rebuild(ctx: Context) -> Any:
    """Ask before rebuilding: the task waits in input_required for the answer.

    The guard pattern, which both backends run; on redis-tasks a plain
    ``await ctx.elicit("Rebuild everything?", bool)`` works too.
    """
    answers = ctx.input_responses or {}
    if "confirm" not in answers:
        question = ElicitRequest(
            params=ElicitRequestFormParams(
                message="Rebuild everything?",
                requested_schema={"type": "object", "properties": {"ok": {"type": "boolean"}}},
            )
        )
        return InputRequiredResult(input_requests={"confirm": question})
    answer: Any = answers["confirm"]
    ok = answer.action == "accept" and bool((answer.content or {}).get("ok"))
    return "rebuilt" if ok else "skipped"


@mcp.tool(task=TaskConfig(mode="optional"))
async def crunch(seconds: float, ctx: Context) -> str:
    """Crunch for ``seconds`` (until cancelled)."""
    await ctx.report_progress(0, 1, "crunching")
    await asyncio.sleep(seconds)
    return "crunched"


app = mcp.http_app()
