"""The lean MCP client's connection: JSON-RPC over streamable HTTP on raw HTTP/1.1.

Standard library only (see :mod:`._mcp_client`, the load client that uses it).
:class:`Connection` is one keep-alive connection to one server (an
:class:`Endpoint`), dressing each request as its :class:`Wire` says; a call that
gets no usable result raises :class:`RpcFailure`.

The wire: every request is one self-contained POST (protocol ``2026-07-28``: no
``initialize``, the protocol version and client capabilities in ``_meta``, the
routing headers ``Mcp-Method`` and ``Mcp-Name``), authenticated by a bearer
token. With ``"handshake": true`` each connection instead opens an MCP session
(``initialize`` at ``protocol``, ``notifications/initialized``, then the
``Mcp-Session-Id`` header on every request), for servers of the handshake era.

Replies are read for their status only: a failure carries just its kind
(``http 500``, ``rpc -32602``, ...), never an argument, result or error text.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["EXTENSION", "MODERN", "Connection", "Endpoint", "RpcFailure", "Wire"]

MODERN: Final = "2026-07-28"
EXTENSION: Final = "io.modelcontextprotocol/tasks"


class RpcFailure(Exception):
    """A call that got no usable result; ``kind`` names why, without any data."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


@dataclass(frozen=True)
class Endpoint:
    """Where an MCP server listens: ``http://host:port/path``."""

    host: str
    port: int
    path: str = "/mcp"


@dataclass
class Wire:
    """How requests are dressed: token, protocol, headers, session handshake."""

    token: str
    protocol: str = MODERN
    handshake: bool = False
    name_header: bool = True
    capabilities: dict[str, Any] = field(default_factory=lambda: {"extensions": {EXTENSION: {}}})


class Connection:
    """One keep-alive HTTP/1.1 connection to one server; one request at a time."""

    def __init__(self, endpoint: Endpoint, wire: Wire, timeout: float) -> None:
        self.endpoint = endpoint
        self.wire = wire
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._session: str | None = None
        self._ids = itertools.count(1)
        host = f"{endpoint.host}:{endpoint.port}"
        self._head = (
            f"POST {endpoint.path} HTTP/1.1\r\nHost: {host}\r\n"
            f"Authorization: Bearer {wire.token}\r\n"
            "Accept: application/json, text/event-stream\r\n"
            "Content-Type: application/json\r\n"
            f"MCP-Protocol-Version: {wire.protocol}\r\n"
        )
        if wire.handshake:
            self._meta: dict[str, Any] = {}
        else:
            # The per-request envelope of 2026-07-28 (no initialize).
            self._meta = {
                "io.modelcontextprotocol/protocolVersion": wire.protocol,
                "io.modelcontextprotocol/clientCapabilities": wire.capabilities,
            }

    async def open(self) -> None:
        """Connect (and open the MCP session when the wire has a handshake)."""
        async with asyncio.timeout(self.timeout):
            self._reader, self._writer = await asyncio.open_connection(
                self.endpoint.host, self.endpoint.port
            )
        if self.wire.handshake:
            await self._initialize()

    @property
    def is_open(self) -> bool:
        """Whether the connection can take a request."""
        return self._writer is not None

    async def close(self) -> None:
        """Close the connection."""
        writer, self._writer, self._reader, self._session = self._writer, None, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(self.timeout):
                    await writer.wait_closed()

    async def _initialize(self) -> None:
        params = {
            "protocolVersion": self.wire.protocol,
            "capabilities": self.wire.capabilities,
            "clientInfo": {"name": "redis-tasks-bench", "version": "0"},
        }
        await self.call("initialize", params)
        await self._post("notifications/initialized", None, {"jsonrpc": "2.0",
                         "method": "notifications/initialized"})  # fmt: skip

    async def call(self, method: str, params: dict[str, Any], name: str | None = None) -> Any:
        """One JSON-RPC request; its ``result``, or :class:`RpcFailure`."""
        request_id = next(self._ids)
        if self._meta:
            params = {**params, "_meta": self._meta}
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        reply = await self._post(method, name, body)
        if not isinstance(reply, dict):
            raise RpcFailure("bad reply")
        error = reply.get("error")
        if isinstance(error, dict):
            raise RpcFailure(f"rpc {error.get('code')}")
        result = reply.get("result")
        if not isinstance(result, dict):
            raise RpcFailure("bad reply")
        return result

    async def _post(self, method: str, name: str | None, body: dict[str, Any]) -> Any:
        if self._writer is None or self._reader is None:
            raise RpcFailure("closed")
        payload = json.dumps(body, separators=(",", ":")).encode()
        head = self._head + f"Mcp-Method: {method}\r\n"
        if name is not None and self.wire.name_header:
            head += f"Mcp-Name: {name}\r\n"
        if self._session is not None:
            head += f"Mcp-Session-Id: {self._session}\r\n"
        head += f"Content-Length: {len(payload)}\r\n\r\n"
        try:
            async with asyncio.timeout(self.timeout):
                self._writer.write(head.encode() + payload)
                return await self._read_reply(body.get("id"))
        except TimeoutError:
            # The reply may still come on this connection: never reuse it.
            await self.close()
            raise RpcFailure("timeout") from None
        except (OSError, asyncio.IncompleteReadError, ValueError):
            await self.close()
            raise RpcFailure("closed") from None

    async def _read_reply(self, request_id: Any) -> Any:
        assert self._reader is not None
        raw = await self._reader.readuntil(b"\r\n\r\n")
        lines = raw.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            key, sep, value = line.partition(":")
            if sep:
                headers[key.strip().lower()] = value.strip()
        if "content-length" in headers:
            content = await self._reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            content = await self._chunked()
        else:
            content = b""
        if headers.get("connection", "").lower() == "close":
            await self.close()
        if "mcp-session-id" in headers:
            self._session = headers["mcp-session-id"]
        if request_id is None:  # a notification: 202, nothing to read
            if status >= 300:
                raise RpcFailure(f"http {status}")
            return None
        if headers.get("content-type", "").startswith("text/event-stream"):
            return _sse_reply(content, request_id, status)
        if status != 200 and not content:
            raise RpcFailure(f"http {status}")
        try:
            return json.loads(content)
        except ValueError:
            raise RpcFailure(f"http {status}") from None

    async def _chunked(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)


def _sse_reply(content: bytes, request_id: Any, status: int) -> Any:
    """The JSON-RPC response to ``request_id`` among a stream's ``data:`` events."""
    for event in content.decode().replace("\r\n", "\n").split("\n\n"):
        data = "\n".join(
            line[5:].lstrip() for line in event.split("\n") if line.startswith("data:")
        )
        if not data:
            continue
        try:
            message = json.loads(data)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("id") == request_id:
            return message
    raise RpcFailure(f"http {status}")
