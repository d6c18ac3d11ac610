"""The worker's structured log: an ``event`` name and fields, never a secret.

Records carry ``extra`` fields (``event``, ``task``, ``fence``, ``attempt``...)
and never origins, payloads, results, answers or exception messages, which may
all hold secrets: an exception is logged by its type and where it was raised.
``task`` is the task's reference (``Settings.ref``), not its ID: the ID is a
capability, and logs are read by more people than the task's client.
"""

from __future__ import annotations

import logging
import traceback
from typing import Any

__all__ = ["frames", "log"]

logger = logging.getLogger("redis_tasks.worker")


def log(level: int, message: str, event: str, **fields: Any) -> None:
    """Log ``message`` with ``event`` and ``fields`` as structured extras."""
    # Checked first: a worker logs twice per task at INFO, and with INFO off the
    # record's extras were still built, merged and passed down for nothing.
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={"event": event, **fields})


def frames(exc: BaseException) -> str:
    """Where an exception was raised, without its message (which may hold secrets)."""
    summary = traceback.extract_tb(exc.__traceback__)
    return " <- ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in reversed(summary))
