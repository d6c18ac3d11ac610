"""``tool_handler``: run a FastMCP app's task tools inside a redis-tasks worker.

The tool runs through ``FastMCP.call_tool``, as an inline call would (argument
validation, timeouts, error masking and result conversion), in a request whose session
is the task itself, built as :mod:`redis_tasks.mcp`'s worker
builds it for the SDK (:class:`redis_tasks.mcp._tool_runner._TaskChannel`). So inside
the tool, ``Context`` works as a FastMCP user expects:

- ``ctx.report_progress(...)`` and ``ctx.info(...)`` (every log level) set the task's
  status message, what ``tasks/get`` shows;
- ``ctx.elicit(...)`` is an input round: the task turns ``input_required``, the
  client answers with ``tasks/update``, and the call returns the answer. Keys are
  numbered in the order the tool asks, so a tool re-run after a worker crash asks the
  same questions under the same keys and gets the recorded answers at once;
- the guard pattern fastmcp-tasks asks for works too: a tool that returns an
  ``InputRequiredResult`` gets the answers in ``ctx.input_responses`` (and its
  ``ctx.request_state``) when it runs again;
- ``get_access_token()`` and ``get_http_headers()`` return the caller's, restored from
  the snapshot kept with the task (:mod:`._snapshot`);
- a ``tasks/cancel`` cancels the running tool (it sees ``CancelledError``).

The app's middleware ran once for the call, in the server, around the task's creation
(where it can refuse the call before a task exists, and counts one call): the run here
skips it, as fastmcp-tasks' worker does, unless the extension says
``worker_middleware=True`` (middleware that sets up what the tool reads, at the price of
running twice a call). A mounted server's own middleware runs with its tool, here.

Outcomes follow FastMCP's inline answers and SEP-2663: a ``CallToolResult`` completes
the task, ``isError`` included (a ``ToolError``, arguments that fail validation, or any
other exception, with the text FastMCP gives it inline, masked where the app masks
error details); an ``MCPError`` the tool raises fails it with that JSON-RPC error (a
protocol-level error, as on fastmcp-tasks); a tool the app no longer has fails it with
``-32602`` naming the tool, never a retry.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from fastmcp import FastMCP
from fastmcp.exceptions import FastMCPError, NotFoundError
from fastmcp.tools.base import InputRequiredToolResult, ToolResult
from mcp.server.connection import Connection
from mcp.server.context import ServerRequestContext
from mcp.server.session import ServerSession
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from redis_tasks._errors import ValidationError
from redis_tasks._execution import Handler, TaskExecution, TaskFailed
from redis_tasks._ids import task_ref
from redis_tasks._models import JsonRpcError
from redis_tasks.mcp._escalate import _PHASE
from redis_tasks.mcp._tool_call import ToolCall
from redis_tasks.mcp._tool_runner import (
    MAX_INPUT_ROUNDS,
    _capabilities,
    _round_requests,
    _TaskChannel,
    error_result,
    progress_text,
    run_cancellable,
)

from ._fastmcp import require_fastmcp, worker_request
from ._snapshot import CallerSnapshot, SnapshotError, SnapshotKey

__all__ = ["tool_handler"]

logger = logging.getLogger("redis_tasks.fastmcp")

#: The longest status message a log line or progress report sets (the rest is cut).
_STATUS_CHARS = 1_000


class _FastMCPChannel(_TaskChannel):
    """The SDK task channel, whose progress and log notifications set the status message."""

    async def notify(
        self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None
    ) -> None:
        params = params or {}
        message: str | None = None
        if method == "notifications/progress":
            own = params.get("message")
            message = progress_text(
                params["progress"],
                params.get("total"),
                own if isinstance(own, str) else None,
            )
        elif method == "notifications/message":
            data = params.get("data")
            text = data.get("msg") if isinstance(data, Mapping) else data
            message = text if isinstance(text, str) else None
        if message is not None:
            await self._execution.report(message[:_STATUS_CHARS])


def _result(result: ToolResult) -> dict[str, Any]:
    """The ``CallToolResult`` FastMCP would answer inline for ``result``."""
    shaped = result.to_mcp_result()
    if isinstance(shaped, CallToolResult):
        call = shaped
    elif isinstance(shaped, tuple):
        call = CallToolResult(content=shaped[0], structured_content=shaped[1])
    else:
        call = CallToolResult(content=shaped)
    return call.model_dump(by_alias=True, mode="json", exclude_none=True)


class _ToolRun:
    """One execution of one task tool, in a request whose session is the task."""

    def __init__(
        self, app: FastMCP, execution: TaskExecution, snapshot: CallerSnapshot, middleware: bool
    ) -> None:
        self._app = app
        self._middleware = middleware
        self._call = ToolCall.from_origin(execution.origin)
        self._snapshot = snapshot
        self._task_id = execution.task_id
        self.channel = _FastMCPChannel(execution)
        connection = Connection(self.channel, protocol_version=LATEST_HANDSHAKE_VERSION)
        connection.client_capabilities = _capabilities(self._call.client_capabilities)
        connection.initialized.set()
        self._connection = connection

    def _request(self, responses: Any, state: str | None) -> ServerRequestContext[Any, Any]:
        # The handshake-era version sends server-to-client requests (ctx.elicit)
        # through the channel, which makes them input rounds; the progress token
        # makes ctx.report_progress a notification the channel turns into status.
        params: dict[str, Any] = {"name": self._call.tool, "arguments": dict(self._call.arguments)}
        if responses is not None:
            params["inputResponses"] = responses
        if state is not None:
            params["requestState"] = state
        return ServerRequestContext(
            session=ServerSession(self.channel, self._connection),
            lifespan_context={},
            protocol_version=LATEST_HANDSHAKE_VERSION,
            method="tools/call",
            params=params,
            request_id=self._task_id,
            meta={"progress_token": self._task_id},
        )

    async def run(self) -> dict[str, Any]:
        responses: Any = self._call.input_responses
        state = self._call.request_state
        _PHASE.set("task")  # run_as_task() returns here (this task's own context)
        for _ in range(MAX_INPUT_ROUNDS):
            request = self._request(responses, state)
            try:
                with worker_request(
                    request, token=self._snapshot.token, headers=self._snapshot.headers
                ):
                    result = await self._app.call_tool(
                        self._call.tool,
                        dict(self._call.arguments),
                        run_middleware=self._middleware,
                    )
            except NotFoundError:
                raise TaskFailed(
                    JsonRpcError(code=-32602, message=f"Unknown tool: {self._call.tool!r}")
                ) from None
            except FastMCPError as exc:
                cause = exc.__cause__
                if isinstance(cause, MCPError):
                    # FastMCP masks it as a tool error inline; a task fails with it
                    # (SEP-2663: a protocol-level error is "failed"), as on fastmcp-tasks.
                    error = cause.error
                    raise TaskFailed(
                        JsonRpcError(code=error.code, message=error.message, data=error.data)
                    ) from None
                # A ToolError, a crash FastMCP masks, or failed validation: what
                # FastMCP answers inline.
                return error_result(str(exc))
            if not isinstance(result, InputRequiredToolResult):
                return _result(result)
            asked = result.input_required
            answers = await self.channel.ask_round(_round_requests(asked))
            responses, state = answers or None, asked.request_state
        raise RuntimeError(f"the tool asked for input more than {MAX_INPUT_ROUNDS} times")


def tool_handler(
    app: FastMCP,
    *,
    snapshot_key: SnapshotKey | None = None,
    accept_unbound: bool = False,
    middleware: bool = False,
) -> Handler:
    """A :class:`~redis_tasks.Worker` handler that runs ``app``'s task tools.

    Give it the app the servers serve (its ``TasksExtension`` made the tasks);
    ``snapshot_key`` is the servers' (:class:`SnapshotKey`), ``accept_unbound`` their
    migration switch (see :mod:`._snapshot`), ``middleware`` whether the app's middleware
    runs around each run too (their ``worker_middleware``). ``redis-tasks worker
    --fastmcp app.py:mcp`` builds it for you from the app's extension, with the app's
    lifespan entered.

    A task whose caller cannot be restored, or whose sealed caller is not the one its
    record is bound to, fails (``-32603``) and never runs as anyone: the log line names
    the task by reference and the reason (``missing_key``, ``wrong_key``, ``not_bound``,
    ``unbound``, ``unreadable``), never the content.
    """
    require_fastmcp()

    async def run_tool(execution: TaskExecution) -> dict[str, Any]:
        try:
            snapshot = CallerSnapshot.decode(
                execution.payload,
                snapshot_key,
                execution.task_id,
                execution.origin,
                accept_unbound=accept_unbound,
            )
            if (
                snapshot_key is not None
                and snapshot.caller is not None
                and not await execution.bound_to(snapshot.caller)
            ):
                raise SnapshotError(
                    "the task is not bound to the caller its snapshot names", "not_bound"
                )
            run = _ToolRun(app, execution, snapshot, middleware)
        except (ValidationError, SnapshotError) as exc:
            # Never run as nobody, nor as someone else: the task fails.
            reason = exc.reason if isinstance(exc, SnapshotError) else "unreadable"
            logger.error(
                "task cannot run: its caller snapshot is refused (%s)",
                reason,
                extra={
                    "event": "task_unreadable",
                    "task": task_ref(execution.task_id),
                    "reason": reason,
                },
            )
            raise TaskFailed(JsonRpcError(code=-32603, message="Internal error")) from exc
        return await run_cancellable(execution, run.run(), run.channel.cancel_requested.set)

    return run_tool
