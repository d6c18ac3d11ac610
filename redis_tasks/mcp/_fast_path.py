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

The request's intake (body, replay, envelope) is in :mod:`._fast_intake`, the
reply's writing (the SSE-mode exchange, the dispatch context) in
:mod:`._fast_exchange`, and every part of the SDK it uses in :mod:`._sdk`, which
checks them (and the SDK's version) before the fast path is installed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from mcp_types import JSONRPCError, JSONRPCResponse, RequestId
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send

from . import _sdk
from ._fast_exchange import DispatchContext, Exchange
from ._fast_intake import FAST_METHODS, FallThrough, envelope, read_body
from ._fast_intake import replay as _replay  # "replay" is a local name below
from ._sdk import (
    MCP_PROTOCOL_VERSION_HEADER,
    Connection,
    InboundLadderRejection,
    InboundModernRoute,
    RequireAuthMiddleware,
    StreamableHTTPASGIApp,
    TransportSecurityMiddleware,
    check_accept_headers,
    classify_inbound_request,
    find_duplicated_routing_header,
    progress_token_from_params,
    serve_one,
)

__all__ = ["FAST_METHODS", "FastPath", "install_fast_path"]

_VERSION_HEADER: Final = MCP_PROTOCOL_VERSION_HEADER.encode("ascii")
_MODERN: Final = frozenset(MODERN_PROTOCOL_VERSIONS)


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
        if scope["type"] != "http" or scope["method"] != "POST" or not _sdk.running(sessions):
            await self._pass_on(scope, receive, send)
            return
        # The first MCP-Protocol-Version header routes, as in the session manager.
        version = next((v for k, v in scope["headers"] if k == _VERSION_HEADER), None)
        if version is None or version.decode("latin-1") not in _MODERN:
            await self._pass_on(scope, receive, send)
            return
        taken: list[Message] = []
        try:
            body = await read_body(scope, receive, sessions.max_request_body_size, taken)
            replay = _replay(taken, receive)
            request = Request(scope, replay)
            decoded = envelope(body, self._takes_tool)
            has_json, has_sse = check_accept_headers(request)
            if not has_json or (not sessions.json_response and not has_sse):
                raise FallThrough
            if find_duplicated_routing_header(request.headers.items()) is not None:
                raise FallThrough
            verdict = classify_inbound_request(decoded, headers=dict(request.headers))
            if isinstance(verdict, InboundLadderRejection):
                raise FallThrough
            # A tool's Mcp-Param-* headers must match its arguments: the SDK's refusal.
            if decoded["method"] == "tools/call" and await _sdk.refuses_params(
                sessions, request, decoded, verdict
            ):
                raise FallThrough
        except FallThrough:
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
        exchange = None if sessions.json_response else Exchange(send)
        dctx = DispatchContext(request, request_id, progress_token_from_params(params), exchange)
        served = serve_one(
            sessions.app,
            dctx,
            decoded["method"],
            params,
            connection=connection,
            lifespan_state=_sdk.lifespan_state(sessions),
        )
        try:
            reply: JSONRPCResponse | JSONRPCError = await _sdk.to_jsonrpc_response(
                request_id, served
            )
        finally:
            if exchange is not None:
                await exchange.finish()
        if exchange is not None and exchange.committed:
            await send({"type": "http.response.body", "body": _sdk.sse_event(reply)})
            return
        await _sdk.write(reply, scope, receive, send)


def _no_tool(name: str) -> bool:
    return False


def install_fast_path(app: Starlette, takes_tool: Callable[[str], bool] | None = None) -> int:
    """Wrap every streamable HTTP endpoint of ``app`` in :class:`FastPath`; how many there are.

    The endpoint is a route whose app is the SDK's ``StreamableHTTPASGIApp``,
    directly or behind ``RequireAuthMiddleware`` (then the fast path goes
    inside it, so authentication stays the SDK's). Already wrapped endpoints
    count and stay as they are. Raises :class:`._sdk.SdkMismatchError`, and
    wraps nothing, when the installed SDK is not one the fast path was written
    for or a part of it the fast path uses changed.
    """
    holders: list[Any] = []  # what holds each endpoint: its route, or the SDK's auth middleware
    for route in app.routes:
        if not isinstance(route, Route):
            continue
        holder: Any = route
        if isinstance(holder.app, RequireAuthMiddleware):
            holder = holder.app
        if isinstance(holder.app, FastPath | StreamableHTTPASGIApp):
            holders.append(holder)
    # Checked before anything is wrapped: the fast path serves every endpoint or none.
    unwrapped = [h for h in holders if not isinstance(h.app, FastPath)]
    _sdk.require_fast_path([h.app.session_manager for h in unwrapped], DispatchContext)
    if not holders:
        raise ValueError(
            "no MCP streamable HTTP endpoint: pass what streamable_http_app() returned"
        )
    for holder in unwrapped:
        holder.app = FastPath(holder.app, takes_tool)
    return len(holders)
