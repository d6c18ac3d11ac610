"""Structured (JSON lines) logging for the command line."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final

__all__ = ["JsonFormatter", "configure_logging"]

# Attributes every LogRecord has; anything else came in through ``extra``.
_STANDARD: Final = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and the ``extra`` fields.

    Exception tracebacks are reduced to the exception's type: their messages may
    carry task data, and the library logs locations explicitly where useful.
    """

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one JSON line."""
        entry: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                entry[key] = value
        if record.exc_info and record.exc_info[0] is not None:
            entry["exception"] = record.exc_info[0].__name__
        return json.dumps(entry, default=str)


def configure_logging(level: str = "info") -> None:
    """Send redis-tasks logs to stderr as JSON lines at ``level``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("redis_tasks")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
