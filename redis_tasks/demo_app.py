"""The demo's MCP application: an ``MCPServer`` whose slow tools run as durable tasks.

The demo serves ``app`` from two uvicorn processes and runs ``handler`` in two
``redis-tasks worker`` processes; all of them share the Redis named by
``RT_DEMO_REDIS_URL`` under the key prefix ``RT_DEMO_PREFIX``. It is also a
compact example of wiring ``redis_tasks.mcp`` into a server. The bearer tokens
``alice`` and ``bob`` are the demo's two users (a real server plugs in its own
``TokenVerifier``).
"""

from __future__ import annotations

import os

import anyio
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from ._redis.manager import RedisTaskManager
from .mcp import TasksExtension, TaskSupport, tool_handler

__all__ = ["app", "handler", "server", "tasks"]

STEP = 0.25  # seconds per unit of simulated work


class _DemoTokens:
    """Two fixed demo users; never use static tokens outside a demo."""

    async def verify_token(self, token: str) -> AccessToken | None:
        if token not in ("alice", "bob"):
            return None
        return AccessToken(token=token, client_id="demo-client", subject=token, scopes=["mcp"])


class Name(BaseModel):
    """The answer ``greet`` asks for."""

    name: str


tasks = TasksExtension(
    RedisTaskManager.from_url(
        os.environ.get("RT_DEMO_REDIS_URL", "redis://127.0.0.1:6379/0"),
        prefix=os.environ.get("RT_DEMO_PREFIX", "demo"),
    ),
    tools=dict.fromkeys(("greet", "report", "export", "audit", "index"), TaskSupport.REQUIRED),
)
server = MCPServer(
    "redis-tasks-demo",
    extensions=[tasks],
    lifespan=tasks.lifespan,
    token_verifier=_DemoTokens(),
    auth=AuthSettings(
        issuer_url="http://127.0.0.1:9/",  # type: ignore[arg-type]
        resource_server_url=None,
        required_scopes=["mcp"],
    ),
)


async def _work(ctx: Context, steps: int) -> None:
    for step in range(steps):
        await ctx.report_progress(step + 1, steps, f"step {step + 1} of {steps}")
        await anyio.sleep(STEP)


@server.tool()
async def greet(ctx: Context) -> str:
    """Work a little, ask the user's name, greet."""
    await _work(ctx, 2)
    answer = await ctx.elicit("Please enter your name.", Name)
    return f"Hello, {answer.data.name}!" if answer.action == "accept" else "Hello, stranger!"


@server.tool()
async def report(ctx: Context) -> str:
    """Six steps of work."""
    await _work(ctx, 6)
    return "6 steps done"


@server.tool()
async def index(ctx: Context) -> str:
    """Eight steps of work."""
    await _work(ctx, 8)
    return "8 steps done"


@server.tool()
async def export(ctx: Context) -> str:
    """Export batches until the client cancels."""
    batch = 0
    while True:
        batch += 1
        await ctx.report_progress(batch, None, f"exporting, batch {batch}")
        await anyio.sleep(STEP * 2)


@server.tool()
async def audit(ctx: Context) -> str:
    """Fail with a JSON-RPC error after some work."""
    await _work(ctx, 3)
    raise MCPError(-32001, "audit source unavailable")


# The tasks/* fast path in front of the SDK's app (docs/guides/mcp-servers.md,
# "The polling fast path").
app = tasks.asgi(server.streamable_http_app())
handler = tool_handler(server)
