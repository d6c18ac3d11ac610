"""``TasksExtension``: the ``io.modelcontextprotocol/tasks`` extension for ``MCPServer``.

Serves ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` from a task manager and
turns calls of the application's task-enabled tools into durable tasks run by a
worker fleet. Every server process can answer for every task: all state is in the
manager. ``tasks/result`` and ``tasks/list`` are not served (``-32601``), as
SEP-2663 requires.

Error boundary: every manager call goes through :func:`._boundary.guard`, the one
place the manager's exceptions become JSON-RPC errors; the application's hooks
(authorizer, tenant, weight, plan, payload) are called through :mod:`._hooks`.

Traces: the SDK's ``OpenTelemetryMiddleware`` makes a SERVER span for every
request (on the fast path too, which runs the SDK's middleware); the handlers
here add the task's reference (``11.Wt0jM9``, never the whole ID unless the
manager's ``whole_task_ids`` says so) and status to it, and ``create_task`` makes
its PRODUCER span beneath it (:mod:`redis_tasks._telemetry.traces`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp_types import CallToolRequestParams
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from redis_tasks._ids import task_ref
from redis_tasks._limits import Limits
from redis_tasks._manager import TaskManager
from redis_tasks._models import RequestContext, TaskRequestContext, TaskUpdateContext
from redis_tasks._plans import TenantPlan
from redis_tasks._telemetry.traces import TRACES

from ._auth import Authorizer, PrincipalAuthorizer
from ._boundary import guard
from ._escalate import run_inline
from ._fast_path import install_fast_path
from ._hooks import (
    PayloadFactory,
    PlanFactory,
    TenantFactory,
    WeightFactory,
    authorize,
    check_weight,
    payload_of,
    tenant_of,
)
from ._sdk import find_tool, require_tool_lookup
from ._subscriptions import TaskSubscriptions
from ._tool_call import TaskSupport, ToolCall
from ._wire import (
    EXTENSION_ID,
    CancelTaskParams,
    GetTaskParams,
    UpdateTaskParams,
    created_result,
    declares_extension,
    get_result,
    internal_error,
    missing_capability,
    name_header_mismatch,
    task_not_found,
)

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from starlette.applications import Starlette

__all__ = [
    "PayloadFactory",
    "PlanFactory",
    "TaskSupport",
    "TasksExtension",
    "TenantFactory",
    "WeightFactory",
]

logger = logging.getLogger("redis_tasks.mcp")


class TasksExtension(Extension):
    """Durable, multi-node MCP tasks (SEP-2663) for an ``MCPServer``, on a task manager.

    ``tools`` names the task-enabled tools (a mapping gives each a
    :class:`TaskSupport`, a plain iterable makes them all ``OPTIONAL``). A
    ``tools/call`` of one of them from a client that declared the extension
    creates a task (origin: the tool name, the validated arguments, the endpoint
    and the client's capabilities; payload: ``payload(params, ctx)``), enqueued
    for the workers, and answers ``CreateTaskResult`` once the task is durable.
    Run the tools in workers with :func:`~redis_tasks.mcp.tool_handler`.

    Pass ``lifespan=tasks.lifespan`` to ``MCPServer``: it enters the manager, binds
    the extension to the server (to validate arguments before a task is created)
    and runs the ``notifications/tasks`` fan-out. ``authorizer`` decides the
    binding of each request (default :class:`PrincipalAuthorizer`); ``ttl`` and
    ``poll_interval`` apply to every created task (default: the manager's).

    Tenants: each task counts, for fair dispatch and its tenant's limits, against
    ``tenant(params, ctx)`` (an organisation; ``None``, or no ``tenant``, keeps the
    default: the task's binding), on the plan ``plan(params, ctx)`` gives
    (:class:`~redis_tasks.TenantPlan`; ``None``, or no ``plan``: the manager's
    ``plans`` policy, else its default plan), with ``weight`` (an ``int``, or
    ``weight(params, ctx)`` per call; ``None``: the plan's). A hook that raises
    gives ``-32603`` (an ``MCPError`` it raises goes to the client as it is), as the
    authorizer does. A call refused by the tenant's quota or create rate, or by a
    full Redis, gets ``-32003`` ``"Task capacity exceeded"`` with ``data.reason``
    (``"quota"``, ``"rate"`` or ``"full"``) and, where known, ``data.retryAfterMs``.
    """

    identifier = EXTENSION_ID

    def __init__(
        self,
        manager: TaskManager,
        *,
        tools: Mapping[str, TaskSupport] | Iterable[str] = (),
        authorizer: Authorizer | None = None,
        payload: PayloadFactory | None = None,
        tenant: TenantFactory | None = None,
        weight: int | WeightFactory | None = None,
        plan: PlanFactory | None = None,
        ttl: timedelta | None = None,
        poll_interval: timedelta | None = None,
        input_first: Iterable[str] = (),
        input_first_timeout: timedelta = timedelta(seconds=10),
    ) -> None:
        if isinstance(tools, Mapping):
            self._tools = {str(name): TaskSupport(mode) for name, mode in tools.items()}
        else:
            self._tools = dict.fromkeys(map(str, tools), TaskSupport.OPTIONAL)
        self._input_first = frozenset(map(str, input_first))
        if any(self._tools.get(name) is not TaskSupport.REQUIRED for name in self._input_first):
            raise ValueError("input_first names tools registered TaskSupport.REQUIRED")
        if input_first_timeout <= timedelta(0):
            raise ValueError("input_first_timeout must be positive")
        self._input_first_timeout = input_first_timeout.total_seconds()
        self._manager = manager
        self._authorizer: Authorizer = authorizer or PrincipalAuthorizer()
        self._payload = payload
        self._ttl = ttl
        self._poll_interval = poll_interval
        limits = getattr(manager, "limits", None)
        self._limits = limits if isinstance(limits, Limits) else Limits()
        # A manager of another kind names tasks by their reference, the safe choice.
        self._whole_task_ids = getattr(manager, "whole_task_ids", False) is True
        check_weight(weight, self._limits)
        self._tenant = tenant
        self._weight = weight
        self._plan = plan
        self._server: MCPServer[Any] | None = None
        self._subscriptions = TaskSubscriptions(manager, self._authorize)

    @property
    def manager(self) -> TaskManager:
        """The task manager every request goes to."""
        return self._manager

    @property
    def subscriptions(self) -> TaskSubscriptions:
        """The ``notifications/tasks`` fan-out (pass it as ``MCPServer(subscriptions=...)``)."""
        return self._subscriptions

    def task_support(self, tool: str) -> TaskSupport | None:
        """How ``tool`` takes part in tasks, or ``None`` when it always runs inline."""
        return self._tools.get(tool)

    def bind(self, server: MCPServer[Any]) -> None:
        """Serve ``server`` (``lifespan`` does this for you).

        Validates task-enabled calls with ``server``'s tools and installs the
        ``subscriptions/listen`` middleware for ``taskIds`` on it. Raises
        ``SdkMismatchError`` when the SDK's private tool lookup changed (the
        validation needs it): at startup, not on each task-enabled call.
        """
        require_tool_lookup(server)
        self._server = server
        if self._subscriptions not in server.middleware:
            server.middleware.append(self._subscriptions)

    def asgi(self, app: Starlette) -> Starlette:
        """Put the tasks fast path in front of ``app``'s MCP endpoint; return ``app``.

        ``app`` is what ``server.streamable_http_app()`` returned. Its endpoint
        then answers 2026-era ``tasks/get``, ``tasks/update`` and ``tasks/cancel``
        POSTs, and ``tools/call`` of the tools registered ``REQUIRED`` (each
        answered with a new task), without the SDK's per-request transport
        machinery, byte for byte as the SDK would (its authentication, checks,
        middleware and handlers still run); every other request reaches the SDK
        unchanged. Installing it twice is harmless. Raises ``ValueError`` if
        ``app`` has no streamable HTTP endpoint, and a ``RuntimeError``
        (``SdkMismatchError``, naming the SDK's version and what changed) if the
        installed SDK is not one the fast path was written for or a part of it
        the fast path uses changed: it never falls back silently.
        """
        install_fast_path(app, self._always_a_task)
        return app

    def _always_a_task(self, tool: str) -> bool:
        # Only these calls never run the tool in the server: their reply is a
        # CreateTaskResult or an error, with nothing sent to the client meanwhile.
        return self._tools.get(tool) is TaskSupport.REQUIRED

    @asynccontextmanager
    async def lifespan(self, server: MCPServer[Any]) -> AsyncIterator[dict[str, Any]]:
        """An ``MCPServer`` lifespan: binds, enters the manager, runs the fan-out."""
        self.bind(server)
        async with self._manager, self._subscriptions.running():
            yield {}

    # -- extension contributions ---------------------------------------------------

    def methods(self) -> list[MethodBinding]:
        """``tasks/get``, ``tasks/update`` and ``tasks/cancel``, on 2026-era versions only."""
        versions = frozenset(MODERN_PROTOCOL_VERSIONS)
        return [
            MethodBinding("tasks/get", GetTaskParams, self._get, versions),
            MethodBinding("tasks/update", UpdateTaskParams, self._update, versions),
            MethodBinding("tasks/cancel", CancelTaskParams, self._cancel, versions),
        ]

    async def intercept_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
    ) -> HandlerResult:
        """Create a task for a task-enabled tool; pass every other call through."""
        name = params.name
        return await self.serve_tool_call(
            params,
            ctx,
            call_next,
            support=self._tools.get(name),
            valid=lambda: self._valid_arguments(name, params.arguments or {}),
            input_first=name in self._input_first,
        )

    async def serve_tool_call(
        self,
        params: CallToolRequestParams,
        ctx: ServerRequestContext[Any, Any],
        call_next: CallNext,
        *,
        support: TaskSupport | None,
        valid: Callable[[], bool],
        input_first: bool = False,
        poll_interval: timedelta | None = None,
    ) -> HandlerResult:
        """The task path of one ``tools/call``, for a framework that finds its tools its own
        way (:mod:`redis_tasks.fastmcp`): ``support`` is the tool's, ``valid()`` whether
        the arguments would pass the tool's own validation (``False``: the call runs
        inline, where it fails as the framework fails it), ``input_first`` whether it
        gathers input inline first (:func:`run_as_task`), ``poll_interval`` the tool's
        own (``None``: the extension's).
        """
        if support is None:
            return await call_next(ctx)
        if not declares_extension(ctx):
            if support is TaskSupport.REQUIRED:
                raise missing_capability()
            return await call_next(ctx)
        if not valid():
            # The inline path reports the failure exactly as the SDK does, and
            # never reaches the tool body because validation fails there too.
            return await call_next(ctx)
        arguments = params.arguments or {}
        request = self._authorize(ctx)
        gathered: dict[str, Any] | None = None
        if input_first:
            inline = await run_inline(ctx, call_next, self._input_first_timeout)
            if inline is not None:
                return inline  # an input round, or the tool's own answer
            gathered = {
                key: answer.model_dump(by_alias=True, mode="json", exclude_none=True)
                for key, answer in (params.input_responses or {}).items()
            }
        capabilities = ctx.session.client_capabilities
        call = ToolCall(
            tool=params.name,
            arguments=arguments,
            endpoint=request.endpoint,
            client_capabilities=(
                capabilities.model_dump(by_alias=True, mode="json", exclude_none=True)
                if capabilities is not None
                else None
            ),
            input_responses=gathered,
            request_state=params.request_state if gathered is not None else None,
        )
        origin = call.to_origin(self._limits)
        payload = payload_of(self._payload, params, ctx, request, origin)
        tenant, weight, plan = self._tenant_of(params, ctx)
        task = await guard(
            lambda: self._manager.create_task(
                request,
                origin,
                payload=payload,
                ttl=self._ttl,
                poll_interval=poll_interval or self._poll_interval,
                tenant=tenant,
                weight=weight,
                plan=plan,
            ),
            # A tenant key, weight or plan out of Limits lands here too: like
            # oversized arguments, a refusal of this call that retrying will not change.
            refused="Tool arguments exceed the task limits",
        )
        # The SDK's span of this tools/call names the task it created.
        self._mark(task.task_id, task.status.value)
        return created_result(task)

    # -- tasks/* --------------------------------------------------------------------

    async def _get(
        self, ctx: ServerRequestContext[Any, Any], params: GetTaskParams
    ) -> dict[str, Any]:
        request = self._admit(ctx, params.task_id)
        task = await guard(
            lambda: self._manager.find_task(TaskRequestContext(request, params.task_id))
        )
        if task is None:
            raise task_not_found()
        # Named once the task is found: a request for a task it may not see
        # leaves no trace of the ID it asked for.
        self._mark(task.task_id, task.status.value)
        return get_result(task)

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> dict[str, Any]:
        request = self._admit(ctx, params.task_id)
        update = TaskUpdateContext(request, params.task_id, params.input_responses)
        await guard(lambda: self._manager.update_task(update), refused="Input responses refused")
        self._mark(params.task_id, None)
        return {"resultType": "complete"}

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: CancelTaskParams
    ) -> dict[str, Any]:
        request = self._admit(ctx, params.task_id)
        await guard(
            lambda: self._manager.request_cancellation(TaskRequestContext(request, params.task_id))
        )
        self._mark(params.task_id, None)
        return {"resultType": "complete"}

    # -- helpers ----------------------------------------------------------------------

    def _mark(self, task_id: str, status: str | None) -> None:
        """Name the task (its reference) and ``status`` on the request's span."""
        TRACES.mark_request(task_ref(task_id, whole=self._whole_task_ids), status)

    def _admit(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> RequestContext:
        """Run every request-level check of ``tasks/*``; return the binding to check the task by.

        The one place such checks live: the SDK's path and the fast path both
        reach it (the fast path runs the SDK's own dispatch), so a check added
        here (a request header against ``task_id``, say) holds on both, with
        the same error and the same HTTP status. The routing header goes first, as
        the SDK's own header checks come before the others: a request that
        disagrees with itself is told so.
        """
        mismatch = name_header_mismatch(ctx, task_id)
        if mismatch is not None:
            raise mismatch
        if not declares_extension(ctx):
            raise missing_capability()
        return self._authorize(ctx)

    def _authorize(self, ctx: ServerRequestContext[Any, Any]) -> RequestContext:
        return authorize(self._authorizer, ctx)

    def _tenant_of(
        self, params: CallToolRequestParams, ctx: ServerRequestContext[Any, Any]
    ) -> tuple[str | None, int | None, TenantPlan | None]:
        """The tenant, weight and plan the application's hooks give this call (a
        hook's failure is the server's: see :mod:`._hooks`)."""
        return tenant_of(self._tenant, self._weight, self._plan, params, ctx)

    def _valid_arguments(self, name: str, arguments: dict[str, Any]) -> bool:
        if self._server is None:
            logger.error("TasksExtension is not bound: pass lifespan=tasks.lifespan to MCPServer")
            raise internal_error()
        tool = find_tool(self._server, name)
        if tool is None:
            return False
        try:
            tool.fn_metadata.validate_arguments(arguments)
        except Exception:
            return False
        return True

    def __repr__(self) -> str:
        return f"TasksExtension(tools={sorted(self._tools)!r})"
