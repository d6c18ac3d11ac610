"""``redis-tasks dashboard --port N``: serve the live read-only page until SIGTERM/SIGINT.

The page shows what ``redis-tasks inspect`` does (backlog, pending entries,
consumers, leases about to run out, tasks by status) with live charts of
throughput, backlog and pickup latency; a task only by its reference, never its
ID. It listens on 127.0.0.1 unless told otherwise. Beyond loopback it needs a
bearer token (``--token`` or ``$REDIS_TASKS_DASHBOARD_TOKEN``: :mod:`._dashboard.auth`)
and refuses to start without one; with a token, every request must carry it.
``--allow-host`` names the host names a page may use. The token is never logged.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterator
from typing import Any

from ._cli_common import (
    add_redis_options,
    add_sample_option,
    check_redis_options,
    manager_from,
    only_partitions,
)
from ._dashboard.auth import TOKEN_ENV, token_problem
from ._logs import configure_logging
from ._loop import run
from ._version import install_hint

__all__ = ["add_dashboard_command", "run_dashboard"]

logger = logging.getLogger("redis_tasks.dashboard")


def add_dashboard_command(commands: Any) -> None:
    """Register the ``dashboard`` sub-command and its options."""
    dashboard = commands.add_parser(
        "dashboard", help="serve a live read-only page of the work queues"
    )
    add_redis_options(dashboard)
    dashboard.add_argument("--port", type=int, default=8089, help="port (default 8089; 0: any)")
    dashboard.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: %(default)s)"
    )
    dashboard.add_argument(
        "--allow-host",
        action="append",
        default=None,
        help="a host name pages may reach the dashboard by (repeat; default: 127.0.0.1 and "
        "localhost on loopback, any elsewhere)",
    )
    dashboard.add_argument(
        "--token",
        default=os.environ.get(TOKEN_ENV),
        help=f"a bearer token every request must carry (default: ${TOKEN_ENV}, which keeps it "
        "out of the process list); required beyond loopback",
    )
    dashboard.add_argument(
        "--interval", type=float, default=2.0, help="seconds between readings (default 2)"
    )
    add_sample_option(dashboard)
    dashboard.add_argument("--log-level", default="info")


def _server_class() -> type[Any]:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn's server, stopped by our signal handlers: its own would re-raise
        SIGTERM once stopped, and a clean stop would exit as if killed."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield

        def stop(self) -> None:
            self.should_exit = True

    return Server


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _problem(args: argparse.Namespace) -> str | None:
    problem = check_redis_options(args)
    if problem is not None:
        return problem
    if not 0 <= args.port <= 65535:
        return "--port must be 0 to 65535"
    if not 0.1 <= args.interval <= 3600:
        return "--interval must be 0.1 to 3600 seconds"
    problem = token_problem(args.token, loopback=_loopback(args.host))
    if problem is not None:
        return f"--host {args.host}: {problem}" if not args.token else problem
    return None


async def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    _Server = _server_class()
    from ._dashboard.app import LOOPBACK_HOSTS, Sampler, dashboard_app

    if args.allow_host:
        allowed = list(args.allow_host)
    elif _loopback(args.host):
        allowed = list(LOOPBACK_HOSTS)
    else:
        allowed = ["*"]  # the token guards it (token_problem refused to start without one)
    token = args.token or None
    if token is not None:
        logger.info(
            "every request must carry the dashboard's bearer token",
            extra={"event": "dashboard_token_required"},
        )
    sampler = Sampler(
        manager_from(args),
        interval=args.interval,
        sample=args.sample,
        partitions=only_partitions(args),
    )
    config = uvicorn.Config(
        dashboard_app(sampler, allowed_hosts=allowed, token=token),
        host=args.host,
        port=args.port,
        log_level="warning",
        access_log=False,
        lifespan="on",
    )
    server = _Server(config)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, server.stop)
    # Bound here, not by uvicorn, so the port (any free one for --port 0) is known
    # before serving, without waiting for the server to report it.
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((args.host, args.port))
        listener.listen(config.backlog)  # a request now waits for the server to accept it
    except OSError as exc:
        listener.close()
        logger.error(
            "could not start: the dashboard could not listen",
            extra={"event": "startup_failed", "error": type(exc).__name__},
        )
        return 1
    port = listener.getsockname()[1]
    shown = f"[{args.host}]" if ":" in args.host else args.host
    logger.info(
        f"dashboard on http://{shown}:{port}/",
        extra={"event": "dashboard_listening", "port": port},
    )
    await server.serve(sockets=[listener])
    logger.info("dashboard stopped", extra={"event": "dashboard_stopped"})
    return 0 if server.started else 1


def run_dashboard(args: argparse.Namespace) -> int:
    """Run ``redis-tasks dashboard`` for the parsed ``args``."""
    problem = _problem(args)
    if problem is not None:
        print(f"redis-tasks dashboard: {problem}", file=sys.stderr)
        return 2
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError:
        print(
            f"redis-tasks dashboard: needs Starlette and uvicorn: {install_hint('dashboard')}",
            file=sys.stderr,
        )
        return 2
    configure_logging(args.log_level)
    return run(_serve(args), "asyncio")
