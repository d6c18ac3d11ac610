"""The handler the ``parking`` benchmark scenario runs in a ``redis-tasks worker`` process.

A task's payload is ``<label> ask`` or ``<label> plain``. The handler writes
``<label> start <time> <parks>`` to the file ``$RT_BENCH_STARTS`` names as soon as
it starts (``<parks>``: :attr:`~redis_tasks.TaskExecution.parks`), and ``<label> end
<time> <how>`` as it leaves, however it leaves: ``done`` (it returned), ``parked``
(its wait for input parked the task) or ``raised``. An ``ask`` task asks its client
one question and waits for the answer; a ``plain`` one returns at once. So the
harness counts the handlers inside the worker at any moment (starts less ends), and
each run's start and end. Times are ``time.monotonic()``, the clock the harness
stamps its creates and answers with: one clock for every process of a Linux machine.

A file rather than Redis, as :mod:`._fair_handler` says: it adds no command to what
is measured.
"""

from __future__ import annotations

import os
import time
from typing import IO, Any, Final

from redis_tasks._execution import TaskExecution, TaskParked
from redis_tasks._models import InputRequest

__all__ = ["QUESTION", "STARTS_ENV", "handler"]

#: The environment variable naming the file of lines.
STARTS_ENV: Final = "RT_BENCH_STARTS"
#: What an ``ask`` task asks (key ``q``).
QUESTION: Final = InputRequest(
    method="elicitation/create",
    params={"message": "Proceed?", "requestedSchema": {"type": "object"}},
)

_lines: IO[str] | None = None


def _write(line: str) -> None:
    global _lines
    if _lines is None:
        # Line-buffered, appended: every line is one write the harness can read at once.
        _lines = open(os.environ[STARTS_ENV], "a", buffering=1)  # noqa: SIM115 (the process's life)
    _lines.write(line + "\n")


async def handler(execution: TaskExecution) -> dict[str, Any]:
    """Record the start; ask (``ask``) or not; record how the run left."""
    label, _, kind = execution.payload.decode().partition(" ")
    _write(f"{label} start {time.monotonic():.6f} {execution.parks}")
    how = "raised"
    try:
        if kind == "ask":
            answers = await execution.request_input({"q": QUESTION})
            how = "done"
            return {"answered": bool(answers)}
        how = "done"
        return {}
    except TaskParked:
        how = "parked"
        raise
    finally:
        _write(f"{label} end {time.monotonic():.6f} {how}")
