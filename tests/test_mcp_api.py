"""``redis_tasks.mcp`` without servers: exports, the origin codec, the default authorizer."""

from __future__ import annotations

import contextvars
import inspect
from typing import Any

import pytest
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.mcpserver import MCPServer

import redis_tasks.mcp
from redis_tasks import InMemoryTaskManager, Limits, TaskOrigin, ValidationError
from redis_tasks.mcp import PrincipalAuthorizer, TasksExtension, TaskSupport, ToolCall
from redis_tasks.mcp._extension import _find_tool

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
    "ToolCall",
    "cancel_task",
    "get_task",
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
    assert "1.5" not in repr(call)
    assert "/mcp" not in repr(call)


@pytest.mark.parametrize(
    "state",
    [
        {"tool": "x", "arguments": {}, "endpoint": "/mcp"},
        {"v": 1, "tool": 3, "arguments": {}, "endpoint": "/mcp"},
        {"v": 1, "tool": "x", "arguments": [], "endpoint": "/mcp"},
        {"v": 1, "tool": "x", "arguments": {}, "endpoint": None},
        {"v": 2, "tool": "x", "arguments": {}, "endpoint": "/mcp"},
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
