"""A round-robin HTTP proxy for tests: each request goes to the next upstream.

Served by uvicorn (``tests.support.rr_proxy:app``); ``RT_TEST_UPSTREAMS`` is a
comma-separated list of base URLs. Requests (bodies and headers) are forwarded as
they are and responses streamed back as they come (SSE included), so a client
that creates a task on one server polls it on the other: any server process must
answer for any task.
"""

from __future__ import annotations

import itertools
import os
from typing import Any

import httpx2

__all__ = ["app"]

_UPSTREAMS = itertools.cycle(os.environ.get("RT_TEST_UPSTREAMS", "").split(","))
_HOP_BY_HOP = {b"connection", b"keep-alive", b"transfer-encoding", b"host", b"content-length"}
_client = httpx2.AsyncClient(timeout=120)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Forward one HTTP request to the next upstream and stream its response back."""
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    url = next(_UPSTREAMS) + scope["path"]
    if scope.get("query_string"):
        url += "?" + scope["query_string"].decode()
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
    request = _client.build_request(scope["method"], url, headers=headers, content=body)
    response = await _client.send(request, stream=True)
    try:
        await send(
            {
                "type": "http.response.start",
                "status": response.status_code,
                "headers": [
                    (k, v) for k, v in response.headers.raw if k.lower() not in _HOP_BY_HOP
                ],
            }
        )
        async for chunk in response.aiter_raw():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    finally:
        await response.aclose()
