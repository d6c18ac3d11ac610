"""A worker's handler: a status message, a question to the client, cancellation, a failure
with a JSON-RPC error, a result. The Guides / Workers page shows this file whole; the tests
run it on a worker (``redis-tasks worker docs_src/worker_handler.py:handler``)."""

import asyncio
from typing import Any

from redis_tasks import InputRequest, JsonRpcError, TaskExecution, TaskFailed

CONFIRM = InputRequest(
    method="elicitation/create",
    params={"message": "Proceed?", "requestedSchema": {"type": "object"}},
)


async def handler(execution: TaskExecution) -> dict[str, Any]:
    await execution.report("starting")  # a status message, fenced by the lease
    answers = await execution.request_input({"confirm": CONFIRM})  # waits; replay-safe
    if execution.cancelled.is_set():  # a client asked to cancel
        raise asyncio.CancelledError  # ends the task cancelled
    if answers["confirm"]["action"] != "accept":
        raise TaskFailed(JsonRpcError(code=-32602, message="not confirmed"))
    return {"content": [{"type": "text", "text": "done"}], "isError": False}
