"""redis-tasks: durable, multi-node task state for MCP servers on Redis.

The server side of the MCP Tasks extension (``io.modelcontextprotocol/tasks``,
SEP-2663): a :class:`TaskManager` owns task IDs, persistence, retention,
binding to endpoint and authorization partition, atomic state transitions,
de-duplication of client input, cancellation intent and publication of
durable changes. :class:`RedisTaskManager` does all of that with one Lua
script per operation; :class:`InMemoryTaskManager` is the process-local
reference. :class:`Worker` runs the tasks' handlers at least once across a fleet
of processes, under leases and fencing.
"""

from ._errors import (
    BackendError,
    CapacityError,
    InputKeyReusedError,
    InternalError,
    InvalidTransitionError,
    LeaseLostError,
    LimitExceededError,
    QuotaExceededError,
    RedisTasksError,
    ReplicationError,
    TaskNotFoundError,
    TaskTerminalError,
    ValidationError,
)
from ._events import TaskEventPublisher, TaskEventRegistration
from ._execution import Handler, TaskExecution, TaskFailed, TaskParked
from ._ids import task_ref
from ._inspection import (
    ConsumerView,
    Inspection,
    LeaseView,
    PartitionView,
    PickupHistogram,
    TaskInspection,
    TaskMatches,
)
from ._lease import Claim, ClaimOutcome
from ._limits import Limits
from ._manager import TaskManager
from ._memory import InMemoryTaskManager
from ._models import (
    InputRequest,
    JsonRpcError,
    RequestContext,
    Task,
    TaskRequestContext,
    TaskUpdateContext,
)
from ._origin import TaskOrigin
from ._plans import PlanPolicy, TenantPlan
from ._redis import RedisTaskManager
from ._status import TERMINAL_STATUSES, TaskStatus
from ._version import __version__ as __version__
from ._worker import Worker

__all__ = [
    "TERMINAL_STATUSES",
    "BackendError",
    "CapacityError",
    "Claim",
    "ClaimOutcome",
    "ConsumerView",
    "Handler",
    "InMemoryTaskManager",
    "InputKeyReusedError",
    "InputRequest",
    "Inspection",
    "InternalError",
    "InvalidTransitionError",
    "JsonRpcError",
    "LeaseLostError",
    "LeaseView",
    "LimitExceededError",
    "Limits",
    "PartitionView",
    "PickupHistogram",
    "PlanPolicy",
    "QuotaExceededError",
    "RedisTaskManager",
    "RedisTasksError",
    "ReplicationError",
    "RequestContext",
    "Task",
    "TaskEventPublisher",
    "TaskEventRegistration",
    "TaskExecution",
    "TaskFailed",
    "TaskInspection",
    "TaskManager",
    "TaskMatches",
    "TaskNotFoundError",
    "TaskOrigin",
    "TaskParked",
    "TaskRequestContext",
    "TaskStatus",
    "TaskTerminalError",
    "TaskUpdateContext",
    "TenantPlan",
    "ValidationError",
    "Worker",
    "task_ref",
]
