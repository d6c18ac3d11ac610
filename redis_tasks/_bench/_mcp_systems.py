"""The MCP servers the ``mcp`` scenario loads: :class:`McpSystem`, ours or a peer's.

:func:`mcp_system` gives ours (``redis_tasks._bench._mcp_app`` under uvicorn and
``redis-tasks worker`` processes), ours with the fast path off
(:data:`SDK_PATH`), fastmcp-tasks from its own virtualenv, or the same FastMCP app
on ``redis_tasks.fastmcp`` (:data:`FASTMCP_OURS`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from ._mcp_settings import MCP_PEERS, McpSettings

__all__ = ["FASTMCP_OURS", "SDK_PATH", "McpSystem", "mcp_system"]


@dataclass(frozen=True)
class McpSystem:
    """An MCP server of the tasks extension under test: how to run its processes.

    ``server(port)`` and ``worker(i)`` give command lines; ``env`` is added to
    every process's environment; ``wire`` is the lean client's :class:`Wire`
    settings; ``readers`` and ``server_readers`` are how many blocked
    ``XREADGROUP`` each ready worker and server process holds on Redis (how the
    harness tells they are ready); ``keys`` are the patterns of every key a run
    leaves (deleted after it).
    """

    name: str
    server: Callable[[int], Sequence[str]]
    worker: Callable[[int], Sequence[str]]
    env: dict[str, str]
    wire: dict[str, Any]
    task_tool: str = "noop"
    constant_tool: str = "constant"
    readers: int = 16
    server_readers: int = 0
    path: str = "/mcp"
    is_ours: bool = True
    cwd: str | None = None
    keys: tuple[str, ...] = ()


#: The name of ours with the fast path off, beside the peers.
SDK_PATH: Final = "redis-tasks (SDK path)"
#: The name of the peer's FastMCP app on redis_tasks.fastmcp (one import changed).
FASTMCP_OURS: Final = "FastMCP + redis-tasks"


def _uvicorn(interpreter: str, app: str) -> Callable[[int], Sequence[str]]:
    """A server's command line: ``app`` under uvicorn by ``interpreter``, on a loopback port."""

    def server(port: int) -> list[str]:
        return [interpreter, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
                "--log-level", "warning", "--no-access-log"]  # fmt: skip

    return server


def _ours(url: str, prefix: str, settings: McpSettings, *, fast_path: bool = True) -> McpSystem:

    def worker(index: int) -> list[str]:
        # The URL goes by $REDIS_URL, never on a command line (it may hold a password).
        return [sys.executable, "-m", "redis_tasks", "worker",
                "redis_tasks._bench._mcp_app:handler", "--prefix", prefix,
                "--concurrency", str(settings.concurrency),
                # As the other scenarios' in-process workers: no line per task.
                "--log-level", "warning", "--name", f"bench-mcp-{index}"]  # fmt: skip

    return McpSystem(
        name="redis-tasks" if fast_path else SDK_PATH,
        server=_uvicorn(sys.executable, "redis_tasks._bench._mcp_app:app"),
        worker=worker,
        env={
            "RT_BENCH_FAST_PATH": "1" if fast_path else "0",
            "RT_BENCH_REDIS_URL": url,
            "REDIS_URL": url,
            "RT_BENCH_PREFIX": prefix,
            "RT_BENCH_POLL_MS": str(settings.poll_ms),
        },
        wire={"token": "bench-token"},
    )


def _fastmcp_tasks(url: str, prefix: str, settings: McpSettings) -> McpSystem:
    """fastmcp-tasks (FastMCP + Docket) from its own virtualenv: ``make bench-fastmcp``."""
    python = Path(settings.peer_python)
    app = Path(settings.peers_dir) / "fastmcp_tasks_app.py"
    if not app.is_file():
        raise FileNotFoundError(f"no MCP peer app at {app} (run from a source checkout)")
    if not python.is_file():
        raise FileNotFoundError(f"no MCP peer interpreter at {python} (make bench-fastmcp)")
    interpreter = str(python.absolute())

    def worker(index: int) -> list[str]:
        return [interpreter, "-m", "fastmcp_tasks.worker_cli", "worker",
                "fastmcp_tasks_app.py:mcp"]  # fmt: skip

    return McpSystem(
        name="fastmcp-tasks",
        server=_uvicorn(interpreter, "fastmcp_tasks_app:app"),
        worker=worker,
        env={
            "FASTMCP_DOCKET_URL": url,
            "FASTMCP_DOCKET_NAME": prefix,
            "FASTMCP_DOCKET_CONCURRENCY": str(settings.concurrency),
            "RT_BENCH_POLL_MS": str(settings.poll_ms),
        },
        wire={"token": "bench-token"},
        # Docket blocks one XREADGROUP per worker, in the servers' own workers too.
        readers=1,
        server_readers=1,
        is_ours=False,
        cwd=str(app.parent.absolute()),
        # Docket prefixes every key with the queue name (hash-tagged on a cluster).
        keys=(f"{prefix}:*", f"{{{prefix}}}:*"),
    )


def _fastmcp_ours(url: str, prefix: str, settings: McpSettings) -> McpSystem:
    """The fastmcp-tasks peer's app with ``TasksExtension`` from ``redis_tasks.fastmcp``,
    in this interpreter: servers under uvicorn, ``redis-tasks worker --fastmcp``."""
    app = Path(settings.peers_dir) / "fastmcp_redis_tasks_app.py"
    if not app.is_file():
        raise FileNotFoundError(f"no FastMCP app at {app} (run from a source checkout)")

    def worker(index: int) -> list[str]:
        return [sys.executable, "-m", "redis_tasks", "worker",
                "--fastmcp", "fastmcp_redis_tasks_app.py:mcp",
                "--concurrency", str(settings.concurrency),
                "--log-level", "warning", "--name", f"bench-fastmcp-{index}"]  # fmt: skip

    return McpSystem(
        name=FASTMCP_OURS,
        server=_uvicorn(sys.executable, "fastmcp_redis_tasks_app:app"),
        worker=worker,
        # The URL goes by $REDIS_URL, never on a command line (it may hold a password).
        env={
            "REDIS_URL": url,
            "REDIS_TASKS_PREFIX": prefix,
            "RT_BENCH_POLL_MS": str(settings.poll_ms),
        },
        wire={"token": "bench-token"},
        cwd=str(app.parent.absolute()),
    )


def mcp_system(url: str, prefix: str, settings: McpSettings, peer: str | None) -> McpSystem:
    """``peer`` (one of :data:`MCP_PEERS`), or ours when None, for ``url`` and ``prefix``."""
    if peer is None:
        return _ours(url, prefix, settings)
    if peer == SDK_PATH:
        return _ours(url, prefix, settings, fast_path=False)
    if peer == FASTMCP_OURS:
        return _fastmcp_ours(url, prefix, settings)
    if peer not in MCP_PEERS:
        raise ValueError(f"unknown MCP peer {peer!r}; known: {', '.join(MCP_PEERS)}")
    return _fastmcp_tasks(url, prefix, settings)
