"""The MCP application the end-to-end tests serve and run
(``tests.support.mcp_app:app`` / ``:handler``).

Configured by ``RT_TEST_REDIS_URL``, ``RT_TEST_PREFIX``, ``RT_TEST_TIMEOUT`` and
``RT_TEST_MAX_OPEN`` (the manager's ``Limits.max_open_tasks_per_tenant``; none when unset);
bearer tokens ``alice`` and ``bob`` are two principals, ``noscope`` authenticates
without the required scope (any other token is refused). Server processes serve
``app`` with uvicorn; worker processes run ``handler``. The HTTP app is shaped by
``RT_TEST_FAST_PATH`` (``1``: the tasks fast path is installed),
``RT_TEST_JSON_RESPONSE`` and ``RT_TEST_STATELESS`` (``1``: the SDK's options of
those names) and ``RT_TEST_SSE_PING`` (seconds: the SDK's SSE keepalive interval,
shortened so a test can see a reply commit to SSE). ``RT_TEST_TRACES=1`` gives the
process an SDK tracer provider with the in-memory exporter (``tests.support.tracing``):
a server serves its finished spans at ``/test/spans``, a worker dumps them to
``$RT_TEST_SPANS`` at exit. ``RT_TEST_WHOLE_IDS=1`` gives the manager
``whole_task_ids=True`` (spans name tasks by whole ID).

Test hooks, by request header (so the differential test can drive both paths
through the same rare branches): ``x-test-authorizer: fail`` makes the
authorizer raise, ``x-test-tenant: <key>`` names the call's tenant (``fail``: the
tenant hook raises; absent: the binding, the default), ``x-test-delay: <s>``
holds the request that long in a server middleware, ``x-test-notify: 1`` reports
progress from it (a notification on the request's own reply).
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from typing import Annotated, Any

import anyio
from mcp.server import _streamable_http_modern
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolRequestParams, SamplingMessage, TextContent
from pydantic import BaseModel, Field
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from redis_tasks import Limits, RedisTaskManager, RequestContext
from redis_tasks.mcp import (
    PrincipalAuthorizer,
    TasksExtension,
    TaskSupport,
    run_as_task,
    tool_handler,
)
from redis_tasks.mcp._fast_path import FastPath

if os.environ.get("RT_TEST_TRACES") == "1":
    from . import tracing

    tracing.install()

#: A value planted in arguments, answers and errors: it must never reach a log line.
TOKENS = ("alice", "bob")


class _Verifier:
    async def verify_token(self, token: str) -> AccessToken | None:
        if token == "noscope":
            return AccessToken(token=token, client_id="noscope-app", subject=token, scopes=[])
        if token not in TOKENS:
            return None
        return AccessToken(token=token, client_id=f"{token}-app", subject=token, scopes=["mcp"])


def _header(ctx: ServerRequestContext[Any, Any], name: str) -> str | None:
    headers = getattr(ctx.request, "headers", None)
    return headers.get(name) if headers is not None else None


class _Authorizer(PrincipalAuthorizer):
    def __call__(self, ctx: ServerRequestContext[Any, Any]) -> RequestContext:
        if _header(ctx, "x-test-authorizer") == "fail":
            raise RuntimeError("authorizer down")
        return super().__call__(ctx)


def _tenant(params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any]) -> str | None:
    tenant = _header(ctx, "x-test-tenant")
    if tenant == "fail":
        raise RuntimeError("tenant directory down")
    return tenant


async def _test_hooks(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
    delay = _header(ctx, "x-test-delay")
    if _header(ctx, "x-test-notify") == "1":
        await ctx.session.report_progress(1, 2, "half way")
    if delay is not None:
        await anyio.sleep(float(delay))
    return await call_next(ctx)


class Name(BaseModel):
    """What the greeting asks for."""

    name: str


def _manager() -> RedisTaskManager:
    max_open = os.environ.get("RT_TEST_MAX_OPEN")
    return RedisTaskManager.from_url(
        os.environ["RT_TEST_REDIS_URL"],
        prefix=os.environ.get("RT_TEST_PREFIX", "rt"),
        timeout=float(os.environ.get("RT_TEST_TIMEOUT", "5")),
        limits=Limits(max_open_tasks_per_tenant=int(max_open)) if max_open else None,
        whole_task_ids=os.environ.get("RT_TEST_WHOLE_IDS") == "1",
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
        "two_questions": TaskSupport.REQUIRED,
        "book": TaskSupport.REQUIRED,
        "dawdle": TaskSupport.REQUIRED,
        "report": TaskSupport.REQUIRED,
    },
    input_first=["book", "dawdle"],
    # Short, so the test of the bound does not wait long.
    input_first_timeout=timedelta(seconds=1),
    authorizer=_Authorizer(),
    tenant=_tenant,
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
async def book(room: str, ctx: Context) -> Any:
    """Ask for the guest inline (an input round, no task yet), then book in a task."""
    from mcp_types import ElicitRequest, ElicitRequestFormParams, InputRequiredResult

    answers = ctx.input_responses or {}
    if "guest" not in answers:
        request = ElicitRequest(
            params=ElicitRequestFormParams(
                message="Who is the guest?",
                requested_schema={"type": "object", "properties": {"name": {"type": "string"}}},
            )
        )
        return InputRequiredResult(input_requests={"guest": request}, request_state=f"room={room}")
    run_as_task()
    guest: Any = answers["guest"]
    return f"{room} booked for {guest.content['name']} ({ctx.request_state})"


@server.tool()
async def dawdle(ctx: Context) -> str:
    """Take longer inline than input_first_timeout allows."""
    await anyio.sleep(30)
    return "too late"


#: An argument a client also sends as the ``Mcp-Param-Region`` header.
Region = Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]


@server.tool()
async def report(region: Region) -> str:
    """A task tool with an argument mirrored in a header, which must match it."""
    return f"report for {region}"


@server.tool()
async def two_questions(ctx: Context) -> str:
    """Ask two names at once (one input round), then greet both."""
    first, second = await asyncio.gather(
        ctx.elicit("Your name?", Name), ctx.elicit("Your friend's name?", Name)
    )
    return f"{first.data.name} and {second.data.name}"  # type: ignore[union-attr]


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


server.middleware.append(_test_hooks)

if os.environ.get("RT_TEST_SSE_PING"):
    _streamable_http_modern._SSE_PING_INTERVAL = float(os.environ["RT_TEST_SSE_PING"])
app = server.streamable_http_app(
    json_response=os.environ.get("RT_TEST_JSON_RESPONSE") == "1",
    stateless_http=os.environ.get("RT_TEST_STATELESS") == "1",
)
if os.environ.get("RT_TEST_FAST_PATH") == "1":
    app = tasks.asgi(app)


async def _fast_path_counts(request: Request) -> JSONResponse:
    """What the fast path took and passed on so far (the differential test asks)."""
    counts = {"served": 0, "passed_on": 0}
    for route in app.routes:
        holder = getattr(getattr(route, "app", None), "app", None)
        if isinstance(holder, FastPath):
            counts = {"served": holder.served, "passed_on": holder.passed_on}
    return JSONResponse(counts)


async def _finished_spans(request: Request) -> JSONResponse:
    """Every span this server finished so far (with ``RT_TEST_TRACES=1``)."""
    from . import tracing

    return JSONResponse(tracing.finished())


app.routes.append(Route("/test/fast-path", _fast_path_counts))
if os.environ.get("RT_TEST_TRACES") == "1":
    app.routes.append(Route("/test/spans", _finished_spans))
handler = tool_handler(server)
