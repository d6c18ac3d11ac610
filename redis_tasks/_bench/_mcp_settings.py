"""The ``mcp`` scenario's sizes: :class:`McpSettings`, the peers it can load, its options.

:func:`add_mcp_options` puts the ``--mcp-*`` options on the ``bench`` sub-command's
parser and :func:`mcp_settings` reads them back as :class:`McpSettings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from ._args import positive

__all__ = ["MCP_PEERS", "McpSettings", "add_mcp_options", "mcp_settings"]

#: The other servers of the extension the scenario can load instead of ours.
MCP_PEERS: Final = ("fastmcp-tasks",)


@dataclass(frozen=True)
class McpSettings:
    """Sizes of the ``mcp`` scenario (the CLI's ``--mcp-*`` options)."""

    servers: int = 2
    workers: int = 2
    clients: int = 64
    tasks: int = 2_000
    poll_ms: int = 20
    pollers: int = 64
    polls: int = 10_000
    client_processes: int = 2
    concurrency: int = 32
    #: Also load this peer (one of :data:`MCP_PEERS`) in the same run, after ours.
    peer: str | None = None
    #: Also load ours with the fast path off (every request through the SDK's own
    #: dispatcher): the before/after of ``TasksExtension.asgi`` in one run.
    sdk_path: bool = False
    #: Also load the peer's FastMCP app on redis_tasks.fastmcp ("FastMCP + redis-tasks").
    fastmcp: bool = False
    #: The peer's virtualenv interpreter and the directory of its app.
    peer_python: str = "benchmarks/.venv-fastmcp/bin/python"
    peers_dir: str = "benchmarks/peers"


def add_mcp_options(bench: Any) -> None:
    """The ``mcp`` scenario's options, on the ``bench`` sub-command's parser."""
    defaults = McpSettings()
    group = bench.add_argument_group("mcp scenario (the tasks extension over streamable HTTP)")
    group.add_argument(
        "--mcp-servers", type=positive, default=defaults.servers, help="uvicorn processes"
    )
    group.add_argument(
        "--mcp-workers",
        type=positive,
        default=defaults.workers,
        help="redis-tasks worker processes (each at --concurrency)",
    )
    group.add_argument(
        "--mcp-clients", type=positive, default=defaults.clients, help="concurrent callers"
    )
    group.add_argument(
        "--mcp-tasks", type=positive, default=defaults.tasks, help="tasks in the lifecycle phase"
    )
    group.add_argument(
        "--mcp-poll-ms",
        type=positive,
        default=defaults.poll_ms,
        help="tasks/get interval of each caller",
    )
    group.add_argument(
        "--mcp-pollers",
        type=positive,
        default=defaults.pollers,
        help="concurrent pollers of the tasks/get and SDK tools/call phases",
    )
    group.add_argument(
        "--mcp-polls",
        type=positive,
        default=defaults.polls,
        help="requests in each of those two phases",
    )
    group.add_argument(
        "--mcp-peer",
        choices=MCP_PEERS,
        default=None,
        help="also load this other server of the extension, same sizes, same run "
        "(from a source checkout: make bench-fastmcp)",
    )
    group.add_argument(
        "--mcp-sdk-path",
        action="store_true",
        help="also load ours with the tasks/* fast path off (the SDK's dispatcher for "
        "every request): before and after, same run",
    )
    group.add_argument(
        "--mcp-fastmcp",
        action="store_true",
        help="also load the fastmcp-tasks peer's FastMCP app with redis_tasks.fastmcp's "
        "TasksExtension (FastMCP + redis-tasks), same sizes, same run",
    )
    group.add_argument(
        "--mcp-peer-python",
        default=defaults.peer_python,
        help="the MCP peer's virtualenv interpreter (default: %(default)s)",
    )
    group.add_argument(
        "--mcp-client-processes",
        type=positive,
        default=defaults.client_processes,
        help="client processes the callers are spread over",
    )


def mcp_settings(args: Any) -> McpSettings:
    """The ``mcp`` scenario's settings from parsed ``bench`` arguments."""
    return McpSettings(
        servers=args.mcp_servers,
        workers=args.mcp_workers,
        clients=args.mcp_clients,
        tasks=args.mcp_tasks,
        poll_ms=args.mcp_poll_ms,
        pollers=args.mcp_pollers,
        polls=args.mcp_polls,
        client_processes=args.mcp_client_processes,
        concurrency=args.concurrency,
        peer=args.mcp_peer,
        sdk_path=args.mcp_sdk_path,
        fastmcp=args.mcp_fastmcp,
        peer_python=args.mcp_peer_python,
        peers_dir=str(args.peers_dir),
    )
