"""``tool_handler``: run a task-enabled MCP tool inside a worker, as the client called it.

The worker has no connection to the client, so the tool gets a session whose
back-channel is the task itself: an ``elicitation/create``,
``sampling/createMessage`` or ``roots/list`` request the tool sends (through
``ctx.elicit``, ``ctx.session.create_message``, ``ctx.session.list_roots`` or a
``Resolve`` dependency) becomes an ``input_required`` round, answered by the client
through ``tasks/update``. A tool that returns an ``InputRequiredResult`` itself
(the multi-round-trip style) gets the same treatment, and is called again with the
answers. Progress reports become the task's status message.

Request keys are numbered in the order the tool asks (``elicit-1``,
``sample-2``, ...), so a tool re-run after a crash asks the same questions under
the same keys and gets the recorded answers back at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any, Final

import anyio
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.session import ServerSession
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    METHOD_NOT_FOUND,
    CallToolResult,
    ClientCapabilities,
    InputRequiredResult,
    InputResponseRequestParams,
    TextContent,
)
from mcp_types.version import LATEST_HANDSHAKE_VERSION
from pydantic import ValidationError as PydanticValidationError

from redis_tasks._errors import ValidationError
from redis_tasks._execution import Handler, TaskExecution, TaskFailed, TaskParked
from redis_tasks._models import INPUT_METHODS, InputRequest, JsonRpcError

from ._escalate import _PHASE
from ._tool_call import ToolCall

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

__all__ = ["error_result", "progress_text", "run_cancellable", "tool_handler"]

#: How a request key names its method.
_KEY_STEMS: Final[dict[str, str]] = {
    "elicitation/create": "elicit",
    "sampling/createMessage": "sample",
    "roots/list": "roots",
}

#: A tool returning ``InputRequiredResult`` this many times in one run is looping.
MAX_INPUT_ROUNDS: Final = 64


class _TaskChannel:
    """The back-channel of a tool run by a worker: its requests become input rounds.

    Satisfies the SDK's ``DispatchContext`` and ``Outbound`` protocols, so the
    SDK's own session helpers (elicit, create_message, list_roots) work unchanged.

    Requests the tool has in flight at once (``asyncio.gather`` of two
    ``ctx.elicit``) are one round: every unanswered one is outstanding together,
    and each is answered as its own answer arrives, so a client may answer some
    keys now and the rest later. One pump task keeps the round in step.
    """

    def __init__(self, execution: TaskExecution) -> None:
        self._execution = execution
        self._asked = 0
        self._cancel = anyio.Event()
        self._transport = TransportContext(kind="redis-tasks", can_send_request=True)
        # The requests in flight, and who waits for each answer.
        self._waiting: dict[str, InputRequest] = {}
        self._answers: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._pump: asyncio.Task[None] | None = None

    @property
    def transport(self) -> TransportContext:
        return self._transport

    @property
    def can_send_request(self) -> bool:
        return True

    @property
    def request_id(self) -> str:
        return self._execution.task_id

    @property
    def message_metadata(self) -> None:
        return None

    @property
    def cancel_requested(self) -> anyio.Event:
        return self._cancel

    async def send_raw_request(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> dict[str, Any]:
        if method == "ping":
            return {}
        if method not in INPUT_METHODS:
            raise MCPError(METHOD_NOT_FOUND, f"{method} cannot be sent from a task")
        self._asked += 1
        key = f"{_KEY_STEMS[method]}-{self._asked}"
        request = InputRequest.model_validate({"method": method, "params": dict(params or {})})
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._answers[key] = answer
        self._waiting[key] = request
        if self._pump is None or self._pump.done():
            self._pump = asyncio.ensure_future(self._run_rounds())
        try:
            return await answer
        finally:
            self._waiting.pop(key, None)
            self._answers.pop(key, None)

    async def _run_rounds(self) -> None:
        """Keep every request in flight outstanding until each has its answer."""
        try:
            while self._waiting:
                # Requests made in the same turn (a gather) join this round.
                await asyncio.sleep(0)
                asked = dict(self._waiting)
                answers = await self._execution.answered_so_far(asked)
                for key in asked.keys() & answers.keys():
                    future = self._answers.get(key)
                    if future is not None and not future.done():
                        future.set_result(answers[key])
                    self._waiting.pop(key, None)
                if self._waiting and not asked.keys() & answers.keys():
                    await self._execution.wait_for_input()
        except BaseException as exc:
            # Cancellation requested, a lost lease, Redis down, the task parked: every
            # waiter learns it (a park as itself: it ends the handler the same way).
            parked = isinstance(exc, TaskParked)
            for future in self._answers.values():
                if not future.done():
                    future.set_exception(
                        exc if parked or isinstance(exc, Exception) else asyncio.CancelledError()
                    )
            if not parked and not isinstance(exc, Exception):
                raise

    async def ask_round(self, requests: Mapping[str, InputRequest]) -> dict[str, Any]:
        """One ``InputRequiredResult`` round: every request must be answered. The tool
        returned (it is built to be called again with the answers), so the task parks
        at once rather than after the worker's ``park_after`` (unless the answers are
        recorded already: a re-run replays them)."""
        self._execution.park_now()
        return await self._execution.request_input(requests)

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        # Log and list-changed notifications have no task-side audience (SEP-2663
        # carries none on tasks), so they are dropped, like on a closed stream.
        return None

    async def progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None:
        await self._execution.report(progress_text(progress, total, message))


def _capabilities(declared: Mapping[str, Any] | None) -> ClientCapabilities | None:
    if declared is None:
        return None
    try:
        return ClientCapabilities.model_validate(declared, by_name=False)
    except PydanticValidationError:
        return None


def _round_requests(result: InputRequiredResult) -> dict[str, InputRequest]:
    requests: dict[str, InputRequest] = {}
    for key, request in (result.input_requests or {}).items():
        wire = request.model_dump(by_alias=True, mode="json", exclude_none=True)
        requests[key] = InputRequest.model_validate(
            {"method": wire["method"], "params": wire.get("params") or {}}
        )
    return requests


def progress_text(progress: float, total: float | None, message: str | None) -> str:
    """A progress report as a task's status message: its own message, else ``3/10`` or ``3``."""
    if message is not None:
        return message
    return f"{progress:g}/{total:g}" if total is not None else f"{progress:g}"


def error_result(text: str) -> dict[str, Any]:
    """A completed call with ``isError`` and ``text``: what a server answers inline for an
    anticipated tool failure (SEP-2663 keeps such a task ``completed``)."""
    result = CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


class _ToolRun:
    """One execution of one tool call, with its synthetic request context."""

    def __init__(
        self, server: MCPServer[Any], execution: TaskExecution, lifespan_context: Any
    ) -> None:
        self._server = server
        self._call = ToolCall.from_origin(execution.origin)
        self._channel = _TaskChannel(execution)
        connection = Connection(self._channel, protocol_version=LATEST_HANDSHAKE_VERSION)
        connection.client_capabilities = _capabilities(self._call.client_capabilities)
        connection.initialized.set()
        # The handshake-era version makes the SDK send server-to-client requests
        # through the channel (which turns them into rounds) instead of asking
        # for a multi-round-trip reply only the original HTTP exchange could carry.
        self._request_context: ServerRequestContext[Any, Any] = ServerRequestContext(
            session=ServerSession(self._channel, connection),
            lifespan_context=lifespan_context,
            protocol_version=LATEST_HANDSHAKE_VERSION,
            method="tools/call",
            params={"name": self._call.tool, "arguments": dict(self._call.arguments)},
            request_id=execution.task_id,
        )

    async def run(self) -> dict[str, Any]:
        # The input an input_first tool gathered inline before it became this task.
        params: InputResponseRequestParams | None = None
        if self._call.input_responses is not None:
            params = InputResponseRequestParams.model_validate(
                {
                    "inputResponses": dict(self._call.input_responses) or None,
                    "requestState": self._call.request_state,
                },
                by_name=False,
            )
        _PHASE.set("task")  # run_as_task() returns here (this task's own context)
        for _ in range(MAX_INPUT_ROUNDS):
            context: Context[Any, Any] = Context(
                request_context=self._request_context, mcp_server=self._server, input_params=params
            )
            result = await self._server.call_tool(
                self._call.tool, dict(self._call.arguments), context
            )
            if not isinstance(result, InputRequiredResult):
                return result.model_dump(by_alias=True, mode="json", exclude_none=True)
            answers = await self._channel.ask_round(_round_requests(result))
            params = InputResponseRequestParams.model_validate(
                {"inputResponses": answers or None, "requestState": result.request_state},
                by_name=False,
            )
        raise RuntimeError(f"the tool asked for input more than {MAX_INPUT_ROUNDS} times")

    def cancel_requested(self) -> None:
        self._channel.cancel_requested.set()


def tool_handler(server: MCPServer[Any], *, lifespan_context: Any = None) -> Handler:
    """A :class:`~redis_tasks.Worker` handler that runs ``server``'s tools for tasks.

    Give it the same ``MCPServer`` the HTTP servers serve (import the
    application module in the worker): the task's origin names the tool and
    holds its arguments. Outcomes follow SEP-2663: the tool's ``CallToolResult``
    completes the task (``isError: true`` included, and so does an anticipated
    ``ToolError``); an ``MCPError`` raised by the tool fails it with that JSON-RPC
    error; any other exception fails it with a generic internal error (the worker
    logs where, never what). A cancellation request cancels the running tool.
    ``lifespan_context`` is what tools see as ``ctx.request_context.lifespan_context``.
    """
    lifespan = {} if lifespan_context is None else lifespan_context

    async def run_tool(execution: TaskExecution) -> dict[str, Any]:
        try:
            run = _ToolRun(server, execution, lifespan)
        except ValidationError as exc:
            raise TaskFailed(JsonRpcError(code=-32603, message="Internal error")) from exc
        return await run_cancellable(execution, run.run(), run.cancel_requested)

    return run_tool


async def run_cancellable(
    execution: TaskExecution,
    body: Coroutine[Any, Any, dict[str, Any]],
    cancel_requested: Callable[[], object],
) -> dict[str, Any]:
    """Run a tool's ``body`` for ``execution`` until it ends or the task is cancelled;
    its outcome as the SDK tells it (see :func:`tool_handler`).

    Cancellation is cooperative: ``cancel_requested()`` is called and the body
    cancelled; it may still finish (then its result wins) or swallow the cancellation.
    """
    tool = asyncio.ensure_future(body)
    cancelled = asyncio.ensure_future(execution.cancelled.wait())
    try:
        await asyncio.wait({tool, cancelled}, return_when=asyncio.FIRST_COMPLETED)
        if not tool.done():
            cancel_requested()
            tool.cancel()
        return await _outcome(tool)
    finally:
        cancelled.cancel()
        if not tool.done():
            tool.cancel()


async def _outcome(tool: asyncio.Future[dict[str, Any]]) -> dict[str, Any]:
    try:
        return await tool
    except MCPError as exc:
        raise TaskFailed(
            JsonRpcError(code=exc.error.code, message=exc.error.message, data=exc.error.data)
        ) from exc
    except UnexpectedToolError:
        # A crash: the worker fails the task with a generic internal error and
        # logs only where it happened, never the exception's text.
        raise
    except ToolError as exc:
        return error_result(str(exc))
