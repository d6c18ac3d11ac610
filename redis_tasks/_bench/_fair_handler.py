"""The handler the ``fairness`` benchmark scenario runs in a ``redis-tasks worker`` process.

A task's payload is ``<label> <milliseconds>``: the handler writes ``<label>
<start>`` as one line to the file ``$RT_BENCH_STARTS`` names as soon as it
starts, then sleeps that long. The start is ``time.monotonic()``, the clock the
harness stamps its creates with in its own process: CLOCK_MONOTONIC is one clock
for every process of a Linux machine, and no NTP step can move it mid-run.

A file rather than stdout or Redis: an append never blocks the worker's event
loop on a reader that falls behind (a pipe does once its buffer is full), and it
adds no Redis command to the load being measured. Lines are written in the
order the handlers start, since they all run in this process's one loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import IO, Any, Final

from redis_tasks._execution import TaskExecution

__all__ = ["STARTS_ENV", "handler", "parse_payload"]

#: The environment variable naming the file of starts.
STARTS_ENV: Final = "RT_BENCH_STARTS"

_starts: IO[str] | None = None


def parse_payload(payload: bytes) -> tuple[str, float]:
    """A payload's label, and how long the handler sleeps in seconds."""
    label, _, millis = payload.decode().partition(" ")
    return label, int(millis or 0) / 1000


def _record(label: str, started: float) -> None:
    global _starts
    if _starts is None:
        # Line-buffered, appended: every start is one write the harness can read at once.
        _starts = open(os.environ[STARTS_ENV], "a", buffering=1)  # noqa: SIM115 (the process's life)
    _starts.write(f"{label} {started:.6f}\n")


async def handler(execution: TaskExecution) -> dict[str, Any]:
    """Record the start, then sleep as the payload says (the work of a task)."""
    started = time.monotonic()
    label, seconds = parse_payload(execution.payload)
    _record(label, started)
    await asyncio.sleep(seconds)
    return {}
