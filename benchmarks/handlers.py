"""Handlers the benchmarks run in worker processes."""

from __future__ import annotations

import time
from typing import Any

from redis_tasks import TaskExecution


async def noop(execution: TaskExecution) -> dict[str, Any]:
    """Do nothing: measures the task layer alone."""
    return {}


async def stamp(execution: TaskExecution) -> dict[str, Any]:
    """Record when the handler started (wall clock, same machine as the creator)."""
    return {"started": time.time()}
