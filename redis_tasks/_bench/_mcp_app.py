"""The MCP application the ``mcp`` benchmark scenario serves and runs.

The demo's shape with nothing to wait for: server processes serve ``app`` with
uvicorn, ``redis-tasks worker`` processes run ``handler``, all on the Redis named
by ``RT_BENCH_REDIS_URL`` under the key prefix ``RT_BENCH_PREFIX``. Two tools:

- ``noop`` is task-enabled (``TaskSupport.REQUIRED``) and returns a constant, so a
  task costs only what this library and the SDK spend on it;
- ``constant`` is a plain synchronous tool this library never touches: a
  ``tools/call`` of it is the SDK's own cost of one request, the baseline.

The one bearer token is ``BENCH_TOKEN``, checked by a verifier like the demo's.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Final

from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from redis_tasks._redis.manager import RedisTaskManager
from redis_tasks.mcp import TasksExtension, TaskSupport, tool_handler

__all__ = [
    "BENCH_TOKEN",
    "CONSTANT_TOOL",
    "TASK_TOOL",
    "access_token",
    "app",
    "constant",
    "handler",
    "noop",
]

#: The bearer token every benchmark client sends (a fixed token: benchmark only).
BENCH_TOKEN: Final = "bench-token"  # noqa: S105 (a benchmark's fixed token, no secret)
#: The task-enabled tool.
TASK_TOOL: Final = "noop"
#: The plain tool, never a task.
CONSTANT_TOOL: Final = "constant"


def access_token(token: str) -> AccessToken | None:
    """The principal ``token`` stands for: the benchmark's one, or None (refused)."""
    if token != BENCH_TOKEN:
        return None
    return AccessToken(token=token, client_id="bench-client", subject="bench", scopes=["mcp"])


class _Tokens:
    """Accepts the one benchmark token; never use a static token outside a benchmark."""

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's principal, or None (the SDK answers 401)."""
        return access_token(token)


tasks = TasksExtension(
    RedisTaskManager.from_url(
        os.environ.get("RT_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0"),
        prefix=os.environ.get("RT_BENCH_PREFIX", "bench-mcp"),
    ),
    tools={TASK_TOOL: TaskSupport.REQUIRED},
    # The interval the CreateTaskResult advertises: the one the clients poll at.
    poll_interval=timedelta(milliseconds=int(os.environ.get("RT_BENCH_POLL_MS", "20"))),
)
server = MCPServer(
    "redis-tasks-bench",
    extensions=[tasks],
    lifespan=tasks.lifespan,
    token_verifier=_Tokens(),
    auth=AuthSettings(
        issuer_url="http://127.0.0.1:9/",  # type: ignore[arg-type]
        resource_server_url=None,
        required_scopes=["mcp"],
    ),
)


@server.tool()
async def noop() -> str:
    """Do nothing (run by a worker as a task)."""
    return "ok"


@server.tool()
def constant() -> str:
    """Return a constant at once (served inline; this library is not involved)."""
    return "ok"


#: The SDK's app, with the tasks/* fast path in front (RT_BENCH_FAST_PATH=0: without).
app = (
    tasks.asgi(server.streamable_http_app())
    if os.environ.get("RT_BENCH_FAST_PATH", "1") == "1"
    else server.streamable_http_app()
)
handler = tool_handler(server)
