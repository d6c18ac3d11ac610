"""The SEP-2663 wire: method names, params, result shapes and the protocol errors.

One function renders a task for ``tasks/get``, ``CreateTaskResult`` and
``notifications/tasks`` alike, so the three can never disagree.
"""

from __future__ import annotations

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

from redis_tasks._models import Task

__all__ = [
    "EXTENSION_ID",
    "CancelTaskParams",
    "GetTaskParams",
    "UpdateTaskParams",
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
