"""The dashboard's one credential: a bearer token, required of every request once given.

The page is read-only, but what it reads out (the queues, the consumers, the tenants
by digest) is for the operators of the deployment only: off loopback the dashboard
does not start without a token (:func:`token_problem` says why and how to give one),
and every request that does not carry it gets ``401`` and an empty body, whatever
its path, method or host.

The token comes as ``Authorization: Bearer <token>`` (curl, a proxy, a script), or
as the password of HTTP Basic (any user name), which is how a browser sends it: the
``401`` asks for Basic credentials, the browser prompts once and sends them with the
page's every request. It is compared in constant time (:func:`hmac.compare_digest`)
and never logged, printed or echoed.

Pure ASGI, no third-party import: the command line checks a token before it knows
whether Starlette is installed.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

__all__ = ["MIN_TOKEN_CHARS", "TOKEN_ENV", "BearerToken", "token_problem"]

#: The environment variable the command line reads the token from (``--token`` too).
TOKEN_ENV: Final = "REDIS_TASKS_DASHBOARD_TOKEN"  # noqa: S105 - its name, not a token
#: The shortest token accepted: one that could be guessed protects nothing.
MIN_TOKEN_CHARS: Final = 16
_MAX_TOKEN_CHARS: Final = 1024
#: How to make a good one, in the refusals.
_HOW: Final = (
    f"set {TOKEN_ENV} (or pass --token; the environment keeps it out of the process "
    f"list), e.g. export {TOKEN_ENV}=$(python3 -c 'import secrets; "
    "print(secrets.token_urlsafe(32))')"
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_CHALLENGE: Final = b'Basic realm="redis-tasks dashboard", charset="UTF-8"'
_REFUSAL_HEADERS: Final = [
    (b"content-length", b"0"),
    (b"www-authenticate", _CHALLENGE),
    (b"cache-control", b"no-store"),
]


def token_problem(token: str | None, *, loopback: bool) -> str | None:
    """What is wrong with serving with ``token`` (``None``: none given) on a loopback
    address or beyond: one line that never repeats the token, or ``None``."""
    if token is None or token == "":
        return None if loopback else f"listening beyond loopback needs a token: {_HOW}"
    if not MIN_TOKEN_CHARS <= len(token) <= _MAX_TOKEN_CHARS:
        return f"the token must be {MIN_TOKEN_CHARS} to {_MAX_TOKEN_CHARS} characters: {_HOW}"
    if not all("!" <= c <= "~" for c in token):
        return f"the token must be printable ASCII without spaces: {_HOW}"
    return None


def _offered(headers: list[tuple[bytes, bytes]]) -> list[bytes]:
    """The tokens a request's ``Authorization`` headers offer (Bearer, or a Basic
    password)."""
    offered = []
    for name, value in headers:
        if name.lower() != b"authorization":
            continue
        scheme, _, credentials = value.strip().partition(b" ")
        credentials = credentials.strip()
        if scheme.lower() == b"bearer":
            offered.append(credentials)
        elif scheme.lower() == b"basic":
            try:
                pair = base64.b64decode(credentials, validate=True)
            except (binascii.Error, ValueError):
                continue
            offered.append(pair.partition(b":")[2])
    return offered


class BearerToken:
    """ASGI middleware: the wrapped app serves only requests that carry ``token``
    (see the module); every other one gets ``401`` and an empty body."""

    def __init__(self, app: App, token: str) -> None:
        self.app = app
        self._token = token.encode()

    def _carries(self, scope: Scope) -> bool:
        # Every offer is compared, in constant time: no early way out to time.
        found = False
        for offer in _offered(list(scope.get("headers") or ())):
            found |= hmac.compare_digest(offer, self._token)
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the app's lifespan and the requests that carry the token; refuse the rest."""
        if scope["type"] == "lifespan" or self._carries(scope):
            await self.app(scope, receive, send)
        elif scope["type"] == "http":
            await send({"type": "http.response.start", "status": 401, "headers": _REFUSAL_HEADERS})
            await send({"type": "http.response.body", "body": b""})
        else:  # a WebSocket: the dashboard serves none, and never without the token
            await send({"type": "websocket.close", "code": 1008})
