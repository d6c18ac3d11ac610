"""The SEP-2663 wire: method names, params, result shapes and the protocol errors.

One function renders a task for ``tasks/get``, ``CreateTaskResult`` and
``notifications/tasks`` alike, so the three can never disagree.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Final

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    RequestParams,
)
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field

from redis_tasks._errors import CapacityError
from redis_tasks._models import Task

__all__ = [
    "CAPACITY_EXCEEDED",
    "CAPACITY_MESSAGE",
    "EXTENSION_ID",
    "CancelTaskParams",
    "GetTaskParams",
    "UpdateTaskParams",
    "capacity_exceeded",
    "created_result",
    "declares_extension",
    "get_result",
    "internal_error",
    "invalid_params",
    "missing_capability",
    "name_header_mismatch",
    "notification_params",
    "task_not_found",
]

#: The extension's identifier (SEP-2663), advertised and required by the client.
EXTENSION_ID: Final = "io.modelcontextprotocol/tasks"

#: The one message for an unknown, expired or unauthorized task: it must not tell them apart.
NOT_FOUND_MESSAGE: Final = "Failed to retrieve task: Task not found"

#: The code of a request refused for want of room: a tenant's quota or create rate, or a
#: full Redis. In the range JSON-RPC leaves to servers, and apart from the codes MCP
#: assigns (``-32000``, ``-32001``, ``-32020`` to ``-32022``, ``-32042``).
CAPACITY_EXCEEDED: Final = -32003
#: Its message, the same whatever the reason (``data.reason`` tells them apart).
CAPACITY_MESSAGE: Final = "Task capacity exceeded"
#: The reasons a client may see; any other becomes ``"full"`` (see :func:`capacity_exceeded`).
_CAPACITY_REASONS: Final = frozenset({"quota", "rate", "full"})
_MS: Final = timedelta(milliseconds=1)


class GetTaskParams(RequestParams):
    """``tasks/get`` params."""

    task_id: str = Field(max_length=4096)


class CancelTaskParams(RequestParams):
    """``tasks/cancel`` params."""

    task_id: str = Field(max_length=4096)


class UpdateTaskParams(RequestParams):
    """``tasks/update`` params: answers keyed by the task's input-request keys."""

    task_id: str = Field(max_length=4096)
    input_responses: dict[str, Any]


def declares_extension(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether this request may use tasks: a 2026-era request declaring the extension."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        # SEP-2663: the extension does not exist under handshake-era versions.
        return False
    capabilities = ctx.session.client_capabilities
    extensions = capabilities.extensions if capabilities is not None else None
    return extensions is not None and EXTENSION_ID in extensions


def notification_params(task: Task) -> dict[str, Any]:
    """The ``DetailedTask`` object: what ``tasks/get`` returns, without ``resultType``."""
    return task.to_wire()


def get_result(task: Task) -> dict[str, Any]:
    """The ``tasks/get`` result (``GetTaskResult``)."""
    return {"resultType": "complete", **notification_params(task)}


def created_result(task: Task) -> dict[str, Any]:
    """The ``tools/call`` result that hands out a task (``CreateTaskResult``)."""
    return {"resultType": "task", **notification_params(task)}


def task_not_found() -> MCPError:
    """``-32602`` for an unknown, expired or unauthorized task: one body for all."""
    return MCPError(INVALID_PARAMS, NOT_FOUND_MESSAGE)


def invalid_params(message: str) -> MCPError:
    """``-32602`` for input that can never be accepted (the message names no data)."""
    return MCPError(INVALID_PARAMS, message)


def capacity_exceeded(error: CapacityError) -> MCPError:
    """``-32003`` for a request refused for want of room, with what a client can act on.

    ``data.reason`` is ``"quota"`` (the tenant's open tasks: wait for one to end),
    ``"rate"`` (the tenant's create rate) or ``"full"`` (Redis or the manager is out
    of room); ``data.retryAfterMs`` is when trying again may succeed, where known
    (rounded up to whole milliseconds). Nothing names the tenant, the binding or a task.
    """
    # A CapacityError's reason is free text to the type; only the documented values
    # may reach a client, so one raised elsewhere with another discloses nothing.
    reason = error.reason if error.reason in _CAPACITY_REASONS else "full"
    data: dict[str, Any] = {"reason": reason}
    if error.retry_after is not None:
        data["retryAfterMs"] = max(0, -(-error.retry_after // _MS))
    return MCPError(CAPACITY_EXCEEDED, CAPACITY_MESSAGE, data)


def internal_error() -> MCPError:
    """``-32603`` that discloses nothing about its cause."""
    return MCPError(INTERNAL_ERROR, "Internal error")


def name_header_mismatch(ctx: ServerRequestContext[Any, Any], task_id: str) -> MCPError | None:
    """``-32020`` (HTTP 400) when the request's ``Mcp-Name`` header names another task.

    SEP-2243 routes ``tasks/*`` by ``Mcp-Name`` = ``params.taskId``, and a server must
    refuse a request that disagrees with itself. A *missing* header is accepted: a
    server of this extension answers for any task whatever the routing, and the other
    Python client of the extension (fastmcp-tasks 4.1.4) sends none on ``tasks/*``.
    """
    headers = getattr(ctx.request, "headers", None)
    raw = headers.get(MCP_NAME_HEADER) if headers is not None else None
    if raw is None or decode_header_value(raw) == task_id:
        return None
    return MCPError(
        HEADER_MISMATCH, "Mcp-Name header does not match the request body's 'taskId' parameter"
    )


def missing_capability() -> MCPError:
    """``-32021`` naming the extension the client must declare."""
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        "Missing required client capability",
        {"requiredCapabilities": {"extensions": {EXTENSION_ID: {}}}},
    )
