"""The error boundary: the manager's exceptions become JSON-RPC errors here, and only here.

Unknown, expired and unauthorized tasks give one ``-32602`` body; bad input gives
``-32602`` with a message naming no data; a refusal for want of room (a tenant's
quota or create rate, a full Redis) gives ``-32003`` with ``data.reason`` and,
where known, ``data.retryAfterMs``; anything else gives ``-32603`` and a log line
that names the exception type, never its text or any task data.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis_tasks._errors import (
    CapacityError,
    RedisTasksError,
    TaskNotFoundError,
    ValidationError,
)

from ._wire import capacity_exceeded, internal_error, invalid_params, task_not_found

__all__ = ["guard"]

logger = logging.getLogger("redis_tasks.mcp")

T = TypeVar("T")


async def guard(call: Callable[[], Awaitable[T]], refused: str | None = None) -> T:
    """Run one manager call; map its failures to JSON-RPC errors, disclosing nothing
    (``refused``: the message of a ``-32602`` for input the manager refused)."""
    # Every manager call is bounded by the manager's own Redis timeouts.
    try:
        return await call()
    except TaskNotFoundError:
        raise task_not_found() from None
    except ValidationError:
        raise invalid_params(refused or "Invalid task request") from None
    except CapacityError as exc:
        # A quota or a rate refuses creates only; a full Redis may refuse any write
        # (tasks/update, tasks/cancel): the same answer, so a client backs off alike.
        raise capacity_exceeded(exc) from None
    except RedisTasksError as exc:
        logger.error("task manager failed: %s", type(exc).__name__)
        raise internal_error() from None
    except Exception as exc:
        logger.error("task manager failed unexpectedly: %s", type(exc).__name__)
        raise internal_error() from None
