"""The fixture server the official MCP conformance suite's tasks scenarios expect.

Served by uvicorn (``tests.support.conformance_app:app``) with a ``redis-tasks worker``
running ``tests.support.conformance_app:handler``, on the Redis named by
``RT_TEST_REDIS_URL`` under ``RT_TEST_PREFIX``. No authentication: the suite's
client sends none. The tools are the ones the scenarios' descriptions require
(``@modelcontextprotocol/conformance`` 0.2.0-alpha.12):

- ``greet``: synchronous only;
- ``slow_compute(seconds)``: a task that sleeps, and ends ``cancelled`` when
  cancelled while running;
- ``failing_job``: a task whose tool fails (``isError``) after about a second;
- ``protocol_error_job``: a task that fails with a JSON-RPC error;
- ``confirm_delete(filename)``: a task that asks for confirmation (elicitation);
- ``multi_input``: a task asking two questions at once;
- ``test_tool_with_task``: input first, then the rest as a task (MRTR composition).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.request_state import RequestStateSecurity
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult
from pydantic import BaseModel

from redis_tasks import RedisTaskManager
from redis_tasks.mcp import TasksExtension, TaskSupport, run_as_task, tool_handler

__all__ = ["app", "handler", "server", "tasks"]


class Confirmation(BaseModel):
    """The answer ``confirm_delete`` asks for."""

    confirm: bool


class Name(BaseModel):
    """An answer naming someone."""

    name: str


tasks = TasksExtension(
    RedisTaskManager.from_url(
        os.environ["RT_TEST_REDIS_URL"], prefix=os.environ.get("RT_TEST_PREFIX", "conformance")
    ),
    # "Task-supporting" in the suite's words is OPTIONAL (a client without the
    # extension gets the tool inline); two tools are registered REQUIRED.
    tools={
        "slow_compute": TaskSupport.OPTIONAL,
        "protocol_error_job": TaskSupport.OPTIONAL,
        "confirm_delete": TaskSupport.OPTIONAL,
        "multi_input": TaskSupport.OPTIONAL,
        "failing_job": TaskSupport.REQUIRED,
        "test_tool_with_task": TaskSupport.REQUIRED,
    },
    input_first=["test_tool_with_task"],
)
# Server processes behind one balancer share the key that seals MRTR requestState.
_STATE_KEY = os.environ.get("RT_TEST_STATE_KEY")
server = MCPServer(
    "redis-tasks-conformance",
    extensions=[tasks],
    lifespan=tasks.lifespan,
    request_state_security=RequestStateSecurity(keys=[_STATE_KEY]) if _STATE_KEY else None,
)


@server.tool()
def greet(name: str) -> str:
    """Greet at once (never a task)."""
    return f"Hello, {name}!"


@server.tool()
async def slow_compute(seconds: float, label: str = "") -> str:
    """Sleep ``seconds``, then answer (cancellation ends it ``cancelled``)."""
    await anyio.sleep(seconds)
    return f"computed {label} in {seconds} s"


@server.tool()
async def failing_job() -> str:
    """Fail as a tool (a completed call with ``isError``) after about a second."""
    await anyio.sleep(1)
    raise ToolError("the job failed")


@server.tool()
def protocol_error_job() -> str:
    """Fail with a JSON-RPC error."""
    raise MCPError(-32603, "protocol error")


@server.tool()
async def confirm_delete(filename: str, ctx: Context) -> str:
    """Ask before deleting ``filename`` (nothing is deleted)."""
    answer = await ctx.elicit(f"Delete {filename}?", Confirmation)
    if answer.action == "accept" and answer.data.confirm:
        return f"deleted {filename}"
    return f"kept {filename}"


@server.tool()
async def multi_input(ctx: Context) -> str:
    """Ask two questions at once."""
    first, second = await asyncio.gather(
        ctx.elicit("Your name?", Name), ctx.elicit("Your friend's name?", Name)
    )
    names = [a.data.name for a in (first, second) if a.action == "accept"]
    return "hello " + " and ".join(names)


@server.tool()
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
    await anyio.sleep(0.1)
    answer: Any = answers["user_name"]
    return f"Hello, {answer.content['name']}!"


app = tasks.asgi(server.streamable_http_app())
handler = tool_handler(server)
