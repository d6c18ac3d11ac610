"""fastmcp-tasks as the ``mcp`` scenario's peer: the same two tools on FastMCP + Docket.

Runs in its own virtualenv (``benchmarks/.venv-fastmcp``, ``make bench-fastmcp``).
The harness serves ``app`` with uvicorn and runs out-of-process workers with
``python -m fastmcp_tasks.worker_cli worker benchmarks/peers/fastmcp_tasks_app.py:mcp``,
all configured by the environment: ``FASTMCP_DOCKET_URL`` (the Redis),
``FASTMCP_DOCKET_NAME`` (the run's fresh queue name, the prefix of every key),
``FASTMCP_DOCKET_CONCURRENCY`` (each worker's concurrency) and
``RT_BENCH_POLL_MS`` (the poll interval the tool advertises). Every other
setting is the library's default.

- ``noop`` is a ``required`` task tool that returns a constant, ``constant`` a
  plain synchronous tool (the SDK baseline), as in ``redis_tasks._bench._mcp_app``.
- Bearer token ``bench-token``, checked by FastMCP's ``StaticTokenVerifier`` (the
  counterpart of our demo's verifier).
- fastmcp-tasks starts a Docket worker inside every server process as well (its
  lifespan always does), so its servers run tasks too, beside the worker processes.
"""

from __future__ import annotations

import os
from datetime import timedelta

from fastmcp import FastMCP
from fastmcp.server.auth.providers.jwt import StaticTokenVerifier
from fastmcp.utilities.tasks import TaskConfig
from fastmcp_tasks import TasksExtension

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
