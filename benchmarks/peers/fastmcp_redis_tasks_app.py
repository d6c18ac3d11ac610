"""The ``mcp`` scenario's FastMCP app on redis_tasks.fastmcp: one import changed.

The same app, tools and token as ``fastmcp_tasks_app.py`` (the fastmcp-tasks peer), with
``TasksExtension`` imported from ``redis_tasks.fastmcp`` instead of ``fastmcp_tasks``:
``tests/ops/test_fastmcp_apps.py`` checks that this is the only difference. Served by
uvicorn and run by ``redis-tasks worker --fastmcp fastmcp_redis_tasks_app.py:mcp``, in
the main virtualenv, configured by the environment: ``REDIS_URL`` (the Redis),
``REDIS_TASKS_PREFIX`` (the run's fresh prefix) and ``RT_BENCH_POLL_MS``.
"""

from __future__ import annotations

import os
from datetime import timedelta

from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.utilities.tasks import TaskConfig

from redis_tasks.fastmcp import TasksExtension

mcp = FastMCP(
    "fastmcp-tasks-bench",
    auth=StaticTokenVerifier(
        {"bench-token": {"client_id": "bench-client", "sub": "bench", "scopes": ["mcp"]}},
        required_scopes=["mcp"],
    ),
)
mcp.add_extension(TasksExtension())

_POLL = timedelta(milliseconds=int(os.environ.get("RT_BENCH_POLL_MS", "20")))


@mcp.tool(task=TaskConfig(mode="required", poll_interval=_POLL))
async def noop() -> str:
    """Do nothing (run by a Docket worker as a task)."""
    return "ok"


@mcp.tool
def constant() -> str:
    """Return a constant at once (served inline, no task)."""
    return "ok"


app = mcp.http_app()
