"""SEP-2663 tasks for FastMCP servers, on redis-tasks: fastmcp-tasks' place, one line changed.

Install with ``pip install 'redis-mcp-tasks[fastmcp]'``. In the app::

    from redis_tasks.fastmcp import TasksExtension

    mcp = FastMCP("reports")
    mcp.add_extension(TasksExtension("redis://localhost:6379"))

    @mcp.tool(task=TaskConfig(mode="required"))
    async def report(ctx: Context) -> str: ...

serve it as any FastMCP app (``mcp.http_app()``), and run the tools in worker
processes: ``redis-tasks worker --fastmcp app.py:mcp``. Any server process answers
for any task.
"""

from ._extension import ACCEPT_UNBOUND_ENV, SNAPSHOT_KEY_ENV, TasksExtension
from ._fastmcp import FASTMCP_RANGE, FastMCPMismatchError
from ._snapshot import CallerSnapshot, SnapshotError, SnapshotKey
from ._worker import tool_handler

__all__ = [
    "ACCEPT_UNBOUND_ENV",
    "FASTMCP_RANGE",
    "SNAPSHOT_KEY_ENV",
    "CallerSnapshot",
    "FastMCPMismatchError",
    "SnapshotError",
    "SnapshotKey",
    "TasksExtension",
    "tool_handler",
]
