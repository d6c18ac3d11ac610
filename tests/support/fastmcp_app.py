"""A FastMCP app on redis_tasks.fastmcp, for tests/mcp/test_fastmcp.py.

Served by uvicorn (``tests.support.fastmcp_app:app``) and run by ``redis-tasks worker
--fastmcp tests/support/fastmcp_app.py:mcp``, on the Redis named by
``RT_TEST_REDIS_URL`` under ``RT_TEST_PREFIX``. Bearer tokens ``tok-alice`` and
``tok-bob`` (see :data:`TOKENS`) are two principals. ``RT_TEST_DROP_TOOL`` names a
tool this process leaves out (a worker whose app no longer has it).

The tools are FastMCP's usual ones, as a user writes them: ``ctx.report_progress``,
``ctx.info``, ``ctx.elicit``, the guard pattern, ``get_access_token()`` and
``get_http_headers()``. A tool that is cancelled writes ``<prefix>:test:cancelled:<label>``
to Redis, so a test sees that the cancellation reached it.

The app has middleware as apps do: one counts each ``tools/call`` with a ``label``
argument in ``<prefix>:test:middleware:<label>`` (so a test sees how many times it ran
a call), and fails on the way out of a ``fragile`` call (a task it stored then has no
client; it keeps the task's ID in ``<prefix>:test:lost:<label>`` for the test). A
mounted server's task tool (``child_add``) shows its arguments checked.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import Any

import redis
from fastmcp import Context, FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.server.dependencies import get_access_token, get_http_headers
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.utilities.tasks import TaskConfig
from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult
from pydantic import BaseModel

from redis_tasks.fastmcp import TasksExtension

__all__ = ["TOKENS", "app", "mcp"]

#: Bearer token -> the principal it authenticates (client ID and subject).
TOKENS: dict[str, dict[str, Any]] = {
    "tok-alice": {"client_id": "alice-client", "sub": "alice", "scopes": []},
    "tok-bob": {"client_id": "bob-client", "sub": "bob", "scopes": []},
    # A token that expires (at the start of 2100): its expiry travels with the task.
    "tok-carol": {
        "client_id": "carol-client",
        "sub": "carol",
        "scopes": [],
        "expires_at": 4_102_444_800,
    },
}
_PREFIX = os.environ.get("RT_TEST_PREFIX", "fastmcp-test")

mcp = FastMCP("redis-tasks-fastmcp-test", auth=StaticTokenVerifier(TOKENS))
mcp.add_extension(TasksExtension(os.environ["RT_TEST_REDIS_URL"], prefix=_PREFIX))
_TASK = TaskConfig(mode="required")
_DROPPED = os.environ.get("RT_TEST_DROP_TOOL")


class Name(BaseModel):
    """An answer naming someone."""

    name: str


def _on_redis(command: Callable[[redis.Redis], object]) -> None:
    """Run one command on the test's Redis, from a thread (a tool or middleware marking
    what the test waits for)."""
    client = redis.Redis.from_url(os.environ["RT_TEST_REDIS_URL"])
    try:
        command(client)
    finally:
        client.close()


def _mark_cancelled(label: str) -> None:
    _on_redis(lambda client: client.set(f"{_PREFIX}:test:cancelled:{label}", 1))


def _count_call(label: str) -> None:
    _on_redis(lambda client: client.incr(f"{_PREFIX}:test:middleware:{label}"))


def _keep_lost(label: str, task_id: str) -> None:
    _on_redis(lambda client: client.set(f"{_PREFIX}:test:lost:{label}", task_id))


class _Counting(Middleware):
    """Count each call that has a label; fail a ``fragile`` call once it has its answer."""

    async def on_call_tool(
        self, context: MiddlewareContext[Any], call_next: CallNext[Any, Any]
    ) -> Any:
        label = (context.message.arguments or {}).get("label")
        if isinstance(label, str):
            await asyncio.to_thread(_count_call, label)
        result = await call_next(context)
        if context.message.name == "fragile" and isinstance(label, str):
            # What the test needs to find the task its client never learns.
            await asyncio.to_thread(_keep_lost, label, str(getattr(result, "taskId", "")))
            raise RuntimeError("the middleware failed after the call")
        return result


mcp.add_middleware(_Counting())


@mcp.tool(task=_TASK)
async def whoami() -> dict[str, Any]:
    """Who called: the access token's client, subject and expiry, and one of the request's
    headers."""
    token = get_access_token()
    return {
        "client": token.client_id if token is not None else None,
        "subject": token.claims.get("sub") if token is not None else None,
        "header": get_http_headers().get("x-caller"),
        "expires_at": token.expires_at if token is not None else None,
    }


@mcp.tool(task=_TASK)
async def wait(seconds: float, label: str, ctx: Context) -> str:
    """Say "started <label>" as a log line, report progress, then sleep ``seconds``."""
    await ctx.info(f"started {label}")
    try:
        await asyncio.sleep(seconds / 2)
        await ctx.report_progress(1, 2, f"halfway {label}")
        await asyncio.sleep(seconds / 2)
    except asyncio.CancelledError:
        await asyncio.to_thread(_mark_cancelled, label)
        raise
    return f"waited {label}"


@mcp.tool(task=_TASK)
async def ask(ctx: Context) -> str:
    """Ask a name with ctx.elicit(), as a tool run inline would."""
    answer = await ctx.elicit("Your name?", Name)
    return f"hello {answer.data.name}" if answer.action == "accept" else "nobody"


@mcp.tool(task=_TASK)
async def guarded(ctx: Context) -> Any:
    """Ask a name with the guard pattern (fastmcp-tasks' way)."""
    answers = ctx.input_responses or {}
    if "name" not in answers:
        question = ElicitRequest(
            params=ElicitRequestFormParams(
                message="Your name?",
                requested_schema={"type": "object", "properties": {"name": {"type": "string"}}},
            )
        )
        return InputRequiredResult(input_requests={"name": question}, request_state="asked")
    answer: Any = answers["name"]
    return f"guarded {answer.content['name']} ({ctx.request_state})"


@mcp.tool(task=_TASK)
async def fragile(seconds: float, label: str) -> str:
    """A task tool whose call the middleware fails on the way out; sleeps ``seconds``."""
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        await asyncio.to_thread(_mark_cancelled, label)
        raise
    return f"fragile {label}"


_child = FastMCP("child")


@_child.tool(task=_TASK)
async def add(a: int, b: int) -> int:
    """A mounted server's task tool (``child_add``)."""
    return a + b


mcp.mount(_child, namespace="child")


if _DROPPED != "vanishing":

    @mcp.tool(task=_TASK)
    async def vanishing() -> str:
        """A tool the worker's app may no longer have (``RT_TEST_DROP_TOOL=vanishing``)."""
        return "still here"


app = mcp.http_app()
