"""The model: :class:`~redis_tasks.InMemoryTaskManager`, the contract's reference, driven one
operation at a time on one task.

The search tries operations in many orders, so the model's state is saved after each
step and restored before the next: one task's record, copied whole. The clock is
fixed (every timestamp the same), so two paths that reach the same record reach the
same bytes, and the search can tell it has been somewhere before
(:meth:`TaskModel.digest`). Worker operations are applied without a fence: the
recorded worker held the lease when it wrote (a write refused for a lost lease is
no operation of the model's).

Leases matter to one operation: a cancellation ends a task no worker holds at once,
and only records intent on one a worker holds. A claim that runs the task marks it
held (a lease deadline that never passes on the fixed clock); since a worker that
died lets its lease run out unrecorded, a cancellation of a held task may take
either effect, and the search tries both (:meth:`TaskModel.outcomes`).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from redis_tasks import (
    InMemoryTaskManager,
    InputRequest,
    JsonRpcError,
    RequestContext,
    Task,
    TaskNotFoundError,
    TaskOrigin,
    TaskRequestContext,
    TaskTerminalError,
    TaskUpdateContext,
)
from redis_tasks._record import FIELD_FENCE, FIELD_LEASE_DEADLINE

from .ops import Op

#: A lease deadline the fixed clock never reaches: a worker holds the task.
_HELD: Final = str(10**15).encode()

__all__ = ["ORIGIN", "WHO", "TaskModel", "answer", "asked", "snapshot"]

#: The client every recorded task belongs to, and the tool call it ran.
WHO: Final = RequestContext("/mcp", "history")
ORIGIN: Final = TaskOrigin.from_persisted_string('{"tool":"history","arguments":{}}')
_EPOCH: Final = 1_790_000_000.0


def asked(key: str) -> InputRequest:
    """The input request a history's worker asks under ``key``."""
    return InputRequest(method="elicitation/create", params={"message": key})


def answer(key: str) -> dict[str, Any]:
    """The answer a history's client gives to ``key``."""
    return {"action": "accept", "content": {"key": key}}


def snapshot(task: Task | None) -> dict[str, Any] | None:
    """What a ``find_task`` answer is compared by: status, message, outcome and the
    keys asked (never timestamps, which the model's fixed clock does not share)."""
    if task is None:
        return None
    return {
        "status": task.status.value,
        "message": task.status_message,
        "result": task.result,
        "error": None if task.error is None else task.error.code,
        "asking": sorted(task.input_requests),
    }


class TaskModel:
    """One task on an in-memory manager, stepped by :meth:`apply` from saved states.

    A state is ``None`` (no task: before its create) or a copy of the task's record.
    """

    def __init__(self) -> None:
        self._manager = InMemoryTaskManager(clock=lambda: _EPOCH)
        self._task_id = ""
        self._created: Any = None

    async def start(self) -> None:
        """Create the task once: every ``create`` restores this record."""
        task = await self._manager.create_task(WHO, ORIGIN)
        self._task_id = task.task_id
        self._created = self._save()

    def _save(self) -> Any:
        record = self._manager._tasks.get(self._task_id)
        return None if record is None else copy.deepcopy(record)

    def _restore(self, state: Any) -> None:
        if state is None:
            self._manager._tasks.pop(self._task_id, None)
        else:
            self._manager._tasks[self._task_id] = copy.deepcopy(state)

    @staticmethod
    def digest(state: Any) -> str:
        """The same text for the same record (fixed clock, so timestamps agree)."""
        if state is None:
            return "-"
        parts = (state.fields, state.requests, state.issued, state.answers, state.journal)
        return repr([sorted(part.items()) for part in parts])

    async def outcomes(self, state: Any, op: Op) -> list[tuple[Any, Any]]:
        """Each way ``op`` may take effect on ``state``: one, but for a cancellation of
        a held task, which its lease may or may not have outlived (see the module)."""
        first = await self.apply(state, op)
        if op.kind != "cancel" or state is None or FIELD_LEASE_DEADLINE not in state.fields:
            return [first]
        lapsed = copy.deepcopy(state)
        del lapsed.fields[FIELD_LEASE_DEADLINE]
        return [first, await self.apply(lapsed, op)]

    async def apply(self, state: Any, op: Op) -> tuple[Any, Any]:
        """``op`` taken effect on ``state``: the state after it, and what its caller
        would have seen (normalised as :class:`~.ops.Op` records it)."""
        if op.kind == "create":
            return (self._created if state is None else state), "ok"
        self._restore(state)
        try:
            value = await self._call(op)
        except TaskNotFoundError:
            value = "not_found"
        except TaskTerminalError:
            value = "terminal"
        return self._save(), value

    async def _call(self, op: Op) -> Any:
        m, task_id = self._manager, self._task_id
        if op.kind == "find":
            return snapshot(await m.find_task(TaskRequestContext(WHO, task_id)))
        if op.kind == "update":
            await m.update_task(TaskUpdateContext(WHO, task_id, op.args["answers"]))
            return "ok"
        if op.kind == "cancel":
            await m.request_cancellation(TaskRequestContext(WHO, task_id))
            return "ok"
        if op.kind == "claim":
            # What lua/includes/claim.lua decides for a task a client can see: the
            # lease itself (fence, owner) is no part of a client's answers.
            found = await m.find_task(TaskRequestContext(WHO, task_id))
            if found is None:
                return "not_found"
            if found.is_terminal:
                return "terminal"
            if await m.is_cancellation_requested(task_id):
                await m.cancel_task(task_id)
                return "cancelled"
            self._manager._tasks[task_id].fields[FIELD_LEASE_DEADLINE] = _HELD
            return "run"
        if op.kind == "request_input":
            requests = {key: asked(key) for key in op.args["keys"]}
            return ["ok", await m.request_input(task_id, requests)]
        if op.kind == "park":
            # The recorded worker parked under its own fence: the model's, whatever it is.
            fence = int(self._manager._tasks[task_id].fields[FIELD_FENCE])
            parked = await m.work_queue.park(task_id, fence=fence)
            return "parked" if parked else "not_parked"
        if op.kind == "complete":
            await m.complete_task(task_id, op.args["result"])
            return "ok"
        if op.kind == "fail":
            await m.fail_task(task_id, JsonRpcError(code=op.args["code"], message="failed"))
            return "ok"
        raise ValueError(f"no model for {op.kind!r}")
