"""The fast path: ``tasks/*`` and task-creating ``tools/call`` past the SDK's transport.

Polling is most of a tasks deployment's traffic (and each task starts with a
``tools/call`` that only creates it), and on the SDK's streamable
HTTP entry much of a poll's CPU is the single-exchange transport around the
handler: a session-manager hop, a request-body replay, and in SSE mode a task
group, a zero-buffer memory stream and a disconnect watcher per request, there
only to learn whether the handler emits a notification before it returns.

:class:`FastPath` takes the place of the SDK's ``StreamableHTTPASGIApp`` inside
the SDK's own authentication middleware (so the 401 and 403 answers, their
``WWW-Authenticate`` header and the principal in the auth context stay the
SDK's), and serves a 2026-era ``tasks/*`` POST itself, and a ``tools/call`` of a
tool registered ``REQUIRED`` (its reply is a new task or an error: the tool never
runs in the server, so nothing else is sent meanwhile). Every decision is the
SDK's own code: its body limit, Accept, duplicated-header and inbound-ladder
checks and its Host/Origin/Content-Type check decide whether the request is
well formed; its ``serve_one`` runs the server middleware, validates the
params and calls the extension's handler; its serializer writes the reply.
Only how the reply reaches the socket is done here: the handler runs inline,
and a timer (not a task group) commits a still-silent SSE-mode reply to
``text/event-stream`` after the SDK's keepalive interval and pings from then
on; a notification the handler emits commits it at once, as on the SDK path.

A request any check would refuse goes to the SDK unchanged, body replayed, and
the SDK refuses it: a refused Accept, an unusual body (a batch, a notification,
a float or boolean ID, extra members), an oversized or interrupted body, a
duplicated routing header, any inbound-ladder rejection. So do other methods,
handshake-era, unknown or absent protocol versions, and any request before the
session manager runs. The Host/Origin/Content-Type check alone is answered
here when it refuses, with the response the SDK's check built: the SDK runs it
before the others, so a request that passed them gets exactly that answer from
the SDK too, and the check's warning is logged once, not twice.

A difference remains by design: a client that disconnects mid-request does not
cancel the handler here (it finishes, bounded by the manager's deadline, and
its reply goes nowhere), where the SDK's SSE mode would cancel it.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

import anyio
from mcp.server import _streamable_http_modern as modern
from mcp.server.auth.middleware.bearer_auth import RequireAuthMiddleware
from mcp.server.connection import Connection
from mcp.server.runner import serve_one
from mcp.server.streamable_http import check_accept_headers
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.dispatcher import CallOptions
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
from mcp_types import JSONRPCError, JSONRPCNotification, JSONRPCResponse, ProgressToken, RequestId
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

__all__ = ["FAST_METHODS", "FastPath", "install_fast_path"]

#: The methods the fast path answers; every other method goes to the SDK.
FAST_METHODS: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})

_VERSION_HEADER: Final = MCP_PROTOCOL_VERSION_HEADER.encode("ascii")
_MODERN: Final = frozenset(MODERN_PROTOCOL_VERSIONS)
_ENVELOPE_KEYS: Final = frozenset({"jsonrpc", "id", "method", "params"})


class _FallThrough(Exception):
    """The request is not one the fast path is sure about: the SDK serves it."""


class _Exchange:
    """One SSE-mode reply: JSON until something commits ``text/event-stream``.

    The SDK path commits when the handler emits a notification or stays silent
    for the ping interval, and then pings after every further silent interval;
    this does the same with one timer instead of a task group. All writes go
    through one lock, so a ping never interleaves with a notification.
    """

    def __init__(self, send: Send) -> None:
        self._send = send
        self._committed = False
        self._lock = asyncio.Lock()
        self._timer: asyncio.TimerHandle | None = None
        self._pinging: asyncio.Task[None] | None = None
        self._done = False
        self._arm()

    @property
    def committed(self) -> bool:
        """Whether the reply is an event stream by now."""
        return self._committed

    def _arm(self) -> None:
        # Read at call time so the interval stays the SDK's own setting.
        interval = modern._SSE_PING_INTERVAL
        self._timer = asyncio.get_running_loop().call_later(interval, self._on_silence)

    def _on_silence(self) -> None:
        self._timer = None
        if not self._done:
            self._pinging = asyncio.ensure_future(self._ping())

    async def _ping(self) -> None:
        await self.emit(b": ping\r\n\r\n")

    async def emit(self, frame: bytes) -> None:
        """Write one frame of the event stream, committing the stream first if need be."""
        async with self._lock:
            if self._done:
                return
            if self._timer is not None:
                self._timer.cancel()
            if not self._committed:
                self._committed = True
                await self._send(
                    {"type": "http.response.start", "status": 200, "headers": modern._SSE_HEADERS}
                )
            await self._send({"type": "http.response.body", "body": frame, "more_body": True})
            self._arm()

    async def finish(self) -> None:
        """Stop the timer and wait out a ping in flight; after this, nothing else is written."""
        async with self._lock:
            self._done = True
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
        if self._pinging is not None:
            await self._pinging


class _DispatchContext:
    """The SDK's single-exchange ``DispatchContext``, writing notifications inline.

    Mirrors the SDK's: no back-channel (a 2026-era server sends no requests),
    notifications onto this request's reply when it may become an event stream
    (SSE mode), dropped otherwise (JSON mode), progress only with a token.
    """

    def __init__(
        self,
        request: Request,
        request_id: RequestId,
        progress_token: ProgressToken | None,
        exchange: _Exchange | None,
    ) -> None:
        self._transport = TransportContext(
            kind="streamable-http", can_send_request=False, headers=request.headers
        )
        self._request_id = request_id
        self._metadata = ServerMessageMetadata(request_context=request)
        self._progress_token = progress_token
        self._exchange = exchange
        self._cancel: anyio.Event | None = None

    @property
    def transport(self) -> TransportContext:
        return self._transport

    @property
    def can_send_request(self) -> bool:
        return False

    @property
    def request_id(self) -> RequestId:
        return self._request_id

    @property
    def message_metadata(self) -> MessageMetadata:
        return self._metadata

    @property
    def cancel_requested(self) -> anyio.Event:
        # Made on first use: the tasks handlers never wait on it.
        if self._cancel is None:
            self._cancel = anyio.Event()
        return self._cancel

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        if self._exchange is None:
            return
        body = dict(params) if params is not None else None
        await self._exchange.emit(
            modern._sse_event(JSONRPCNotification(jsonrpc="2.0", method=method, params=body))
        )

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        if self._progress_token is None:
            return
        params: dict[str, Any] = {"progressToken": self._progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        await self.notify("notifications/progress", params)


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` with ``messages`` (already taken from it) handed out again first."""
    if not messages:
        return receive
    pending = deque(messages)

    async def replayed() -> Message:
        if pending:
            return pending.popleft()
        return await receive()

    return replayed


async def _read_body(scope: Scope, receive: Receive, limit: int, taken: list[Message]) -> bytes:
    """The whole body, read the way the SDK's body limit reads it; every message kept in ``taken``.

    Anything the limit would refuse, and a disconnect, falls through: the SDK
    then sees the same messages and answers (or not) as it always does.
    """
    for name, value in scope["headers"]:
        if name == b"content-length":
            # The SDK's limit reads the first Content-Length and ignores a bad one.
            try:
                declared = int(value)
            except ValueError:
                break
            if declared > limit:
                raise _FallThrough
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        taken.append(message)
        if message["type"] != "http.request":
            raise _FallThrough
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise _FallThrough
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _envelope(body: bytes, takes_tool: Callable[[str], bool]) -> dict[str, Any]:
    """The decoded request, if it is a plain ``tasks/*`` request object, or a
    ``tools/call`` of a tool ``takes_tool`` names; else fall through."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        raise _FallThrough from None
    # Only the unremarkable shape: the SDK's envelope model would take exactly
    # these values unchanged (a strict int or a string ID, object params).
    if (
        not isinstance(decoded, dict)
        or not decoded.keys() <= _ENVELOPE_KEYS
        or decoded.get("jsonrpc") != "2.0"
        or type(decoded.get("id")) not in (int, str)
        or not isinstance(decoded.get("params"), dict)
    ):
        raise _FallThrough
    method = decoded.get("method")
    if method in FAST_METHODS:
        return decoded
    tool = decoded["params"].get("name")
    if method == "tools/call" and isinstance(tool, str) and takes_tool(tool):
        return decoded
    raise _FallThrough


class FastPath:
    """An ASGI app serving ``tasks/*`` in front of the SDK's ``StreamableHTTPASGIApp``.

    Install it with :meth:`TasksExtension.asgi`; requests it does not take go
    to ``inner`` unchanged. ``served`` and ``passed_on`` count the requests
    answered here and handed to the SDK (how much of the traffic it takes).
    """

    def __init__(
        self, inner: StreamableHTTPASGIApp, takes_tool: Callable[[str], bool] | None = None
    ) -> None:
        self.inner = inner
        self._takes_tool = takes_tool or _no_tool
        self.served = 0
        self.passed_on = 0
        self._sessions = inner.session_manager
        self._security = TransportSecurityMiddleware(self._sessions.security_settings)

    async def _pass_on(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.passed_on += 1
        await self.inner(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve a 2026-era ``tasks/*`` POST, or hand the request to the SDK."""
        sessions = self._sessions
        # The SDK raises on a request before its session manager runs; so does the inner app.
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or getattr(sessions, "_task_group", None) is None
        ):
            await self._pass_on(scope, receive, send)
            return
        # The first MCP-Protocol-Version header routes, as in the session manager.
        version = next((v for k, v in scope["headers"] if k == _VERSION_HEADER), None)
        if version is None or version.decode("latin-1") not in _MODERN:
            await self._pass_on(scope, receive, send)
            return
        taken: list[Message] = []
        try:
            body = await _read_body(scope, receive, sessions.max_request_body_size, taken)
            replay = _replay(taken, receive)
            request = Request(scope, replay)
            decoded = _envelope(body, self._takes_tool)
            has_json, has_sse = check_accept_headers(request)
            if not has_json or (not sessions.json_response and not has_sse):
                raise _FallThrough
            if find_duplicated_routing_header(request.headers.items()) is not None:
                raise _FallThrough
            verdict = classify_inbound_request(decoded, headers=dict(request.headers))
            if isinstance(verdict, InboundLadderRejection):
                raise _FallThrough
        except _FallThrough:
            await self._pass_on(scope, _replay(taken, receive), send)
            return
        self.served += 1
        # The SDK checks these first; every check above depends only on the
        # request, so when this one refuses, the SDK's answer is this response.
        refused = await self._security.validate_request(request, is_post=True)
        if refused is not None:
            await refused(scope, replay, send)
            return
        await self._serve(request, decoded, verdict, scope, replay, send)

    async def _serve(
        self,
        request: Request,
        decoded: dict[str, Any],
        verdict: InboundModernRoute,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        sessions = self._sessions
        request_id: RequestId = decoded["id"]
        params: dict[str, Any] = decoded["params"]
        connection = Connection.from_envelope(
            verdict.protocol_version, verdict.client_info, verdict.client_capabilities
        )
        exchange = None if sessions.json_response else _Exchange(send)
        dctx = _DispatchContext(request, request_id, progress_token_from_params(params), exchange)
        served = serve_one(
            sessions.app,
            dctx,
            decoded["method"],
            params,
            connection=connection,
            # The state the session manager entered the server's lifespan with.
            lifespan_state=sessions._lifespan_state,
        )
        try:
            reply: JSONRPCResponse | JSONRPCError = await modern._to_jsonrpc_response(
                request_id, served
            )
        finally:
            if exchange is not None:
                await exchange.finish()
        if exchange is not None and exchange.committed:
            await send({"type": "http.response.body", "body": modern._sse_event(reply)})
            return
        await modern._write(reply, scope, receive, send)


def _no_tool(name: str) -> bool:
    return False


def install_fast_path(app: Starlette, takes_tool: Callable[[str], bool] | None = None) -> int:
    """Wrap every streamable HTTP endpoint of ``app`` in :class:`FastPath`; how many there are.

    The endpoint is a route whose app is the SDK's ``StreamableHTTPASGIApp``,
    directly or behind ``RequireAuthMiddleware`` (then the fast path goes
    inside it, so authentication stays the SDK's). Already wrapped endpoints
    count and stay as they are.
    """
    found = 0
    for route in app.routes:
        if not isinstance(route, Route):
            continue
        holder: Any = route
        if isinstance(holder.app, RequireAuthMiddleware):
            holder = holder.app
        if isinstance(holder.app, FastPath):
            found += 1
        elif isinstance(holder.app, StreamableHTTPASGIApp):
            holder.app = FastPath(holder.app, takes_tool)
            found += 1
    if not found:
        raise ValueError(
            "no MCP streamable HTTP endpoint: pass what streamable_http_app() returned"
        )
    return found
