"""The fast path's intake: a request's body, its replay, and the envelopes it takes.

:func:`read_body` reads the body as the SDK's body limit reads it, keeping every
ASGI message; :func:`replay` hands those messages out again, so a request the
fast path does not take reaches the SDK unchanged; :func:`envelope` decodes a
body and takes only a plain request object of :data:`FAST_METHODS`, or a
``tools/call`` of a task tool. Anything else raises :class:`FallThrough`.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from starlette.types import Message, Receive, Scope

__all__ = ["FAST_METHODS", "FallThrough", "envelope", "read_body", "replay"]

#: The methods the fast path answers; every other method goes to the SDK.
FAST_METHODS: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
_ENVELOPE_KEYS: Final = frozenset({"jsonrpc", "id", "method", "params"})


class FallThrough(Exception):
    """The request is not one the fast path is sure about: the SDK serves it."""


def replay(messages: list[Message], receive: Receive) -> Receive:
    """``receive`` with ``messages`` (already taken from it) handed out again first."""
    if not messages:
        return receive
    pending = deque(messages)

    async def replayed() -> Message:
        if pending:
            return pending.popleft()
        return await receive()

    return replayed


async def read_body(scope: Scope, receive: Receive, limit: int, taken: list[Message]) -> bytes:
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
                raise FallThrough
            break
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        taken.append(message)
        if message["type"] != "http.request":
            raise FallThrough
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise FallThrough
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def envelope(body: bytes, takes_tool: Callable[[str], bool]) -> dict[str, Any]:
    """The decoded request, if it is a plain ``tasks/*`` request object, or a
    ``tools/call`` of a tool ``takes_tool`` names; else fall through."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        raise FallThrough from None
    # Only the unremarkable shape: the SDK's envelope model would take exactly
    # these values unchanged (a strict int or a string ID, object params).
    if (
        not isinstance(decoded, dict)
        or not decoded.keys() <= _ENVELOPE_KEYS
        or decoded.get("jsonrpc") != "2.0"
        or type(decoded.get("id")) not in (int, str)
        or not isinstance(decoded.get("params"), dict)
    ):
        raise FallThrough
    method = decoded.get("method")
    if method in FAST_METHODS:
        return decoded
    tool = decoded["params"].get("name")
    if method == "tools/call" and isinstance(tool, str) and takes_tool(tool):
        return decoded
    raise FallThrough
