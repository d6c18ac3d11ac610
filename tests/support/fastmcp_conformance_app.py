"""The conformance fixture server again, written as a FastMCP app on redis_tasks.fastmcp.

The same tools as ``tests.support.conformance_app`` (the ones the official suite's
tasks scenarios call), declared the FastMCP way (``task=TaskConfig(...)``), served by
uvicorn (``tests.support.fastmcp_conformance_app:app``) and run by ``redis-tasks worker
--fastmcp tests/support/fastmcp_conformance_app.py:mcp``, on the Redis named by
``RT_TEST_REDIS_URL`` under ``RT_TEST_PREFIX``. ``confirm_delete`` and ``multi_input``
call ``ctx.elicit()`` as a FastMCP tool does inline; ``test_tool_with_task`` uses the
guard pattern, inline first (``input_first``), then as a task.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from fastmcp import Context, FastMCP
from fastmcp.exceptions import ToolError
from fastmcp.utilities.tasks import TaskConfig
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult
from pydantic import BaseModel

from redis_tasks.fastmcp import TasksExtension
from redis_tasks.mcp import run_as_task

__all__ = ["app", "mcp"]


class Confirmation(BaseModel):
    """The answer ``confirm_delete`` asks for."""

    confirm: bool


class Name(BaseModel):
    """An answer naming someone."""

    name: str


_STATE_KEY = os.environ.get("RT_TEST_STATE_KEY")
mcp = FastMCP(
    "redis-tasks-fastmcp-conformance",
    request_state_security=RequestStateSecurity(keys=[_STATE_KEY]) if _STATE_KEY else None,
)
mcp.add_extension(
    TasksExtension(
        os.environ["RT_TEST_REDIS_URL"],
        prefix=os.environ.get("RT_TEST_PREFIX", "conformance"),
        input_first=["test_tool_with_task"],
    )
)
# "Task-supporting" in the suite's words is optional; two tools are required.
_OPTIONAL = TaskConfig(mode="optional")
_REQUIRED = TaskConfig(mode="required")


@mcp.tool
def greet(name: str) -> str:
    """Greet at once (never a task)."""
    return f"Hello, {name}!"


@mcp.tool(task=_OPTIONAL)
async def slow_compute(seconds: float, label: str = "") -> str:
    """Sleep ``seconds``, then answer (cancellation ends it ``cancelled``)."""
    await asyncio.sleep(seconds)
    return f"computed {label} in {seconds} s"


@mcp.tool(task=_REQUIRED)
async def failing_job() -> str:
    """Fail as a tool (a completed call with ``isError``) after about a second."""
    await asyncio.sleep(1)
    raise ToolError("the job failed")


@mcp.tool(task=_OPTIONAL)
async def protocol_error_job() -> str:
    """Fail with a JSON-RPC error."""
    raise MCPError(-32603, "protocol error")


@mcp.tool(task=_OPTIONAL)
async def confirm_delete(filename: str, ctx: Context) -> str:
    """Ask before deleting ``filename`` (nothing is deleted)."""
    answer = await ctx.elicit(f"Delete {filename}?", Confirmation)
    if answer.action == "accept" and answer.data.confirm:
        return f"deleted {filename}"
    return f"kept {filename}"


@mcp.tool(task=_OPTIONAL)
async def multi_input(ctx: Context) -> str:
    """Ask two questions at once."""
    first, second = await asyncio.gather(
        ctx.elicit("Your name?", Name), ctx.elicit("Your friend's name?", Name)
    )
    names = [a.data.name for a in (first, second) if a.action == "accept"]
    return "hello " + " and ".join(names)


@mcp.tool(task=_REQUIRED)
async def test_tool_with_task(ctx: Context) -> Any:
    """Ask a name inline (an input round, no task yet), then greet it in a task."""
    answers = ctx.input_responses or {}
    if "user_name" not in answers:
        question = ElicitRequest(
            params=ElicitRequestFormParams(
                message="Your name?",
                requested_schema={"type": "object", "properties": {"name": {"type": "string"}}},
            )
        )
        return InputRequiredResult(input_requests={"user_name": question}, request_state="asked")
    run_as_task()  # in the server: the rest becomes a task; in the worker: go on
    await asyncio.sleep(0.1)
    answer: Any = answers["user_name"]
    return f"Hello, {answer.content['name']}!"


app = mcp.http_app(host_origin_protection=True)
