"""``redis_tasks.mcp`` without servers: exports, the origin codec, the default authorizer,
installing the fast path, and the SDK parts it relies on (each changed in turn must stop it)."""

from __future__ import annotations

import contextvars
import importlib
import inspect
import re
import tomllib
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from mcp.server import _streamable_http_modern
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser, RequireAuthMiddleware
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.shared.dispatcher import DispatchContext as SdkDispatchContext
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
from redis_tasks.mcp import PrincipalAuthorizer, TasksExtension, TaskSupport, ToolCall, _sdk
from redis_tasks.mcp._fast_exchange import DispatchContext
from redis_tasks.mcp._fast_path import FastPath
from redis_tasks.mcp._sdk import SdkMismatchError, find_tool
from redis_tasks.mcp._wire import capacity_exceeded

EXPORTED = [
    "EXTENSION_ID",
    "Authorizer",
    "CreatedTask",
    "InputAnswerer",
    "PayloadFactory",
    "PlanFactory",
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
    # The one private SDK attribute the extension relies on (found through _sdk).
    tasks = TasksExtension(InMemoryTaskManager(), tools={"slow": TaskSupport.REQUIRED})
    server = MCPServer("t", extensions=[tasks])

    @server.tool()
    def slow(n: int) -> int:
        """A task tool."""
        return n

    tool = find_tool(server, "slow")
    assert tool is not None
    assert tool.fn_metadata.validate_arguments({"n": "3"}) == {"n": 3}
    assert find_tool(server, "missing") is None
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


def test_the_sdk_is_the_one_the_fast_path_was_written_for() -> None:
    # The pins on the SDK's private parts are _sdk's checks: none may fail on the SDK
    # installed, and the range they were written for is the one pyproject.toml requires.
    assert _sdk.in_range(_sdk.installed_version()), _sdk.installed_version()
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert f"mcp{_sdk.SDK_RANGE}" in pyproject["project"]["optional-dependencies"]["mcp"]
    app = MCPServer("t").streamable_http_app()
    sessions = _endpoint_app(app).session_manager
    assert _sdk.fast_path_problems([sessions], DispatchContext) == []
    assert not _sdk.running(sessions)  # until the session manager runs
    assert _sdk.lifespan_state(sessions) is None
    assert (b"content-type", b"text/event-stream") in _sdk.sse_headers()
    assert _sdk.ping_interval() == _streamable_http_modern._SSE_PING_INTERVAL


@pytest.mark.parametrize(
    ("version", "inside"),
    [
        ("2.3.0", True),
        ("2.3", True),
        ("2.17.4", True),
        ("2.3.1rc1", True),
        ("2.2.9", False),
        ("3.0.0", False),
        ("3.0.0a1", False),
        ("10.0", False),
        ("", False),
        (None, False),
    ],
)
def test_the_sdk_range_reads_release_numbers(version: str | None, inside: bool) -> None:
    assert _sdk.in_range(version) is inside


async def _changed_write(reply: Any, scope: Any, send: Any) -> None:
    """``_write`` without its ``receive``."""


def _sync_write(reply: Any, scope: Any, receive: Any, send: Any) -> None:
    """``_write`` no longer a coroutine function."""


async def _serve_one_renamed(app: Any, dctx: Any, method: Any, params: Any, *, conn: Any) -> Any:
    """``serve_one`` with a keyword renamed."""


#: (what changes, how, what the error names): one change of each kind _sdk checks.
SDK_CHANGES: list[tuple[str, Callable[[pytest.MonkeyPatch, Any], None], str]] = [
    *(
        (
            f"{name} removed",
            lambda mp, sessions, name=name: mp.delattr(_streamable_http_modern, name),
            f"mcp.server._streamable_http_modern.{name} is missing",
        )
        for name in (
            "_write",
            "_sse_event",
            "_to_jsonrpc_response",
            "_SSE_HEADERS",
            "_SSE_PING_INTERVAL",
        )
    ),
    (
        "_write takes other arguments",
        lambda mp, sessions: mp.setattr(_streamable_http_modern, "_write", _changed_write),
        "._write(reply: 'Any', scope: 'Any', send: 'Any') -> 'None' cannot be called with 4 ",
    ),
    (
        "_write no longer a coroutine function",
        lambda mp, sessions: mp.setattr(_streamable_http_modern, "_write", _sync_write),
        "._write is no longer a coroutine function",
    ),
    (
        "_sse_event no longer callable",
        lambda mp, sessions: mp.setattr(_streamable_http_modern, "_sse_event", b"event"),
        "._sse_event is not callable",
    ),
    (
        "_SSE_PING_INTERVAL a string",
        lambda mp, sessions: mp.setattr(_streamable_http_modern, "_SSE_PING_INTERVAL", "15"),
        "._SSE_PING_INTERVAL is not a positive number of seconds",
    ),
    (
        "_SSE_HEADERS without the content type",
        lambda mp, sessions: mp.setattr(
            _streamable_http_modern, "_SSE_HEADERS", [(b"cache-control", b"no-cache")]
        ),
        "._SSE_HEADERS is not a list of (bytes, bytes) headers naming text/event-stream",
    ),
    (
        "serve_one takes other keywords",
        lambda mp, sessions: mp.setattr(_sdk, "serve_one", _serve_one_renamed),
        "cannot be called with 4 positional, connection=..., lifespan_state=...",
    ),
    (
        "the session manager's task group renamed",
        lambda mp, sessions: mp.delattr(sessions, "_task_group"),
        "StreamableHTTPSessionManager has no _task_group",
    ),
    (
        "the dispatch context protocol grows a member",
        lambda mp, sessions: mp.setattr(
            SdkDispatchContext, "close", lambda self: None, raising=False
        ),
        "DispatchContext has members the fast path's lacks: ['close']",
    ),
    (
        "the 2026-era transport module gone",
        lambda mp, sessions: _unimportable(mp),
        "mcp.server._streamable_http_modern cannot be imported",
    ),
    (
        "another major version",
        lambda mp, sessions: mp.setattr(_sdk, "installed_version", lambda: "3.0.0"),
        "mcp 3.0.0 is not mcp>=2.3,<3",
    ),
    (
        "no version to read",
        lambda mp, sessions: mp.setattr(_sdk, "installed_version", lambda: None),
        "the installed mcp has no version to read",
    ),
]


def _unimportable(mp: pytest.MonkeyPatch) -> None:
    def refuse(name: str, package: str | None = None) -> Any:
        raise ImportError(f"No module named {name!r}")

    mp.setattr(importlib, "import_module", refuse)
    modern, problem = _sdk._import_modern()
    mp.setattr(_sdk, "_modern", modern)
    mp.setattr(_sdk, "_modern_unimportable", problem)


@pytest.mark.parametrize(
    ("change", "names"), [(c[1], c[2]) for c in SDK_CHANGES], ids=[c[0] for c in SDK_CHANGES]
)
def test_a_changed_sdk_stops_the_fast_path_loudly(
    monkeypatch: pytest.MonkeyPatch,
    change: Callable[[pytest.MonkeyPatch, Any], None],
    names: str,
) -> None:
    tasks = TasksExtension(InMemoryTaskManager())
    app = MCPServer("t", extensions=[tasks]).streamable_http_app()
    sdk_app = _endpoint_app(app)
    change(monkeypatch, sdk_app.session_manager)
    version = _sdk.installed_version() or "(version unknown)"  # as changed, if it was
    with pytest.raises(SdkMismatchError, match=re.escape(names)) as raised:
        tasks.asgi(app)
    message = str(raised.value)
    assert message.startswith(f"tasks.asgi() cannot put the fast path on mcp {version}")
    assert "written for mcp>=2.3,<3" in message
    assert isinstance(raised.value, RuntimeError)
    # Nothing was installed: no fast path that passes everything on, no half of one.
    assert _endpoint_app(app) is sdk_app


def test_a_changed_tool_lookup_stops_the_server_at_startup(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks = TasksExtension(InMemoryTaskManager(), tools={"slow": TaskSupport.REQUIRED})
    server = MCPServer("t", extensions=[tasks])
    monkeypatch.delattr(server, "_tool_manager")
    with pytest.raises(SdkMismatchError, match=r"MCPServer\._tool_manager is missing"):
        tasks.bind(server)


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
