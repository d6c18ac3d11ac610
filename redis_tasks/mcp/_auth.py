"""Who may see a task: the binding every ``tasks/*`` request is checked against.

A task is bound, when it is created, to a :class:`~redis_tasks.RequestContext`:
the endpoint path the call arrived on and an authorization partition key. Every
later ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` (and every
``notifications/tasks`` subscription) computes the same pair for its own request,
and the task manager compares them atomically with the stored binding.

The default, :class:`PrincipalAuthorizer`, takes the partition key from the
SDK's authenticated principal (the access token's client ID, issuer and subject,
the same triple the SDK binds sessions to), hashed so neither the principal nor
its length reaches Redis. Without authentication the key is ``None``: such tasks
are bound to their endpoint alone, and their IDs (144 random bits) are the only
secret. Any callable with the :class:`Authorizer` signature can replace it.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import principal_components
from mcp.server.context import ServerRequestContext

from redis_tasks._models import RequestContext

__all__ = ["Authorizer", "PrincipalAuthorizer"]


class Authorizer(Protocol):
    """Maps one MCP request to the binding its tasks are created with and checked against."""

    def __call__(self, ctx: ServerRequestContext[Any, Any]) -> RequestContext:
        """Return the request's endpoint and partition key; raise to refuse it (``-32603``)."""
        ...


def _request_path(ctx: ServerRequestContext[Any, Any]) -> str | None:
    # On HTTP transports ``ctx.request`` is the Starlette request; stdio has none.
    url = getattr(ctx.request, "url", None)
    path = getattr(url, "path", None)
    return path if isinstance(path, str) and path else None


class PrincipalAuthorizer:
    """The default :class:`Authorizer`: endpoint path plus the authenticated principal.

    ``endpoint`` fixes the endpoint instead of reading the HTTP request path (use
    it when the same server is reachable under several paths that should share
    tasks, or on stdio, where there is no path: the default there is ``"stdio"``).
    """

    def __init__(self, endpoint: str | None = None) -> None:
        self._endpoint = endpoint

    def __call__(self, ctx: ServerRequestContext[Any, Any]) -> RequestContext:
        endpoint = self._endpoint or _request_path(ctx) or "stdio"
        token = get_access_token()
        if token is None:
            return RequestContext(endpoint=endpoint, partition_key=None)
        principal = json.dumps(principal_components(token), separators=(",", ":"))
        digest = hashlib.sha256(principal.encode()).hexdigest()
        return RequestContext(endpoint=endpoint, partition_key=f"principal:{digest}")

    def __repr__(self) -> str:
        return f"PrincipalAuthorizer(endpoint={self._endpoint!r})"
