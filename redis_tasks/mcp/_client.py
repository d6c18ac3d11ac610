"""The client side of the tasks extension, on the SDK's ``ClientSession``.

:func:`get_task`, :func:`update_task` and :func:`cancel_task` send the three
methods (with the ``Mcp-Name`` header SEP-2663 asks for), and
:class:`TasksClient` is a ``ClientExtension`` that declares the extension and
resolves a ``CreateTaskResult`` into the tool's ``CallToolResult`` by polling,
answering input requests with an application callback. The server side never
needs this module; tests, the demo and Python clients do.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal

import anyio
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict

from ._wire import EXTENSION_ID

__all__ = [
    "CreatedTask",
    "InputAnswerer",
    "TasksClient",
    "cancel_task",
    "get_task",
    "update_task",
]

_TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})


class _TaskParams(RequestParams):
    task_id: str


class _UpdateParams(_TaskParams):
    input_responses: dict[str, Any]


class _GetTask(Request[_TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class _UpdateTask(Request[_UpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class _CancelTask(Request[_TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class _Reply(Result):
    # Any result object, kept whole: the caller gets the wire JSON back.
    model_config = ConfigDict(extra="allow")


async def _send(session: ClientSession, request: Request[Any, Any]) -> dict[str, Any]:
    reply = await session.send_request(request, _Reply)
    return reply.model_dump(by_alias=True, mode="json", exclude_none=True)


async def get_task(session: ClientSession, task_id: str) -> dict[str, Any]:
    """``tasks/get``: the task as the server renders it (raises ``MCPError``)."""
    return await _send(session, _GetTask(params=_TaskParams(task_id=task_id)))


async def update_task(
    session: ClientSession, task_id: str, input_responses: Mapping[str, Any]
) -> dict[str, Any]:
    """``tasks/update`` with answers keyed by the task's input-request keys."""
    params = _UpdateParams(task_id=task_id, input_responses=dict(input_responses))
    return await _send(session, _UpdateTask(params=params))


async def cancel_task(session: ClientSession, task_id: str) -> dict[str, Any]:
    """``tasks/cancel``: ask the server to cancel (an acknowledgement, not a status)."""
    return await _send(session, _CancelTask(params=_TaskParams(task_id=task_id)))


class CreatedTask(Result):
    """A ``CreateTaskResult``: the task handle a ``tools/call`` may answer with."""

    model_config = ConfigDict(extra="allow")

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    poll_interval_ms: int | None = None


#: Answers one input request: ``(key, {"method": ..., "params": ...})`` -> the response.
InputAnswerer = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class TasksClient(ClientExtension):
    """Declares the tasks extension and resolves task results transparently.

    With it, ``Client.call_tool`` returns the final ``CallToolResult`` whether the
    server ran the tool inline or as a task: the task is polled with
    ``tasks/get`` (at its ``pollIntervalMs``, at most ``max_poll`` seconds apart)
    and each input request is answered once through ``answer`` and
    ``tasks/update``. A ``failed`` task raises its JSON-RPC error as ``MCPError``;
    a ``cancelled`` one raises ``MCPError`` too.
    """

    identifier = EXTENSION_ID

    def __init__(self, answer: InputAnswerer | None = None, *, max_poll: float = 5.0) -> None:
        self._answer = answer
        self._max_poll = max_poll

    def claims(self) -> list[ResultClaim[Any]]:
        """The ``resultType: "task"`` claim on ``tools/call``."""
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    async def _resolve(self, created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
        answered: set[str] = set()
        interval = (created.poll_interval_ms or 1000) / 1000
        task: dict[str, Any] = {"status": created.status}
        while True:
            if task["status"] in _TERMINAL:
                break
            if task["status"] == "input_required":
                await self._answer_requests(ctx.session, created.task_id, task, answered)
            await anyio.sleep(min(interval, self._max_poll))
            task = await get_task(ctx.session, created.task_id)
            interval = task.get("pollIntervalMs", 1000) / 1000
        if task["status"] == "completed":
            return CallToolResult.model_validate(task["result"], by_name=False)
        if task["status"] == "failed":
            error = task["error"]
            raise MCPError(error["code"], error["message"], error.get("data"))
        raise MCPError(-32800, "The task was cancelled")

    async def _answer_requests(
        self, session: ClientSession, task_id: str, task: dict[str, Any], answered: set[str]
    ) -> None:
        requests: dict[str, dict[str, Any]] = task.get("inputRequests") or {}
        fresh = {key: request for key, request in requests.items() if key not in answered}
        if not fresh:
            return
        if self._answer is None:
            raise MCPError(-32603, "The task needs input and no answerer was given")
        responses = {key: await self._answer(key, request) for key, request in fresh.items()}
        await update_task(session, task_id, responses)
        answered.update(responses)
