"""The MCP SDK's parts the fast path relies on: reached here only, and checked before use.

The fast path (:mod:`._fast_path`, :mod:`._fast_exchange`) answers a request as the
SDK's 2026-era transport, the private module ``mcp.server._streamable_http_modern``,
would: it calls the SDK functions that transport calls (``serve_one``, the inbound
ladder, the Accept and Host/Origin checks) and reuses the transport's private pieces
(its reply writer, its SSE framing, headers and keepalive interval, and the session
manager's running state), so that its replies are the SDK's own bytes. The extension
reads one more private part, ``MCPServer``'s tool manager: no public lookup gives a
registered tool's argument model. Those modules reach these parts only through this
one, and nothing else in :mod:`redis_tasks.mcp` touches a private part of the SDK.

A private part may change in any SDK release without failing an import: the fast path
would then answer unlike the SDK, or fail on every request. So :data:`SDK_RANGE` names
the releases the fast path was written for (``pyproject.toml`` requires the same), and
:func:`require_fast_path`, which ``tasks.asgi()`` runs before it installs anything,
checks that the installed SDK is one of them and that every part is there with the
shape the fast path uses: functions that still take its arguments (and are still
coroutine functions where it awaits them), constants of the types it passes on, the
attributes it reads, every member of the SDK's dispatch context on the fast path's own.
Any difference raises :class:`SdkMismatchError` naming the SDK's version and each part
that differs: the fast path never falls back silently. Without ``tasks.asgi()``, every
request takes the SDK's own path, which needs none of these parts.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Awaitable, Iterable
from types import ModuleType
from typing import TYPE_CHECKING, Any, Final

from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.connection import Connection
from mcp.server.runner import serve_one
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.dispatcher import CallOptions
from mcp.shared.dispatcher import DispatchContext as SdkDispatchContext
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.inbound import (
    MCP_PROTOCOL_VERSION_HEADER,
    InboundLadderRejection,
    InboundModernRoute,
    classify_inbound_request,
    find_duplicated_routing_header,
)
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params
from mcp.shared.message import MessageMetadata, ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import JSONRPCRequest

from ._sdk_shapes import MISSING as _MISSING
from ._sdk_shapes import Part as _Part
from ._sdk_shapes import found as _found
from ._sdk_shapes import headers as _headers
from ._sdk_shapes import keeps as _keeps
from ._sdk_shapes import public as _public
from ._sdk_shapes import qualified as _qualified
from ._sdk_shapes import release_in as _release_in
from ._sdk_shapes import seconds as _seconds
from ._sdk_shapes import takes as _takes

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.tools import Tool
    from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCResponse, RequestId
    from starlette.requests import Request
    from starlette.types import Receive, Scope, Send

__all__ = [
    "MCP_PROTOCOL_VERSION_HEADER",
    "SDK_RANGE",
    "CallOptions",
    "Connection",
    "InboundLadderRejection",
    "InboundModernRoute",
    "MessageMetadata",
    "NoBackChannelError",
    "RequireAuthMiddleware",
    "SdkMismatchError",
    "ServerMessageMetadata",
    "StreamableHTTPASGIApp",
    "StreamableHTTPSessionManager",
    "TransportContext",
    "TransportSecurityMiddleware",
    "check_accept_headers",
    "classify_inbound_request",
    "fast_path_problems",
    "find_duplicated_routing_header",
    "find_tool",
    "in_range",
    "installed_version",
    "lifespan_state",
    "ping_interval",
    "progress_token_from_params",
    "require_fast_path",
    "require_tool_lookup",
    "running",
    "serve_one",
    "sse_event",
    "sse_headers",
    "to_jsonrpc_response",
    "write",
]

#: The SDK releases the fast path was written for: the releases its byte-for-byte
#: comparison with the SDK (tests/mcp/test_mcp_fast_path.py) passed on, since a release may
#: change what the transport decides without changing the shape of any part checked here.
SDK_LOWEST: Final = (2, 3)
SDK_BELOW: Final = (3,)
SDK_RANGE: Final = f">={'.'.join(map(str, SDK_LOWEST))},<{'.'.join(map(str, SDK_BELOW))}"

_MODERN: Final = "mcp.server._streamable_http_modern"


class SdkMismatchError(RuntimeError):
    """The installed MCP SDK is not one the fast path was written for, or a part of it the
    fast path (or the extension's tool lookup) uses is gone or has another shape."""


def _import_modern() -> tuple[ModuleType, str | None]:
    try:
        return importlib.import_module(_MODERN), None
    except ImportError as exc:
        # Not an import error of redis_tasks.mcp: only the fast path needs the module,
        # and tasks.asgi() reports it (an empty stand-in lacks every part).
        return ModuleType(_MODERN), f"{_MODERN} cannot be imported ({exc})"


_modern, _modern_unimportable = _import_modern()


# -- the private parts, one function each -------------------------------------------------


def write(
    reply: JSONRPCResponse | JSONRPCError, scope: Scope, receive: Receive, send: Send
) -> Awaitable[None]:
    """Send ``reply`` as the SDK does: its serializer, its HTTP status for each error code."""
    sent: Awaitable[None] = _modern._write(reply, scope, receive, send)
    return sent


def to_jsonrpc_response(
    request_id: RequestId, served: Awaitable[dict[str, Any]]
) -> Awaitable[JSONRPCResponse | JSONRPCError]:
    """The SDK's reply to what ``served`` gives: its result, or the error the SDK maps."""
    reply: Awaitable[JSONRPCResponse | JSONRPCError] = _modern._to_jsonrpc_response(
        request_id, served
    )
    return reply


def sse_event(message: JSONRPCResponse | JSONRPCError | JSONRPCNotification) -> bytes:
    """``message`` as one ``event: message`` frame, framed as the SDK frames it."""
    frame: bytes = _modern._sse_event(message)
    return frame


def sse_headers() -> list[tuple[bytes, bytes]]:
    """The headers the SDK commits an event stream with."""
    headers: list[tuple[bytes, bytes]] = _modern._SSE_HEADERS
    return headers


def ping_interval() -> float:
    """The SDK's keepalive interval, in seconds."""
    # Read at each call, not once: it is the SDK's setting (tests shorten it at run time).
    interval: float = _modern._SSE_PING_INTERVAL
    return interval


async def refuses_params(
    sessions: StreamableHTTPSessionManager, request: Request, decoded: dict[str, Any], verdict: Any
) -> bool:
    """Whether the SDK refuses this ``tools/call`` for its ``Mcp-Param-*`` headers (an
    argument marked ``x-mcp-header`` whose header is missing, duplicated or differs):
    the fast path then hands the request to the SDK, which answers the 400 itself."""
    rejection = await _modern._mcp_param_rejection(
        sessions.app,
        request,
        JSONRPCRequest.model_validate(decoded),
        verdict,
        sessions._lifespan_state,
    )
    return rejection is not None


def running(sessions: StreamableHTTPSessionManager) -> bool:
    """Whether the session manager runs (before, the SDK refuses every request)."""
    return sessions._task_group is not None


def lifespan_state(sessions: StreamableHTTPSessionManager) -> Any:
    """The state the session manager entered the server's lifespan with."""
    return sessions._lifespan_state


def find_tool(server: MCPServer[Any], name: str) -> Tool | None:
    """``server``'s registered tool ``name`` (no public lookup gives its argument model)."""
    return server._tool_manager.get_tool(name)


# -- the checks ---------------------------------------------------------------------------

#: Read on every request: whether it runs, what it serves and how (the SDK's settings).
_SESSION_ATTRIBUTES: Final = (
    "_task_group",
    "_lifespan_state",
    "app",
    "json_response",
    "security_settings",
    "max_request_body_size",
)


def installed_version() -> str | None:
    """The installed ``mcp`` distribution's version (``None``: it has no metadata to read)."""
    try:
        return importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        return None


def in_range(version: str | None) -> bool:
    """Whether ``version`` is in :data:`SDK_RANGE`, by its release numbers (2.3.1rc1 is 2.3.1)."""
    return _release_in(version, SDK_LOWEST, SDK_BELOW)


def fast_path_problems(
    session_managers: Iterable[StreamableHTTPSessionManager], dispatch_context: type
) -> list[str]:
    """What keeps the fast path from running on the installed SDK (nothing: ``[]``).

    ``session_managers`` are those of the endpoints it would serve, ``dispatch_context``
    is its own dispatch context class.
    """
    problems: list[str] = []
    version = installed_version()
    if version is None:
        problems.append("the installed mcp has no version to read")
    elif not in_range(version):
        problems.append(f"mcp {version} is not mcp{SDK_RANGE}")
    if _modern_unimportable is not None:
        problems.append(_modern_unimportable)
    else:
        # The 2026-era transport's private parts.
        problems += _found(
            _takes(_private("_write"), 4, coroutine=True),
            _takes(_private("_to_jsonrpc_response"), 2, coroutine=True),
            _takes(_private("_sse_event"), 1),
            _takes(_private("_mcp_param_rejection"), 5, coroutine=True),
            _headers(_private("_SSE_HEADERS")),
            _seconds(_private("_SSE_PING_INTERVAL")),
        )
    problems += _found(
        # Public functions, called as that transport calls them.
        _takes(_public(serve_one), 4, ("connection", "lifespan_state"), coroutine=True),
        _takes(_public(Connection.from_envelope), 3),
        _takes(_public(classify_inbound_request), 1, ("headers",)),
        _takes(_public(find_duplicated_routing_header), 1),
        _takes(_public(check_accept_headers), 1),
        _takes(_public(progress_token_from_params), 1),
        _takes(_public(TransportSecurityMiddleware), 1),
        # Two positional: self and the request.
        _takes(
            _public(TransportSecurityMiddleware.validate_request), 2, ("is_post",), coroutine=True
        ),
        _takes(_public(TransportContext), 0, ("kind", "can_send_request", "headers")),
        _takes(_public(ServerMessageMetadata), 0, ("request_context",)),
        # The attributes the fast path is installed through.
        _keeps(StreamableHTTPASGIApp, "session_manager"),
        _keeps(RequireAuthMiddleware, "app", []),
        _dispatch_members(dispatch_context),
    )
    for sessions in session_managers:
        lacks = [name for name in _SESSION_ATTRIBUTES if not hasattr(sessions, name)]
        if lacks:
            problems.append(f"{_qualified(type(sessions))} has no {', '.join(lacks)}")
    return problems


def require_fast_path(
    session_managers: Iterable[StreamableHTTPSessionManager], dispatch_context: type
) -> None:
    """Raise :class:`SdkMismatchError` unless :func:`fast_path_problems` finds nothing."""
    problems = fast_path_problems(session_managers, dispatch_context)
    if problems:
        raise SdkMismatchError(
            f"tasks.asgi() cannot put the fast path on {_this_sdk()}: "
            + "; ".join(problems)
            + ". Without tasks.asgi() every request takes the SDK's own path."
        )


def require_tool_lookup(server: MCPServer[Any]) -> None:
    """Raise :class:`SdkMismatchError` unless :func:`find_tool` works on ``server``."""
    manager = getattr(server, "_tool_manager", _MISSING)
    if manager is _MISSING:
        problem: str | None = "MCPServer._tool_manager is missing"
    else:
        get_tool = getattr(manager, "get_tool", _MISSING)
        problem = _takes(("MCPServer._tool_manager.get_tool", get_tool), 1)
    if problem is not None:
        raise SdkMismatchError(
            f"TasksExtension cannot look up the tools it validates on {_this_sdk()}: {problem}"
        )


def _this_sdk() -> str:
    return f"mcp {installed_version() or '(version unknown)'}, written for mcp{SDK_RANGE}"


def _private(name: str) -> _Part:
    return f"{_MODERN}.{name}", getattr(_modern, name, _MISSING)


def _dispatch_members(ours: type) -> str | None:
    """What of the SDK's ``DispatchContext`` protocol ``ours`` lacks, if anything."""
    members: set[str] = set()
    for cls in SdkDispatchContext.__mro__:
        # The protocol and the protocols it extends, not typing's own bases.
        if getattr(cls, "_is_protocol", False) and cls.__module__ != "typing":
            names = (*vars(cls), *getattr(cls, "__annotations__", {}))
            members.update(name for name in names if not name.startswith("_"))
    lacks = sorted(name for name in members if not hasattr(ours, name))
    if lacks:
        return f"{_qualified(SdkDispatchContext)} has members the fast path's lacks: {lacks}"
    return None
