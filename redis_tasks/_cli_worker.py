"""``redis-tasks worker MODULE:HANDLER``: run a worker process until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import signal
import sys
from datetime import timedelta
from typing import Any

from ._execution import Handler
from ._logs import configure_logging
from ._redis import RedisTaskManager
from ._worker import Worker

__all__ = ["add_worker_command", "load_handler", "run_worker"]


def load_handler(spec: str) -> Handler:
    """Import ``module.path:function``; the function is the task handler."""
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise SystemExit(f"handler must be MODULE:FUNCTION, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`, find modules in the current dir
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise SystemExit(f"{spec} is not callable")
    handler: Handler = target
    return handler


def add_worker_command(commands: Any) -> None:
    """Register the ``worker`` sub-command and its options."""
    worker = commands.add_parser("worker", help="run tasks with a handler until stopped")
    worker.add_argument("handler", help="the handler, as MODULE:FUNCTION")
    worker.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="Redis to use (default: $REDIS_URL)",
    )
    worker.add_argument("--prefix", default="rt", help="key prefix (default: rt)")
    worker.add_argument(
        "--partitions", type=int, default=16, help="partitions of the prefix (default: 16)"
    )
    worker.add_argument(
        "--only-partitions",
        default=None,
        help="comma-separated partitions this worker reads (default: all)",
    )
    worker.add_argument("--concurrency", type=int, default=32)
    worker.add_argument("--lease", type=float, default=30.0, help="lease in seconds")
    worker.add_argument("--max-attempts", type=int, default=5)
    worker.add_argument(
        "--grace",
        type=float,
        default=None,
        help="seconds running handlers get at shutdown (default: one lease)",
    )
    worker.add_argument("--name", default=None, help="consumer name (default: host-pid-random)")
    worker.add_argument("--timeout", type=float, default=5.0, help="Redis call timeout (s)")
    worker.add_argument(
        "--no-cancel-hints",
        action="store_true",
        help="learn of cancellation from lease renewals only, not from change events",
    )
    worker.add_argument("--log-level", default="info")


async def _serve(args: argparse.Namespace, handler: Handler) -> None:
    manager = RedisTaskManager.from_url(
        args.redis_url, prefix=args.prefix, partitions=args.partitions, timeout=args.timeout
    )
    only = None
    if args.only_partitions:
        only = [int(p) for p in args.only_partitions.split(",")]
    async with manager:
        worker = Worker(
            manager,
            handler,
            concurrency=args.concurrency,
            lease=timedelta(seconds=args.lease),
            max_attempts=args.max_attempts,
            partitions=only,
            name=args.name,
            cancel_hints=not args.no_cancel_hints,
        )
        loop = asyncio.get_running_loop()
        stopping: list[asyncio.Task[None]] = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(
                sig, lambda: stopping.append(loop.create_task(worker.stop(args.grace)))
            )
        async with worker:
            await worker.run()


def run_worker(args: argparse.Namespace) -> int:
    """Run the worker the parsed ``args`` describe."""
    if not args.redis_url:
        print("redis-tasks worker needs --redis-url or REDIS_URL", file=sys.stderr)
        return 2
    configure_logging(args.log_level)
    handler = load_handler(args.handler)
    asyncio.run(_serve(args, handler))
    return 0
