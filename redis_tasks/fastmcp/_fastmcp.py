"""FastMCP's parts this package relies on: reached here only, and checked before use.

Most of what :mod:`redis_tasks.fastmcp` uses is FastMCP's public extension API
(``ServerExtension``, ``Context``, ``get_access_token``, ``get_http_headers``,
``FastMCP.call_tool``). A worker, though, runs a tool with no HTTP request behind it,
and FastMCP has no public way to give such a run its caller; a few private parts do
it, the ones fastmcp-tasks itself sets for the same reason:

- ``fastmcp_request_ctx`` and ``FastMCPRequestContext`` (with ``_srctx``, the SDK's
  request context): the request a ``Context`` reads its session, progress token and
  multi-round-trip answers from; a worker binds one whose session is the task;
- ``_background_task_headers``: what ``get_http_headers()`` returns without a request;
- ``_is_client_tool_call()``: whether the call being dispatched is the one the client
  sent (a tool that calls another runs it inline);
- ``FastMCP._lifespan_manager()`` and ``FastMCP._extensions``: a worker enters the
  app's lifespan (its tools' resources) and finds the app's extension;
- ``FunctionTool.fn`` and ``without_injected_parameters``: the arguments are checked
  against the tool's own signature before a task is created;
- ``FastMCPProviderTool._server`` and ``._original_name``: a mounted server's tool is
  found in its own server, so its arguments are checked as its own (:func:`leaf_tool`).

A private part may change in any FastMCP release without failing an import, so
:data:`FASTMCP_RANGE` names the releases this was written for (``pyproject.toml``'s
``fastmcp`` extra requires the same) and :func:`require_fastmcp`, which
``TasksExtension()`` and the worker run first, checks the installed FastMCP is one of
them and has every part with the shape used here. A difference raises
:class:`FastMCPMismatchError`, one line naming it: never a silent fallback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractAsyncContextManager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final, cast

import fastmcp
import fastmcp.server.dependencies as _deps
from fastmcp import FastMCP
from fastmcp.server.providers.fastmcp_provider import FastMCPProviderTool
from fastmcp.tools.function_tool import FunctionTool
from fastmcp.utilities.versions import VersionSpec
from mcp.server.auth.middleware.auth_context import auth_context_var
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from pydantic import TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from redis_tasks.mcp._sdk_shapes import release_in

if TYPE_CHECKING:
    from fastmcp.server.context import Context
    from fastmcp.tools.base import Tool
    from mcp.server.auth.provider import AccessToken
    from mcp.server.context import ServerRequestContext

__all__ = [
    "FASTMCP_RANGE",
    "FastMCPMismatchError",
    "app_extensions",
    "app_lifespan",
    "is_client_call",
    "leaf_tool",
    "require_fastmcp",
    "sdk_context",
    "valid_arguments",
    "worker_request",
]

#: The FastMCP releases this package was written for (``pyproject.toml`` says the same).
FASTMCP_LOWEST: Final = (4, 1, 4)
FASTMCP_BELOW: Final = (4, 3)
FASTMCP_RANGE: Final = (
    f">={'.'.join(map(str, FASTMCP_LOWEST))},<{'.'.join(map(str, FASTMCP_BELOW))}"
)

#: The most mounts deep a tool is looked for (a cycle of mounts cannot loop).
_MOUNT_DEPTH: Final = 16

#: The fields of ``FastMCPRequestContext`` a worker fills in.
_REQUEST_FIELDS: Final = frozenset(
    {"session", "request_id", "meta", "request", "protocol_version", "close_sse_stream",
     "lifespan_context", "_srctx"}
)  # fmt: skip


class FastMCPMismatchError(RuntimeError):
    """The installed FastMCP is not one this package was written for, or a part of it
    this package uses is gone or has another shape (the message names which)."""


def fastmcp_problems() -> list[str]:
    """What keeps this package from running on the installed FastMCP (nothing: ``[]``)."""
    problems: list[str] = []
    context_var = getattr(_deps, "fastmcp_request_ctx", None)
    if not isinstance(context_var, ContextVar):
        problems.append("fastmcp.server.dependencies.fastmcp_request_ctx is not a ContextVar")
    request_type = getattr(_deps, "FastMCPRequestContext", None)
    if not dataclasses.is_dataclass(request_type):
        problems.append("fastmcp.server.dependencies.FastMCPRequestContext is not a dataclass")
    else:
        fields = {field.name for field in dataclasses.fields(request_type)}
        if fields != _REQUEST_FIELDS:
            problems.append(
                "FastMCPRequestContext's fields are "
                f"{sorted(fields)}, not {sorted(_REQUEST_FIELDS)}"
            )
    if not isinstance(getattr(_deps, "_background_task_headers", None), ContextVar):
        problems.append("fastmcp.server.dependencies._background_task_headers is not a ContextVar")
    client_call = getattr(_deps, "_is_client_tool_call", None)
    if not callable(client_call) or inspect.signature(client_call).parameters:
        problems.append("fastmcp.server.dependencies._is_client_tool_call() is missing")
    if not callable(getattr(_deps, "without_injected_parameters", None)):
        problems.append("fastmcp.server.dependencies.without_injected_parameters is missing")
    if not callable(getattr(FastMCP, "_lifespan_manager", None)):
        problems.append("FastMCP._lifespan_manager() is missing")
    if "fn" not in getattr(FunctionTool, "model_fields", {}):
        problems.append("FunctionTool.fn is missing")
    private = getattr(FastMCPProviderTool, "__private_attributes__", {})
    if not {"_server", "_original_name"} <= set(private):
        problems.append("FastMCPProviderTool._server or ._original_name is missing")
    return problems


def require_fastmcp() -> None:
    """Raise :class:`FastMCPMismatchError` unless the installed FastMCP is one this
    package runs on: in :data:`FASTMCP_RANGE`, with every part it uses in shape."""
    version = str(getattr(fastmcp, "__version__", ""))
    if not release_in(version, FASTMCP_LOWEST, FASTMCP_BELOW):
        raise FastMCPMismatchError(
            f"redis_tasks.fastmcp needs FastMCP {FASTMCP_RANGE}; this is FastMCP {version or '?'}"
        )
    problems = fastmcp_problems()
    if problems:
        raise FastMCPMismatchError(
            f"FastMCP {version} differs from what redis_tasks.fastmcp uses: " + "; ".join(problems)
        )


def sdk_context(context: Context) -> ServerRequestContext[Any, Any] | None:
    """The SDK's request context under a FastMCP ``Context`` (``None`` outside a request)."""
    request = context.request_context
    return None if request is None else request._srctx


def is_client_call() -> bool:
    """Whether the tool being dispatched is the one the client's ``tools/call`` named."""
    return bool(_deps._is_client_tool_call())


def app_lifespan(app: FastMCP) -> AbstractAsyncContextManager[Any]:
    """The app's own lifespan, as its server enters it (extensions included)."""
    manager: Callable[[], AbstractAsyncContextManager[Any]] = app._lifespan_manager
    return manager()


def app_extensions(app: FastMCP) -> Mapping[str, Any]:
    """The app's registered extensions, by identifier."""
    extensions: Mapping[str, Any] = getattr(app, "_extensions", {})
    return extensions


@contextlib.contextmanager
def worker_request(
    request: ServerRequestContext[Any, Any],
    *,
    token: AccessToken | None,
    headers: Mapping[str, str],
) -> Iterator[None]:
    """Run the enclosed code as if in ``request``, from the caller ``token`` with
    ``headers``: what ``Context``, ``get_access_token()`` and ``get_http_headers()``
    then read."""
    wrapped = _deps.FastMCPRequestContext(
        session=request.session,
        request_id=str(request.request_id),
        meta=None,
        request=None,
        protocol_version=request.protocol_version,
        close_sse_stream=None,
        lifespan_context=request.lifespan_context,
        _srctx=request,
    )
    tokens = (
        _deps.fastmcp_request_ctx.set(wrapped),
        _deps._background_task_headers.set(dict(headers) or None),
        auth_context_var.set(AuthenticatedUser(token) if token is not None else None),
    )
    try:
        yield
    finally:
        auth_context_var.reset(tokens[2])
        _deps._background_task_headers.reset(tokens[1])
        _deps.fastmcp_request_ctx.reset(tokens[0])


async def leaf_tool(tool: Tool) -> Tool:
    """The tool that runs a call of ``tool``: a mounted server's tool is a proxy that
    calls its own server's tool (through any depth of mounts), whose signature is the
    one that validates the call."""
    for _ in range(_MOUNT_DEPTH):
        if not isinstance(tool, FastMCPProviderTool):
            return tool
        server, name = tool._server, tool._original_name
        if not isinstance(server, FastMCP) or not name:
            return tool
        # The version the proxy runs (as its own run asks its server for it).
        version = VersionSpec(eq=tool.version) if tool.version else None
        inner = await server.get_tool(name, version=version)
        if inner is None:
            return tool
        tool = inner
    return tool


def valid_arguments(tool: Tool, arguments: dict[str, Any]) -> bool:
    """Whether ``arguments`` pass ``tool``'s own validation, without running it.

    A ``FunctionTool`` validates a call against its function's signature; the same
    parameters on a function that only returns them give pydantic the same call schema.
    Another kind of tool validates when it runs: ``True`` (the worker reports it).
    """
    if not isinstance(tool, FunctionTool):
        return True
    adapter = _call_adapter(tool.fn)
    if adapter is None:
        return True
    try:
        adapter.validate_python(arguments)
    except PydanticValidationError:
        return False
    except Exception:  # a check pydantic cannot make here: the worker's run decides
        return True
    return True


@functools.lru_cache(maxsize=256)
def _call_adapter(fn: Callable[..., Any]) -> TypeAdapter[Any] | None:
    """A validator of calls of ``fn`` (its parameters on a function that does nothing),
    built once per tool function: ``None`` when pydantic cannot build one."""
    bare = _deps.without_injected_parameters(fn, run_in_thread=False)
    signature = inspect.signature(bare)
    try:
        hints = typing.get_type_hints(bare, include_extras=True)
    except Exception:  # an annotation that does not resolve: the worker will say so
        return None

    def probe(*args: Any, **kwargs: Any) -> None:
        signature.bind(*args, **kwargs)

    probe.__signature__ = signature  # type: ignore[attr-defined]
    probe.__annotations__ = {name: hints[name] for name in signature.parameters if name in hints}
    try:
        return TypeAdapter(cast("Any", probe))
    except Exception:
        return None
