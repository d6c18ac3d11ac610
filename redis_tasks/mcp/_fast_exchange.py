"""How a fast-path reply is written: :class:`Exchange` and :class:`DispatchContext`.

:class:`Exchange` is an SSE-mode reply that stays JSON until a notification, or
the SDK's keepalive interval of silence, commits it to ``text/event-stream``;
:class:`DispatchContext` is the SDK's single-exchange dispatch context, writing
the handler's notifications onto that reply inline. The SDK's framing, headers and
keepalive interval come from :mod:`._sdk`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import anyio
from mcp_types import JSONRPCNotification, ProgressToken, RequestId
from starlette.requests import Request
from starlette.types import Send

from . import _sdk
from ._sdk import (
    CallOptions,
    MessageMetadata,
    NoBackChannelError,
    ServerMessageMetadata,
    TransportContext,
)

__all__ = ["DispatchContext", "Exchange"]


class Exchange:
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
        interval = _sdk.ping_interval()
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
                    {"type": "http.response.start", "status": 200, "headers": _sdk.sse_headers()}
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


class DispatchContext:
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
        exchange: Exchange | None,
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
            _sdk.sse_event(JSONRPCNotification(jsonrpc="2.0", method=method, params=body))
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
