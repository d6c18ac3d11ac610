"""``TasksExtension``: SEP-2663 tasks for a FastMCP server, on redis-tasks.

FastMCP runs a ``@mcp.tool(task=TaskConfig(...))`` tool as a task through whatever
extension is registered as ``io.modelcontextprotocol/tasks``; fastmcp-tasks is one,
this is another, so an app changes backend by changing the line that registers it.

Nothing of the wire is written twice: the methods (``tasks/get``, ``tasks/update``,
``tasks/cancel``) and the task path of a ``tools/call`` are those of the SDK's
:class:`redis_tasks.mcp.TasksExtension`, which this one holds; what it adds is
FastMCP's way of finding a tool's task mode (its ``TaskConfig``, read at each call, so
tools added later count), its validation, its poll interval, and the caller's
snapshot (:mod:`._snapshot`) kept as the task's payload for the worker
(:func:`redis_tasks.fastmcp.tool_handler`, ``redis-tasks worker --fastmcp``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Literal, cast

from fastmcp.server.dependencies import get_access_token, get_http_headers
from fastmcp.server.extensions import MethodBinding, ServerExtension
from fastmcp.utilities.tasks import TASKS_EXTENSION_ID
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolRequestParams
from pydantic import BaseModel, ConfigDict

from redis_tasks._models import RequestContext
from redis_tasks._origin import TaskOrigin
from redis_tasks._redis.manager import RedisTaskManager
from redis_tasks.mcp import TasksExtension as SdkTasksExtension
from redis_tasks.mcp import TaskSupport
from redis_tasks.mcp._hooks import PlanFactory, TenantFactory, WeightFactory
from redis_tasks.mcp._wire import CAPACITY_EXCEEDED

from ._fastmcp import is_client_call, leaf_tool, require_fastmcp, sdk_context, valid_arguments
from ._handle_guard import HandleGuard, created_mark, forget_since, note_created
from ._key_check import record_server_key
from ._snapshot import CallerSnapshot, SnapshotKey, warn_without_key

if TYPE_CHECKING:
    from fastmcp.server.context import Context
    from fastmcp.server.extensions import ToolCallContinuation, ToolCallOutcome
    from mcp.server.context import ServerRequestContext

    from redis_tasks.mcp import Authorizer

__all__ = ["ACCEPT_UNBOUND_ENV", "PREFIX_ENV", "SNAPSHOT_KEY_ENV", "TasksExtension"]

#: Where servers and workers find the snapshot key when none is given.
SNAPSHOT_KEY_ENV = "REDIS_TASKS_SNAPSHOT_KEY"
#: ``1``: workers also take callers kept before a key was set (see ``accept_unbound``).
ACCEPT_UNBOUND_ENV = "REDIS_TASKS_ACCEPT_UNBOUND_SNAPSHOTS"
#: Where the key prefix is read from when none is given (else ``rt``).
PREFIX_ENV = "REDIS_TASKS_PREFIX"
#: The codes of a create refused before anything was stored (bad input, no room).
_STORED_NOTHING = frozenset({INVALID_PARAMS, CAPACITY_EXCEEDED})


class _WireResult(BaseModel):
    """A result the SDK extension built as JSON, handed to FastMCP as the model it expects."""

    model_config = ConfigDict(extra="allow")


class TasksExtension(ServerExtension):
    """Durable, multi-node tasks for a FastMCP server: ``mcp.add_extension(TasksExtension(url))``.

    ``url`` is the Redis (any node of a cluster; default ``$REDIS_URL``), with the
    manager's ``prefix`` (default ``$REDIS_TASKS_PREFIX``, else ``rt``), ``partitions``,
    ``timeout`` and ``wait_replicas``; or give a ``manager`` you made. With neither
    argument, ``TasksExtension()`` is configured by the environment alone, as
    fastmcp-tasks' is. Tools declared ``task=TaskConfig(mode="required")`` always
    run as tasks (a client that did not declare the extension gets ``-32021``);
    ``"optional"`` ones when the client declared it, inline otherwise. The tool's
    ``poll_interval`` is the task's; ``ttl`` applies to every task (default: the
    manager's). Run the tools with ``redis-tasks worker --fastmcp app.py:mcp``.

    Who may see a task is the SDK extension's ``authorizer`` (default: the endpoint and
    FastMCP's authenticated principal, so another principal's ``tasks/get`` is "not
    found"); ``tenant``, ``weight`` and ``plan`` are its hooks too (default tenant: that
    binding). ``input_first`` names ``required`` tools that gather input inline before
    the rest becomes a task (:func:`redis_tasks.mcp.run_as_task`). The caller's access
    token and headers go with the task for the worker, sealed with ``snapshot_key``
    (default ``$REDIS_TASKS_SNAPSHOT_KEY``; without one they are kept in clear) and
    bound to the task and its caller; under a key its workers refuse a caller that is
    not (``accept_unbound_snapshots``, default ``$REDIS_TASKS_ACCEPT_UNBOUND_SNAPSHOTS``
    or off: take those kept before the key was set, while the tasks made before it
    last; see :mod:`redis_tasks.fastmcp._snapshot`). The app's middleware runs once a
    call, in the server, around the task's creation (the result it sees there is the
    task handle), and a task whose handle it loses (raising after the task was stored,
    or answering something else) is cancelled; workers run the tool without it unless
    ``worker_middleware=True``.
    Raises :class:`~redis_tasks.fastmcp.FastMCPMismatchError` on a FastMCP this was
    not written for.
    """

    identifier = TASKS_EXTENSION_ID

    def __init__(
        self,
        url: str | None = None,
        *,
        prefix: str | None = None,
        partitions: int = 16,
        timeout: float = 5.0,
        wait_replicas: int | Literal["auto"] = "auto",
        manager: RedisTaskManager | None = None,
        authorizer: Authorizer | None = None,
        tenant: TenantFactory | None = None,
        weight: int | WeightFactory | None = None,
        plan: PlanFactory | None = None,
        ttl: timedelta | None = None,
        input_first: Iterable[str] = (),
        input_first_timeout: timedelta = timedelta(seconds=10),
        snapshot_key: str | bytes | SnapshotKey | None = None,
        accept_unbound_snapshots: bool | None = None,
        worker_middleware: bool = False,
    ) -> None:
        require_fastmcp()
        super().__init__()
        prefix = prefix or os.environ.get(PREFIX_ENV) or "rt"
        if manager is None:
            url = url or os.environ.get("REDIS_URL")
            if not url:
                raise ValueError("TasksExtension needs a Redis: url=... or $REDIS_URL")
            manager = RedisTaskManager.from_url(
                url, prefix=prefix, partitions=partitions, timeout=timeout,
                wait_replicas=wait_replicas,
            )  # fmt: skip
        elif url is not None:
            raise ValueError("give TasksExtension a url or a manager, not both")
        self._url = url
        self._settings = (prefix, partitions, timeout)
        self._input_first = frozenset(map(str, input_first))
        if snapshot_key is None:
            snapshot_key = os.environ.get(SNAPSHOT_KEY_ENV) or None
        self._key = (
            snapshot_key
            if snapshot_key is None or isinstance(snapshot_key, SnapshotKey)
            else SnapshotKey(snapshot_key)
        )
        if accept_unbound_snapshots is None:
            accept_unbound_snapshots = os.environ.get(ACCEPT_UNBOUND_ENV, "") == "1"
        self._accept_unbound = bool(accept_unbound_snapshots)
        self._worker_middleware = worker_middleware
        # Set in a worker's process (worker_mode): the app's lifespan there is no server's.
        self._in_worker = False
        self._tasks = SdkTasksExtension(
            manager,
            authorizer=authorizer,
            payload=self._snapshot,
            tenant=tenant,
            weight=weight,
            plan=plan,
            ttl=ttl,
            input_first_timeout=input_first_timeout,
        )
        self._manager = manager

    @property
    def manager(self) -> RedisTaskManager:
        """The task manager every request goes to (a worker of the app uses its settings)."""
        return self._manager

    @property
    def url(self) -> str | None:
        """The Redis URL given (or read from ``$REDIS_URL``); ``None`` for a given manager."""
        return self._url

    @property
    def manager_settings(self) -> tuple[str, int, float] | None:
        """The ``prefix``, ``partitions`` and ``timeout`` the manager was made with from
        ``url`` (what ``redis-tasks worker --fastmcp`` serves); ``None`` for a given one."""
        return self._settings if self._url is not None else None

    @property
    def snapshot_key(self) -> SnapshotKey | None:
        """The key callers' snapshots are sealed with, if any."""
        return self._key

    def worker_mode(self) -> None:
        """Mark this extension as a worker's (``redis-tasks worker --fastmcp`` does): its
        lifespan then neither records the servers' snapshot key nor warns as a server;
        the worker checks its key against the servers' instead."""
        self._in_worker = True

    @property
    def worker_middleware(self) -> bool:
        """Whether workers run the app's middleware around each run too (default: no, it
        runs once a call, in the server, around the task's creation)."""
        return self._worker_middleware

    @property
    def accept_unbound_snapshots(self) -> bool:
        """Whether its workers also take callers not sealed for their task (the move to a key)."""
        return self._accept_unbound

    def methods(self) -> list[MethodBinding]:
        """``tasks/get``, ``tasks/update`` and ``tasks/cancel``: the SDK extension's own."""
        return [
            MethodBinding(b.method, b.params_type, b.handler, b.protocol_versions)
            for b in self._tasks.methods()
        ]

    def lifespan(self) -> AbstractAsyncContextManager[None]:
        """Enter the manager for as long as the server runs."""
        return self._running()

    @asynccontextmanager
    async def _running(self) -> AsyncIterator[None]:
        serving = not self._in_worker
        if serving and self._key is None:
            warn_without_key("this server")
        async with self._manager:
            if serving:
                await record_server_key(self._manager, self._key)
                self._guard_handles()
            yield

    def _guard_handles(self) -> None:
        """Put the handle guard outermost in the app's middleware, once."""
        try:
            middleware = self.server.middleware
        except RuntimeError:
            return  # entered on its own, registered on no server: no call to guard
        if not any(isinstance(m, HandleGuard) for m in middleware):
            # Outermost, so it sees whatever the app's middleware answers.
            middleware.insert(0, HandleGuard(self._manager))

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        context: Context,
        call_next: ToolCallContinuation,
    ) -> ToolCallOutcome:
        """Create a task for a task tool the client called; pass every other call through.

        A call a tool makes to another (``ctx.fastmcp.call_tool``), and every call in a
        worker, runs inline: only the client's own ``tools/call`` can take a task handle.
        """
        request = sdk_context(context)
        if request is None or not is_client_call():
            return await call_next()
        tool = await context.fastmcp.get_tool(params.name)
        config = getattr(tool, "task_config", None)
        mode = getattr(config, "mode", "forbidden")
        if tool is None or mode not in ("optional", "required"):
            return await call_next()

        async def inline(_: ServerRequestContext[Any, Any]) -> Any:
            return await call_next()

        arguments = params.arguments or {}
        # A mounted server's tool is checked against its own signature.
        runs = await leaf_tool(tool)
        mark = created_mark()
        try:
            result = await self._tasks.serve_tool_call(
                params,
                request,
                cast("Callable[[ServerRequestContext[Any, Any]], Awaitable[Any]]", inline),
                support=TaskSupport(mode),
                valid=lambda: valid_arguments(runs, arguments),
                input_first=params.name in self._input_first,
                poll_interval=getattr(config, "poll_interval", None),
            )
        except MCPError as refused:
            if refused.error.code in _STORED_NOTHING:
                forget_since(mark)
            raise
        return (
            _WireResult(**result) if isinstance(result, dict) else cast("ToolCallOutcome", result)
        )

    def _snapshot(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any]
    ) -> Callable[[str, RequestContext, TaskOrigin], bytes]:
        """The caller of this request, as the task's payload (see :mod:`._snapshot`):
        sealed, when a key is set, for the task the manager is about to make."""
        token, headers = get_access_token(), get_http_headers(include_all=True)
        key = self._key

        def payload(task_id: str, caller: RequestContext, origin: TaskOrigin) -> bytes:
            note_created(caller, task_id)  # the handle guard cancels it if its handle is lost
            return CallerSnapshot(token, headers, caller).encode(key, task_id, origin)

        return payload

    def __repr__(self) -> str:
        return f"TasksExtension(prefix={self._manager.prefix!r})"
