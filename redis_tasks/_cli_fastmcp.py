"""The ``--fastmcp`` side of ``redis-tasks worker``: the app it names, its handler, and
the worker's start check (its snapshot key against the servers')."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from ._cli_common import HandlerError, StartCheck
from ._execution import Handler
from ._redis.manager import RedisTaskManager
from ._version import install_hint

__all__ = ["fastmcp_app"]


def fastmcp_app(args: argparse.Namespace) -> tuple[Any, Handler, StartCheck]:
    """The FastMCP app ``--fastmcp`` names, its handler, and the worker's start check
    (its snapshot key against the servers'); ``args`` take its extension's Redis
    settings. Raises ``ValueError`` (one line) when it cannot be served."""
    try:
        from .fastmcp import tool_handler
        from .fastmcp._key_check import check_worker_key
        from .fastmcp._loading import load_app
        from .fastmcp._snapshot import warn_without_key
    except ImportError as exc:
        raise HandlerError(f"--fastmcp needs FastMCP: {install_hint('fastmcp')} ({exc})") from None
    if args.redis_url:
        # --redis-url is the Redis the app's TasksExtension() reads, as $REDIS_URL is.
        os.environ["REDIS_URL"] = args.redis_url
    app, extension = load_app(args.fastmcp)
    _fastmcp_logs_as_json()
    settings = extension.manager_settings
    if settings is not None:
        prefix = settings[0]
        if getattr(args, "prefix_given", False) and args.prefix != prefix:
            raise HandlerError(
                f"--prefix {args.prefix} is not the app's prefix ({prefix}, its "
                "TasksExtension's): a worker serves its app's queue; drop --prefix"
            )
        args.prefix, args.partitions, args.timeout = settings
        args.redis_url = args.redis_url or extension.url
    if not args.redis_url:
        raise HandlerError(
            "the app's TasksExtension was given a manager: name its Redis with --redis-url"
        )
    extension.worker_mode()
    key, accept_unbound = extension.snapshot_key, extension.accept_unbound_snapshots
    if key is None:
        warn_without_key("this worker")

    async def start_check(manager: RedisTaskManager) -> None:
        await check_worker_key(manager, key, accept_unbound=accept_unbound)

    handler = tool_handler(
        app,
        snapshot_key=key,
        accept_unbound=accept_unbound,
        middleware=extension.worker_middleware,
    )
    return app, handler, start_check


class _TaskHint(logging.Filter):
    """Drops FastMCP's "Consider using task=True" from a timed-out tool's line: in a worker
    the tool is a task already, and the rest of the line (which tool, how long) stands."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and _HINT in record.msg:
            record.msg = record.msg.split(_HINT, 1)[0].rstrip()
        return True


#: Where FastMCP's hint starts in its timeout line.
_HINT = "Consider using task=True"


def _fastmcp_logs_as_json() -> None:
    """FastMCP's own log lines (its console handlers) as the worker's JSON lines on stderr,
    the handler ``configure_logging`` gave ``redis_tasks``: one format to read and parse."""
    ours = logging.getLogger("redis_tasks").handlers
    if not ours:
        return  # not run from the command line: the application's logging stands
    fastmcp_logger = logging.getLogger("fastmcp")
    fastmcp_logger.handlers[:] = [*ours]
    fastmcp_logger.propagate = False
    for handler in fastmcp_logger.handlers:
        if not any(isinstance(f, _TaskHint) for f in handler.filters):
            handler.addFilter(_TaskHint())
