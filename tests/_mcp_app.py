"""The MCP application the end-to-end tests serve and run (``tests._mcp_app:app`` / ``:handler``).

Configured by ``RT_TEST_REDIS_URL``, ``RT_TEST_PREFIX`` and ``RT_TEST_TIMEOUT``;
bearer tokens ``alice`` and ``bob`` are two principals (any other token is
refused). Server processes serve ``app`` with uvicorn; worker processes run
``handler``.
"""

from __future__ import annotations

import os
from typing import Any

import anyio
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import SamplingMessage, TextContent
from pydantic import BaseModel

from redis_tasks import RedisTaskManager
from redis_tasks.mcp import TasksExtension, TaskSupport, tool_handler

#: A value planted in arguments, answers and errors: it must never reach a log line.
TOKENS = ("alice", "bob")


class _Verifier:
    async def verify_token(self, token: str) -> AccessToken | None:
        if token not in TOKENS:
            return None
        return AccessToken(token=token, client_id=f"{token}-app", subject=token, scopes=["mcp"])


class Name(BaseModel):
    """What the greeting asks for."""

    name: str


def _manager() -> RedisTaskManager:
    return RedisTaskManager.from_url(
        os.environ["RT_TEST_REDIS_URL"],
        prefix=os.environ.get("RT_TEST_PREFIX", "rt"),
        timeout=float(os.environ.get("RT_TEST_TIMEOUT", "5")),
    )


tasks = TasksExtension(
    _manager(),
    tools={
        "greet": TaskSupport.OPTIONAL,
        "add": TaskSupport.OPTIONAL,
        "hold": TaskSupport.REQUIRED,
        "crash": TaskSupport.REQUIRED,
        "refuse": TaskSupport.REQUIRED,
        "tool_error": TaskSupport.REQUIRED,
        "ask_model": TaskSupport.REQUIRED,
        "multi_round": TaskSupport.REQUIRED,
    },
)
server = MCPServer(
    "redis-tasks-e2e",
    extensions=[tasks],
    lifespan=tasks.lifespan,
    token_verifier=_Verifier(),
    auth=AuthSettings(
        issuer_url="http://127.0.0.1:9/",  # type: ignore[arg-type]
        resource_server_url=None,
        required_scopes=["mcp"],
    ),
)


@server.tool()
async def greet(greeting: str, ctx: Context) -> str:
    """Ask the user's name (elicitation), then the roots, and greet."""
    answer = await ctx.elicit("What is your name?", Name)
    if answer.action != "accept":
        return "nobody to greet"
    roots = await ctx.session.list_roots()
    return f"{greeting}, {answer.data.name}! ({len(roots.roots)} roots)"


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers (a quick task, or an inline call)."""
    return a + b


@server.tool()
async def hold(ctx: Context) -> str:
    """Report that it started, then wait until cancelled."""
    await ctx.report_progress(1, None, "holding")
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
def crash(secret: str) -> str:
    """Raise an unexpected exception whose text holds the secret."""
    raise RuntimeError(f"database password is {secret}")


@server.tool()
def refuse() -> str:
    """Fail with a JSON-RPC error of its own."""
    raise MCPError(-32001, "Quota exceeded", {"retryAfterMs": 1000})


@server.tool()
def tool_error() -> str:
    """An anticipated tool failure: a completed call with isError."""
    raise ToolError("the input file is empty")


@server.tool()
async def ask_model(question: str, ctx: Context) -> str:
    """Sample the client's model."""
    reply = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=question))],
        max_tokens=10,
    )
    content: Any = reply.content
    return f"model said: {content.text}"


@server.tool()
async def multi_round(ctx: Context) -> Any:
    """The multi-round-trip style: return InputRequiredResult until answered."""
    from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

    answers = ctx.input_responses or {}
    if "color" not in answers:
        request = ElicitRequest(
            params=ElicitRequestFormParams(
                message="Favourite colour?",
                requested_schema={"type": "object", "properties": {"c": {"type": "string"}}},
            )
        )
        return InputRequiredResult(input_requests={"color": request}, request_state="round-1")
    color: Any = answers["color"]
    return f"colour {color.content['c']} after {ctx.request_state}"


app = server.streamable_http_app()
handler = tool_handler(server)
