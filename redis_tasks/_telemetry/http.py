"""A tiny HTTP/1.1 server on asyncio's own ``start_server``, for GET endpoints only.

Enough for a scraper and a health probe: one request per connection, a path
looked up in a table, a body and its length, ``Connection: close``. No new
dependency, and it stops with the worker's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

__all__ = ["HttpServer", "Response", "Route"]

#: How long a client may take to send its request line and headers.
_REQUEST_TIMEOUT: Final = 5.0
_MAX_HEAD: Final = 8192


@dataclass(frozen=True, slots=True)
class Response:
    """What a route answers."""

    status: int
    body: bytes
    content_type: str = "text/plain; charset=utf-8"


#: A route: called per request, answers a :class:`Response`.
Route = Callable[[], Awaitable[Response]]


class HttpServer:
    """Serves ``routes`` (path -> route) on one host and port."""

    def __init__(self, routes: Mapping[str, Route]) -> None:
        self._routes = dict(routes)
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port``; the port bound (``port`` 0 picks a free one)."""
        self._server = await asyncio.start_server(self._serve, host, port)
        bound: int = self._server.sockets[0].getsockname()[1]
        return bound

    async def close(self) -> None:
        """Stop listening and end the connections in progress."""
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            response, head_only = await self._answer(reader)
            status = HTTPStatus(response.status)
            head = (
                f"HTTP/1.1 {status.value} {status.phrase}\r\n"
                f"Content-Type: {response.content_type}\r\n"
                f"Content-Length: {len(response.body)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode("ascii")
            writer.write(head if head_only else head + response.body)
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away: nothing to answer
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[Response, bool]:
        try:
            async with asyncio.timeout(_REQUEST_TIMEOUT):
                head = await reader.readuntil(b"\r\n\r\n")
        except (TimeoutError, asyncio.LimitOverrunError):
            return Response(HTTPStatus.BAD_REQUEST, b"bad request\n"), False
        if len(head) > _MAX_HEAD:
            return Response(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, b"too large\n"), False
        parts = head.split(b"\r\n", 1)[0].decode("latin-1").split()
        if len(parts) != 3:
            return Response(HTTPStatus.BAD_REQUEST, b"bad request\n"), False
        method, target, _ = parts
        if method not in ("GET", "HEAD"):
            return Response(HTTPStatus.METHOD_NOT_ALLOWED, b"GET only\n"), False
        route = self._routes.get(target.split("?", 1)[0])
        if route is None:
            return Response(HTTPStatus.NOT_FOUND, b"not found\n"), method == "HEAD"
        return await route(), method == "HEAD"
