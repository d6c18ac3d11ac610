"""Small helpers shared by the tests."""

from __future__ import annotations

import asyncio
import logging
import re
import subprocess
import time
import traceback
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from redis_tasks import (
    InputRequest,
    JsonRpcError,
    RequestContext,
    TaskOrigin,
    TaskRequestContext,
    TaskUpdateContext,
)

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

#: A whole task ID wherever it stands in a text (a partition, a dot and the 24 characters
#: of the random part); a reference (``11.Wt0jM9``) does not match. Logs, spans and pages
#: must hold none (a task ID is a capability) unless told ``whole_task_ids``.
WHOLE_TASK_ID = re.compile(r"(?<![A-Za-z0-9_.-])(?:0|[1-9][0-9]{0,4})\.[A-Za-z0-9_-]{24}")


def whole_task_ids(text: str) -> list[str]:
    """Every whole task ID in ``text``."""
    return WHOLE_TASK_ID.findall(text)


@contextmanager
def every_log_line() -> Iterator[list[str]]:
    """Every record of the ``redis_tasks`` loggers meanwhile (at DEBUG, so every one is
    made), rendered as the command line writes it (JSON: the message and every field)."""
    from redis_tasks._logs import JsonFormatter  # only the log audits need it

    lines: list[str] = []
    formatter = JsonFormatter()

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(formatter.format(record))

    logger = logging.getLogger("redis_tasks")
    keep, level = Keep(logging.DEBUG), logger.level
    logger.addHandler(keep)
    logger.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.removeHandler(keep)
        logger.setLevel(level)


def stop_processes(processes: Iterable[subprocess.Popen[bytes]]) -> None:
    """Terminate every process (SIGTERM: graceful), then wait for each, killing one that
    is still running 30 s later."""
    processes = list(processes)
    for process in processes:
        process.terminate()
    for process in processes:
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


async def wait_until(
    condition: Callable[[], Awaitable[T | None]], *, within: float = 10.0, what: str = "condition"
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


def told_once_with_traceback(records: list[logging.LogRecord], logger: str, where: str) -> None:
    """``logger`` logged exactly one record: an ERROR with the planted ``TypeError`` and a
    traceback through the function named ``where``."""
    (record,) = [r for r in records if r.name == logger]
    assert record.levelno == logging.ERROR
    assert record.exc_info is not None
    assert record.exc_info[0] is TypeError
    assert where in [frame.name for frame in traceback.extract_tb(record.exc_info[2])]


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


Operation = Callable[[], Awaitable[Any]]
#: The operations a worker performs (all take ``fence=``).
WORKER_OPERATIONS = (
    "mark_working",
    "request_input",
    "take_input_responses",
    "complete_task",
    "fail_task",
    "cancel_task",
    "is_cancellation_requested",
)


def operations(m: Any, task_id: str, *, fence: int | None = None) -> dict[str, Operation]:
    """Every operation on ``task_id`` except ``find_task``, each ready to call and await."""
    return {
        "update_task": lambda: m.update_task(
            TaskUpdateContext(ALICE, task_id, {"k": ELICIT_ANSWER})
        ),
        "request_cancellation": lambda: m.request_cancellation(TaskRequestContext(ALICE, task_id)),
        "mark_working": lambda: m.mark_working(task_id, "x", fence=fence),
        "request_input": lambda: m.request_input(task_id, {"x": ELICIT}, fence=fence),
        "take_input_responses": lambda: m.take_input_responses(task_id, fence=fence),
        "complete_task": lambda: m.complete_task(task_id, {"ok": True}, fence=fence),
        "fail_task": lambda: m.fail_task(
            task_id, JsonRpcError(code=-32603, message="x"), fence=fence
        ),
        "cancel_task": lambda: m.cancel_task(task_id, fence=fence),
        "is_cancellation_requested": lambda: m.is_cancellation_requested(task_id, fence=fence),
    }


async def expect_each_raises(
    error: type[Exception], calls: dict[str, Operation], only: tuple[str, ...] | None = None
) -> None:
    """Await each operation (or those named in ``only``); each must raise ``error``."""
    for name, call in calls.items():
        if only is not None and name not in only:
            continue
        try:
            await call()
        except error:
            continue
        raise AssertionError(f"{name} did not raise {error.__name__}")


async def reaches(manager: Any, task_id: str, status: Any, who: RequestContext = ALICE) -> Any:
    """Wait until ``task_id`` has ``status``; return that snapshot."""

    async def there() -> Any:
        task = await manager.find_task(TaskRequestContext(who, task_id))
        return task if task is not None and task.status is status else None

    return await wait_until(there, what=f"status {status}")


def count_finish_batches(manager: Any) -> list[int] | None:
    """The sizes of the ``finish_batch`` calls ``manager`` makes from now on; ``None``
    for a backend that sends no batches (the in-memory one)."""
    batches = getattr(manager, "_finishes", None)
    if batches is None:
        return None
    sizes: list[int] = []
    send_many = batches._many

    async def counted(partition: int, items: list[Any]) -> list[BaseException | None]:
        sizes.append(len(items))
        answers: list[BaseException | None] = await send_many(partition, items)
        return answers

    batches._many = counted
    return sizes
