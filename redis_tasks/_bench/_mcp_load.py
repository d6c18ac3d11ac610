"""The ``mcp`` scenario: the tasks extension end to end, over streamable HTTP.

The demo's shape: K uvicorn processes serve :mod:`._mcp_app` (an ``MCPServer``
with :class:`~redis_tasks.mcp.TasksExtension`), W ``redis-tasks worker``
processes run its tool handler, and N callers in a few lean client processes
(:mod:`._mcp_client`) load them. Three measured phases and one in-process timing:

1. *lifecycle*: ``tools/call`` of the task tool, then ``tasks/get`` every P ms
   until terminal. tasks/s, create and create-to-terminal latency, errors, lost
   tasks, and CPU per task of the servers, workers, Redis and clients.
2. *tasks/get*: M pollers hammer ``tasks/get`` on completed tasks: polls/s and
   server CPU per poll.
3. *SDK baseline*: the same hammering with ``tools/call`` of a plain tool this
   library never touches: calls/s and server CPU per call.
4. the library's own part of one ``tasks/get``, timed in this process: the
   authorizer, ``find_task`` (at the per-server concurrency of phase 2) and the
   reply's rendering. Over phase 2's server CPU per poll it gives the library's
   share of a ``tasks/get``; the rest is the SDK and HTTP.

Process CPU comes from ``/proc/<pid>/stat`` (Linux; elsewhere those figures are
left out), Redis CPU from ``INFO``, the clients' from their own
``process_time``. Every run uses a fresh key prefix and deletes its keys.

This module runs it and compares ours with the others; the parts are the sizes
and options (:mod:`._mcp_settings`), the servers under test (:mod:`._mcp_systems`),
their processes (:mod:`._mcp_processes`), one measured phase (:mod:`._mcp_phase`),
the in-process timing (:mod:`._mcp_library_timing`) and the figures
(:mod:`._mcp_figures`).
"""

from __future__ import annotations

from typing import IO, Any, Final

from redis_tasks._redis.manager import RedisTaskManager
from redis_tasks._version import install_hint

from ._adapter import delete_prefix
from ._mcp_figures import figures, mcp_lines
from ._mcp_library_timing import library_timing
from ._mcp_phase import phase
from ._mcp_processes import running
from ._mcp_settings import MCP_PEERS, McpSettings, add_mcp_options, mcp_settings
from ._mcp_systems import FASTMCP_OURS, SDK_PATH, McpSystem, mcp_system
from ._namespace import RunNames
from ._probe import Probe
from ._progress import Progress
from ._systems import AdapterError

__all__ = [
    "MCP_PEERS",
    "McpSettings",
    "McpSystem",
    "add_mcp_options",
    "mcp_lines",
    "mcp_runs",
    "mcp_scenario",
    "mcp_settings",
    "mcp_system",
]

_CALL_TIMEOUT: Final = 30.0  # every HTTP request's deadline in the clients


async def mcp_runs(
    url: str, settings: McpSettings, progress: Progress, log: IO[bytes], names: RunNames
) -> dict[str, Any]:
    """The ``mcp`` scenario on ours and, when asked, the peer, one after the other.

    Returns ``{"mcp": ours}``, with ``"mcp_peers": {name: figures}`` for a peer.
    """
    if settings.peer is not None:
        mcp_system(url, "check", settings, settings.peer)  # a missing venv fails first
    out: dict[str, Any] = {"mcp": await mcp_scenario(url, settings, progress, log, names)}
    others = (
        ([SDK_PATH] if settings.sdk_path else [])
        + ([FASTMCP_OURS] if settings.fastmcp else [])
        + ([settings.peer] if settings.peer is not None else [])
    )
    rows: dict[str, Any] = {}
    for name in others:
        row = await mcp_scenario(url, settings, progress, log, names, peer=name)
        row["ours_over_it"] = _ratios(out["mcp"], row)
        rows[name] = row
    # The same FastMCP app on both backends: ours over fastmcp-tasks, side by side.
    if FASTMCP_OURS in rows and "fastmcp-tasks" in rows:
        rows["fastmcp-tasks"]["fastmcp_ours_over_it"] = _ratios(
            rows[FASTMCP_OURS], rows["fastmcp-tasks"]
        )
    if rows:
        out["mcp_peers"] = rows
    return out


def _ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """Our figures over the peer's: above 1 means ours is faster or cheaper."""
    pairs = {
        "tasks_per_s": (ours["rate"], theirs["rate"]),
        "p50": (theirs["p50"], ours["p50"]),
        "p99": (theirs["p99"], ours["p99"]),
        "create_p50": (theirs["create_p50"], ours["create_p50"]),
        "get_per_s": (ours["get"]["rate"], theirs["get"]["rate"]),
        "get_server_us": (
            theirs["get"].get("servers_us_per_poll"),
            ours["get"].get("servers_us_per_poll"),
        ),
        "server_plus_worker_us_per_task": (
            _sum(theirs, "servers_us_per_task", "workers_us_per_task"),
            _sum(ours, "servers_us_per_task", "workers_us_per_task"),
        ),
        "redis_us_per_task": (theirs.get("redis_us_per_task"), ours.get("redis_us_per_task")),
    }
    return {name: round(a / b, 2) for name, (a, b) in pairs.items() if a and b}


def _sum(row: dict[str, Any], *keys: str) -> float | None:
    values = [row.get(key) for key in keys]
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


async def mcp_scenario(
    url: str,
    settings: McpSettings,
    progress: Progress,
    log: IO[bytes],
    names: RunNames,
    peer: str | None = None,
) -> dict[str, Any]:
    """Run the ``mcp`` scenario against ``url`` on ours (or ``peer``), under a fresh
    queue name of the run ``names``; the figures."""
    if peer is None:
        for module in ("mcp", "uvicorn"):
            if not _importable(module):
                raise AdapterError(f"the mcp scenario needs {module}: {install_hint('mcp')}")
    prefix = names.queue()
    system = mcp_system(url, prefix, settings, peer)
    n = settings.tasks
    job = {
        "endpoints": [],
        "wire": system.wire,
        "timeout": _CALL_TIMEOUT,
        "poll_ms": settings.poll_ms,
    }
    async with Probe(url) as probe, RedisTaskManager.from_url(url, prefix=prefix) as manager:
        try:
            async with running(system, settings, probe, log) as stack:
                job["endpoints"] = stack.endpoints()
                life = await phase(
                    stack, probe, log, progress, f"mcp lifecycle ({system.name})",
                    {**job, "mode": "lifecycle", "tool": system.task_tool,
                     "keep": max(1, settings.pollers // settings.client_processes)},
                    settings.clients, n, settings.client_processes,
                )  # fmt: skip
                if not life["completed"]:
                    raise AdapterError("no task of the mcp lifecycle phase completed")
                get = await phase(
                    stack, probe, log, progress, f"mcp tasks/get ({system.name})",
                    {**job, "mode": "get", "tool": system.task_tool,
                     "task_ids": life["completed"]},
                    settings.pollers, settings.polls, settings.client_processes,
                )  # fmt: skip
                call = await phase(
                    stack, probe, log, progress, f"mcp SDK tools/call ({system.name})",
                    {**job, "mode": "call", "tool": system.constant_tool},
                    settings.pollers, settings.polls, settings.client_processes,
                )  # fmt: skip
            library = (
                await library_timing(url, prefix, life["completed"], settings, progress)
                if system.is_ours
                else None
            )
        finally:
            await delete_prefix(manager)
            for pattern in system.keys:
                await _delete_matching(manager, pattern)
    return figures(system, settings, life, get, call, library)


async def _delete_matching(manager: RedisTaskManager, pattern: str) -> None:
    """Unlink every key matching ``pattern`` on every primary (a peer's keys)."""
    for client in manager.primary_clients():
        keys = [key async for key in client.scan_iter(match=pattern, count=1000)]
        # One slot per UNLINK on a cluster: a peer's keys share its hash tag there.
        for i in range(0, len(keys), 1000):
            await client.unlink(*keys[i : i + 1000])


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None
