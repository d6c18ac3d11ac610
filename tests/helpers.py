"""Small helpers shared by the tests."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis_tasks import InputRequest, RequestContext, TaskOrigin

T = TypeVar("T")

ALICE = RequestContext("/mcp", "alice")
BOB = RequestContext("/mcp", "bob")
ANONYMOUS = RequestContext("/mcp", None)
OTHER_ENDPOINT = RequestContext("/other", "alice")

ORIGIN = TaskOrigin.from_persisted_string('{"tool": "slow", "arguments": {"n": 1}}')

ELICIT = InputRequest(
    method="elicitation/create",
    params={
        "mode": "form",
        "message": "Please enter your name.",
        "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
)
SAMPLE = InputRequest(
    method="sampling/createMessage",
    params={
        "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
        "maxTokens": 10,
    },
)
ROOTS = InputRequest(method="roots/list", params={})

ELICIT_ANSWER = {"action": "accept", "content": {"name": "Luca"}}
SAMPLE_ANSWER = {
    "role": "assistant",
    "content": {"type": "text", "text": "hello"},
    "model": "m-1",
    "stopReason": "endTurn",
}
ROOTS_ANSWER = {"roots": [{"uri": "file:///home/user/project", "name": "project"}]}


async def wait_until(
    condition: Callable[[], Awaitable[T]], *, within: float = 10.0, what: str = "condition"
) -> T:
    """Poll ``condition`` until it returns a truthy value; fail after ``within`` seconds.

    This waits on a condition, not for a fixed time: it returns the moment the
    condition holds.
    """
    deadline = time.monotonic() + within
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)


class EventLog:
    """A listener that records task IDs and lets a test wait for a count."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self._changed = asyncio.Event()

    def __call__(self, task_id: str) -> None:
        self.ids.append(task_id)
        self._changed.set()

    def count(self, task_id: str) -> int:
        return self.ids.count(task_id)

    async def wait_for(self, task_id: str, count: int, within: float = 10.0) -> None:
        async def reached() -> bool:
            return self.count(task_id) >= count

        await wait_until(reached, within=within, what=f"{count} events")
