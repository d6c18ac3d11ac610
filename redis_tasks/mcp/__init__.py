"""The MCP Tasks extension (``io.modelcontextprotocol/tasks``, SEP-2663) for the official SDK.

Install with ``pip install 'redis-mcp-tasks[mcp]'``. On the server::

    manager = RedisTaskManager.from_url(url)
    tasks = TasksExtension(manager, tools={"report": TaskSupport.REQUIRED})
    server = MCPServer("reports", extensions=[tasks], lifespan=tasks.lifespan)

and in each worker process, ``redis-tasks worker app:handler`` with
``handler = tool_handler(server)``. Any server process answers for any task.
``app = tasks.asgi(server.streamable_http_app())`` serves the polls
(``tasks/get``, ``tasks/update``, ``tasks/cancel``) on a fast path that answers
exactly as the SDK would, for less CPU.
"""

from ._auth import Authorizer, PrincipalAuthorizer
from ._client import (
    CreatedTask,
    InputAnswerer,
    TasksClient,
    cancel_task,
    get_task,
    update_task,
)
from ._escalate import run_as_task
from ._extension import (
    PayloadFactory,
    PlanFactory,
    TasksExtension,
    TaskSupport,
    TenantFactory,
    WeightFactory,
)
from ._subscriptions import TaskSubscriptions
from ._tool_call import ToolCall
from ._tool_runner import tool_handler
from ._wire import EXTENSION_ID

__all__ = [
    "EXTENSION_ID",
    "Authorizer",
    "CreatedTask",
    "InputAnswerer",
    "PayloadFactory",
    "PlanFactory",
    "PrincipalAuthorizer",
    "TaskSubscriptions",
    "TaskSupport",
    "TasksClient",
    "TasksExtension",
    "TenantFactory",
    "ToolCall",
    "WeightFactory",
    "cancel_task",
    "get_task",
    "run_as_task",
    "tool_handler",
    "update_task",
]
