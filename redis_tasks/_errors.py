"""The exception tree of redis-tasks.

Every exception the library raises on purpose derives from one root::

    RedisTasksError
    ├── TaskNotFoundError          unknown, expired or unauthorized task (indistinguishable)
    ├── LeaseLostError             a worker's fence is stale: another worker owns the task now
    ├── InvalidTransitionError     the task's status does not allow the operation
    │   └── TaskTerminalError      the task is already completed, failed or cancelled
    ├── ValidationError            malformed input; nothing was stored
    │   ├── LimitExceededError     input over a configured size, depth or count bound
    │   └── InputKeyReusedError    an input-request key reused for a different request
    ├── CapacityError              no room: the manager or Redis is full (maxmemory)
    │   └── QuotaExceededError     a tenant's open-task quota or create rate refused it
    ├── BackendError               Redis failed, timed out or was unreachable
    │   └── ReplicationError       written, but fewer replicas confirmed it than asked
    └── InternalError              what the library cannot explain (a bug, corrupt data)

``BackendError`` is not an ``InternalError``: Redis being down is an outage, which a
retry later may outlast, and an ``InternalError`` is a reply or record the library
cannot explain, which no retry mends. Only a failure of the Redis client itself (its
errors, socket errors, timeouts) becomes a ``BackendError``; an exception of any
other kind from the library's own code is a bug and is raised as what it is.

Messages never contain task origins, payloads, results, answers, partition keys or
task IDs: they may reach clients and logs. The cause of an ``InternalError`` or a
``BackendError`` stays reachable through ``__cause__`` for the server's own
diagnostics.
"""

from __future__ import annotations

from datetime import timedelta

__all__ = [
    "BackendError",
    "CapacityError",
    "InputKeyReusedError",
    "InternalError",
    "InvalidTransitionError",
    "LeaseLostError",
    "LimitExceededError",
    "QuotaExceededError",
    "RedisTasksError",
    "ReplicationError",
    "TaskNotFoundError",
    "TaskTerminalError",
    "ValidationError",
]


class RedisTasksError(Exception):
    """Root of every error redis-tasks raises on purpose."""


class TaskNotFoundError(RedisTasksError):
    """The task is unknown, expired, malformed or not visible to the caller.

    The message is the same in every case so that a caller cannot tell an
    unauthorized task from one that does not exist.
    """

    def __init__(self) -> None:
        super().__init__("task not found")


class LeaseLostError(RedisTasksError):
    """The worker's fencing token is stale: a newer lease owns the task."""

    def __init__(self) -> None:
        super().__init__("lease lost: the task is fenced by a newer claim")


class InvalidTransitionError(RedisTasksError):
    """The task's current status does not allow the requested operation."""


class TaskTerminalError(InvalidTransitionError):
    """The task already reached a terminal status; terminal is final."""

    def __init__(self) -> None:
        super().__init__("task is already terminal")


class ValidationError(RedisTasksError):
    """Input is malformed; the operation stored nothing."""


class LimitExceededError(ValidationError):
    """Input exceeds a configured bound (size, depth or count); nothing was stored."""


class InputKeyReusedError(ValidationError):
    """An input-request key was already issued for a different request.

    Keys are unique for the task's lifetime (SEP-2663): reusing one for another
    request would let a client's answer reach the wrong question.
    """


class CapacityError(RedisTasksError):
    """There is no room for what was asked, and nothing was stored: the in-memory
    manager retains as many live tasks as it may, or Redis is out of memory
    (``maxmemory`` under ``noeviction``).

    ``reason`` says which room ran out (``"full"`` here; a quota's reasons on
    :class:`QuotaExceededError`), for a caller that answers a client (the MCP
    extension's ``data.reason``); ``retry_after``, when not ``None``, is when trying
    again may succeed.
    """

    def __init__(
        self, message: str, *, reason: str = "full", retry_after: timedelta | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


class QuotaExceededError(CapacityError):
    """A tenant's limit refused a new task; nothing was stored.

    ``reason`` is ``"quota"`` (the tenant holds ``Limits.max_open_tasks_per_tenant``
    open tasks: one must end or expire first) or ``"rate"`` (it creates faster than
    ``Limits.tenant_create_rate``: ``retry_after`` says when the next create fits).
    The message never names the tenant.
    """


class InternalError(RedisTasksError):
    """Something the library cannot explain: a script reply or a stored record it does
    not recognise, a script that disagrees with its contract. The message deliberately
    omits the cause."""


class BackendError(RedisTasksError):
    """Redis failed, timed out or could not be reached: trying again later may succeed.
    The message names no cause.

    Counted (``redis_tasks_redis_errors``) where a failure is mapped to one, not
    here: this tree imports nothing of the library, so every module may use it.
    """


class ReplicationError(BackendError):
    """The write happened on the primary, but ``WAIT`` saw fewer replicas confirm it
    than ``wait_replicas`` asked for within the wait timeout.

    The write may be lost if that primary fails before its replicas catch up.
    Retrying the same operation is safe (every script may run again).
    """
