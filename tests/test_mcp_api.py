"""``redis_tasks.mcp`` without servers: exports, the origin codec, the default authorizer,
installing the fast path."""

from __future__ import annotations

import contextvars
import inspect
from datetime import timedelta
from typing import Any

import pytest
from mcp.server import _streamable_http_modern
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from starlette.applications import Starlette

import redis_tasks.mcp
from redis_tasks import (
    CapacityError,
    InMemoryTaskManager,
    Limits,
    QuotaExceededError,
    TaskOrigin,
    ValidationError,
)
from redis_tasks.mcp import PrincipalAuthorizer, TasksExtension, TaskSupport, ToolCall
from redis_tasks.mcp._extension import _find_tool
from redis_tasks.mcp._fast_path import FastPath
from redis_tasks.mcp._wire import capacity_exceeded

EXPORTED = [
    "EXTENSION_ID",
    "Authorizer",
    "CreatedTask",
    "InputAnswerer",
    "PayloadFactory",
    "PrincipalAuthorizer",
    "TaskSubscriptions",
    "TaskSupport",
    "TasksClient",
    "TasksExtension",
    "TenantFactory",
    "ToolCall",
    "WeightFactory",
    "cancel_task",
    "get_task",
    "run_as_task",
    "tool_handler",
    "update_task",
]


def test_all_is_pinned_sorted_and_documented() -> None:
    assert redis_tasks.mcp.__all__ == EXPORTED
    assert sorted(EXPORTED, key=lambda n: (not n.isupper(), n)) == EXPORTED
    for name in EXPORTED:
        obj = getattr(redis_tasks.mcp, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert (obj.__doc__ or "").strip(), name


def test_tool_call_round_trips_through_the_origin() -> None:
    call = ToolCall("report", {"q": 1.5, "n": [1, 2]}, "/mcp", {"elicitation": {}})
    origin = call.to_origin(Limits())
    assert ToolCall.from_origin(origin) == call
    assert '"v":1' in origin.to_persisted_string()
    assert "1.5" not in repr(call)
    assert "/mcp" not in repr(call)
    # The input an input_first tool gathered before it became a task travels with it.
    gathered = {"name": {"action": "accept", "content": {"name": "Ada"}}}
    escalated = ToolCall("book", {}, "/mcp", None, gathered, "asked")
    origin = escalated.to_origin(Limits())
    assert ToolCall.from_origin(origin) == escalated
    assert '"v":2' in origin.to_persisted_string()  # a worker without it refuses the task
    assert "Ada" not in repr(escalated)


def test_run_as_task_is_for_input_first_tools_only() -> None:
    with pytest.raises(RuntimeError, match="input_first"):
        redis_tasks.mcp.run_as_task()
    manager = InMemoryTaskManager()
    with pytest.raises(ValueError, match="REQUIRED"):
        TasksExtension(manager, tools={"x": TaskSupport.OPTIONAL}, input_first=["x"])
    with pytest.raises(ValueError, match="REQUIRED"):
        TasksExtension(manager, tools={}, input_first=["x"])
    with pytest.raises(ValueError, match="positive"):
        TasksExtension(
            manager,
            tools={"x": TaskSupport.REQUIRED},
            input_first=["x"],
            input_first_timeout=timedelta(0),
        )


def test_a_fixed_weight_is_checked_against_the_limits_at_once() -> None:
    manager = InMemoryTaskManager(limits=Limits(max_tenant_weight=5))
    assert TasksExtension(manager, weight=5) is not None
    for weight in (0, 6, True, 1.0):
        with pytest.raises(ValueError, match="weight must be 1 to 5"):
            TasksExtension(manager, weight=weight)  # type: ignore[arg-type]


def test_the_capacity_error_carries_its_reason_and_nothing_else() -> None:
    rate = QuotaExceededError(
        "the tenant creates too fast", reason="rate", retry_after=timedelta(microseconds=2500)
    )
    error = capacity_exceeded(rate).error
    assert (error.code, error.message) == (-32003, "Task capacity exceeded")
    assert error.data == {"reason": "rate", "retryAfterMs": 3}  # rounded up
    assert capacity_exceeded(CapacityError("out of memory")).error.data == {"reason": "full"}
    # A reason other than the documented three reaches no client.
    odd = CapacityError("x", reason="tenant acme is over")
    assert capacity_exceeded(odd).error.data == {"reason": "full"}


@pytest.mark.parametrize(
    "state",
    [
        {"tool": "x", "arguments": {}, "endpoint": "/mcp"},
        {"v": 1, "tool": 3, "arguments": {}, "endpoint": "/mcp"},
        {"v": 1, "tool": "x", "arguments": [], "endpoint": "/mcp"},
        {"v": 1, "tool": "x", "arguments": {}, "endpoint": None},
        {"v": 3, "tool": "x", "arguments": {}, "endpoint": "/mcp"},
        {"v": 2, "tool": "x", "arguments": {}, "endpoint": "/mcp", "inputResponses": []},
        {"v": 2, "tool": "x", "arguments": {}, "endpoint": "/mcp", "requestState": 7},
    ],
)
def test_a_foreign_origin_is_refused(state: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ToolCall.from_origin(TaskOrigin.from_persisted_state(state))


class _Ctx:
    request = None


def _as(token: AccessToken | None) -> Any:
    authorize = PrincipalAuthorizer(endpoint="/mcp")

    def call() -> Any:
        auth_context_var.set(AuthenticatedUser(token) if token else None)
        return authorize(_Ctx())  # type: ignore[arg-type]

    return contextvars.copy_context().run(call)


def test_the_default_authorizer_binds_to_the_hashed_principal() -> None:
    alice = AccessToken(token="t1", client_id="app", subject="alice", scopes=[])
    alice_again = AccessToken(token="t2", client_id="app", subject="alice", scopes=["x"])
    bob = AccessToken(token="t3", client_id="app", subject="bob", scopes=[])
    keys = [_as(alice).partition_key, _as(alice_again).partition_key, _as(bob).partition_key]
    assert keys[0] == keys[1] != keys[2]
    assert all(k.startswith("principal:") and "alice" not in k and "bob" not in k for k in keys)
    anonymous = _as(None)
    assert anonymous.partition_key is None
    assert anonymous.endpoint == "/mcp"


def test_the_extension_reaches_registered_tools() -> None:
    # The one private SDK attribute the extension relies on: pinned here.
    tasks = TasksExtension(InMemoryTaskManager(), tools={"slow": TaskSupport.REQUIRED})
    server = MCPServer("t", extensions=[tasks])

    @server.tool()
    def slow(n: int) -> int:
        """A task tool."""
        return n

    tool = _find_tool(server, "slow")
    assert tool is not None
    assert tool.fn_metadata.validate_arguments({"n": "3"}) == {"n": 3}
    assert _find_tool(server, "missing") is None
    assert tasks.task_support("slow") is TaskSupport.REQUIRED
    assert tasks.task_support("other") is None
    assert repr(tasks) == "TasksExtension(tools=['slow'])"


def _endpoint_app(app: Any) -> Any:
    # The app behind the MCP route: inside RequireAuthMiddleware when auth is on.
    route = next(r for r in app.routes if getattr(r, "path", None) == "/mcp")
    return route.app.app if isinstance(route.app, RequireAuthMiddleware) else route.app


@pytest.mark.parametrize("auth", [False, True])
def test_asgi_puts_the_fast_path_inside_the_sdk_auth(auth: bool) -> None:
    tasks = TasksExtension(InMemoryTaskManager())
    options: dict[str, Any] = {}
    if auth:
        options = {
            "token_verifier": _NoTokens(),
            "auth": AuthSettings(
                issuer_url="http://127.0.0.1:9/",  # type: ignore[arg-type]
                resource_server_url=None,
                required_scopes=["mcp"],
            ),
        }
    server = MCPServer("t", extensions=[tasks], **options)
    app = server.streamable_http_app()
    assert tasks.asgi(app) is app
    fast = _endpoint_app(app)
    assert isinstance(fast, FastPath)
    assert isinstance(fast.inner, StreamableHTTPASGIApp)
    # Installing again changes nothing.
    assert tasks.asgi(app) is app
    assert _endpoint_app(app) is fast
    with pytest.raises(ValueError, match="streamable HTTP endpoint"):
        tasks.asgi(Starlette())


class _NoTokens:
    async def verify_token(self, token: str) -> AccessToken | None:
        return None


def test_the_sdk_internals_the_fast_path_uses() -> None:
    # Private pieces of the SDK's 2026-era transport the fast path reuses so its
    # replies are the SDK's own bytes: pinned by the ``mcp<3`` requirement and here.
    assert callable(_streamable_http_modern._write)
    assert callable(_streamable_http_modern._sse_event)
    assert callable(_streamable_http_modern._to_jsonrpc_response)
    assert isinstance(_streamable_http_modern._SSE_PING_INTERVAL, float)
    assert (b"content-type", b"text/event-stream") in _streamable_http_modern._SSE_HEADERS
    app = MCPServer("t").streamable_http_app()
    sessions = _endpoint_app(app).session_manager
    assert sessions._task_group is None  # set while the session manager runs
    assert sessions._lifespan_state is None


async def test_before_the_session_manager_runs_everything_goes_to_the_sdk() -> None:
    tasks = TasksExtension(InMemoryTaskManager())
    app = tasks.asgi(MCPServer("t", extensions=[tasks]).streamable_http_app())
    fast = _endpoint_app(app)
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/mcp",
        "headers": [(b"mcp-protocol-version", b"2026-07-28")],
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        raise AssertionError("nothing is sent")

    with pytest.raises(RuntimeError, match="Task group is not initialized"):
        await fast(scope, receive, send)
    assert (fast.served, fast.passed_on) == (0, 1)
