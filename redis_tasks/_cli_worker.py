"""``redis-tasks worker MODULE:HANDLER``: run a worker process until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING, Any

from ._cli_common import (
    HandlerError,
    StartCheck,
    add_redis_options,
    check_redis_options,
    manager_from,
    only_partitions,
    park_after_arg,
    unavailable,
    wait_replicas_arg,
)
from ._cli_handler import load_handler
from ._errors import BackendError
from ._execution import Handler
from ._logs import configure_logging
from ._loop import LOOPS, loop_name, run
from ._telemetry.endpoints import Endpoints
from ._worker.health import HealthReport
from ._worker.worker import Worker

if TYPE_CHECKING:
    from ._telemetry.prometheus import PrometheusExport

__all__ = ["HandlerError", "add_worker_command", "run_worker"]

logger = logging.getLogger("redis_tasks.worker")


def add_worker_command(commands: Any) -> None:
    """Register the ``worker`` sub-command and its options."""
    worker = commands.add_parser("worker", help="run tasks with a handler until stopped")
    worker.add_argument(
        "handler",
        nargs="?",
        default=None,
        help="the handler, as MODULE:FUNCTION (a module on the path, dotted) or FILE.py:FUNCTION",
    )
    worker.add_argument(
        "--fastmcp",
        metavar="APP",
        default=None,
        help="run a FastMCP app's task tools instead of a handler: FILE.py:OBJECT or "
        "MODULE:OBJECT (e.g. app.py:mcp), with its redis_tasks.fastmcp.TasksExtension's "
        "Redis, prefix and partitions (--redis-url overrides the URL) and its lifespan",
    )
    add_redis_options(worker)
    worker.add_argument(
        "--concurrency",
        type=int,
        default=32,
        help="handlers running at once (default: %(default)s)",
    )
    worker.add_argument(
        "--newcomer-slots",
        type=int,
        default=0,
        help="slots beyond --concurrency that only a newcomer's task may take when every "
        "other slot is busy (a tenant that was not waiting; default: none)",
    )
    worker.add_argument(
        "--park-after",
        type=park_after_arg,
        default=1.0,
        help="seconds a handler waits for its client's input before its task is parked "
        "(its slot, lease and handler given back until the answer; at once while every slot "
        "is taken); never: waiting handlers keep their slots (default: 1)",
    )
    worker.add_argument(
        "--lease",
        type=float,
        default=30.0,
        help="seconds a claim holds its task without renewal; a crashed worker's tasks run "
        "again after it (default: %(default)s)",
    )
    worker.add_argument(
        "--max-attempts",
        type=int,
        default=5,
        help="claims of one task before it fails as poison (default: %(default)s)",
    )
    worker.add_argument(
        "--grace",
        type=float,
        default=None,
        help="seconds running handlers get at shutdown (default: one lease)",
    )
    worker.add_argument("--name", default=None, help="consumer name (default: host-pid-random)")
    worker.add_argument(
        "--wait-replicas",
        type=wait_replicas_arg,
        default="auto",
        help="outcomes (a claim's that ends its task included) wait for this many replicas "
        "(WAIT); auto, the default: one, on a primary that has one online; 0: never",
    )
    worker.add_argument(
        "--no-cancel-hints",
        action="store_true",
        help="learn of cancellation and answers from lease renewals and input polls only, "
        "not from change signals (newcomers' signals are still heard)",
    )
    worker.add_argument(
        "--loop",
        choices=LOOPS,
        default=None,
        help="event loop: uvloop when installed (auto, the default; or $REDIS_TASKS_LOOP), "
        "uvloop, or asyncio",
    )
    worker.add_argument(
        "--log-level",
        default="info",
        help="debug, info, warning or error (default: %(default)s); JSON lines on stderr",
    )
    worker.add_argument(
        "--whole-task-ids",
        action="store_true",
        help="logs and spans name tasks by their whole ID, not a short reference; only "
        "where every task is bound to an authenticated principal (a task ID alone reaches "
        "its task on a server without authentication)",
    )
    worker.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        help="serve Prometheus metrics at /metrics on this port (0: any free port; "
        "needs redis-mcp-tasks[otel])",
    )
    worker.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address /metrics listens on (default: %(default)s)",
    )
    worker.add_argument(
        "--health-port",
        type=int,
        default=None,
        help="answer GET /healthz (and /) on this port: 200 while reading and renewing, else 503",
    )
    worker.add_argument(
        "--health-host",
        default="127.0.0.1",
        help="address /healthz listens on (default: %(default)s)",
    )
    worker.add_argument(
        "--startup-timeout",
        type=float,
        default=60.0,
        help="seconds to keep trying to reach Redis at startup (default: 60)",
    )


def _await_chain(task: asyncio.Task[Any]) -> list[FrameType]:
    """The frames of ``task``'s coroutine and of every coroutine it awaits, outermost
    first (``Task.get_stack`` gives a suspended task's outermost frame only)."""
    frames: list[FrameType] = []
    awaited: Any = task.get_coro()
    while awaited is not None:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
        if frame is not None:
            frames.append(frame)
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
    return frames


def _dump_tasks() -> None:
    """SIGUSR1: log where every asyncio task is waiting (code locations only)."""
    for task in asyncio.all_tasks():
        where = " -> ".join(
            f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}" for f in _await_chain(task)
        )
        # "asyncio_task", not "name": a LogRecord has a `name` of its own, and logging
        # refuses an extra that would overwrite it (every dump raised KeyError).
        logger.warning(
            "task stack",
            extra={"event": "task_stack", "asyncio_task": task.get_name(), "where": where},
        )


async def _serve(
    args: argparse.Namespace,
    handler: Handler,
    export: PrometheusExport | None,
    start_check: StartCheck | None = None,
) -> int:
    worker: Worker | None = None

    def health() -> HealthReport:
        if worker is None:
            return HealthReport(False, "starting: waiting for Redis")
        return worker.health()

    def started(running: Worker) -> None:
        nonlocal worker
        worker = running

    endpoints = Endpoints(health, export)
    try:
        await endpoints.start(
            metrics=None if args.metrics_port is None else (args.metrics_host, args.metrics_port),
            health=None if args.health_port is None else (args.health_host, args.health_port),
        )
    except OSError as exc:
        logger.error(
            "could not start: an endpoint could not listen",
            extra={"event": "startup_failed", "error": type(exc).__name__},
        )
        return 1
    try:
        return await _serve_worker(args, handler, started, start_check)
    finally:
        # After the worker stopped: a probe sees 503 "stopping" until the very end.
        await endpoints.close()
        if export is not None:
            export.shutdown()


async def _serve_worker(
    args: argparse.Namespace,
    handler: Handler,
    started: Callable[[Worker], None],
    start_check: StartCheck | None = None,
) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    worker: Worker | None = None
    stopping: list[asyncio.Task[None]] = []

    def on_signal() -> None:
        stop.set()
        if worker is not None:
            stopping.append(loop.create_task(worker.stop(args.grace)))

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    loop.add_signal_handler(signal.SIGUSR1, _dump_tasks)
    only = only_partitions(args)
    deadline = loop.time() + args.startup_timeout
    delay = 0.2
    while not stop.is_set():
        manager = manager_from(
            args, wait_replicas=args.wait_replicas, whole_task_ids=args.whole_task_ids
        )
        candidate = Worker(
            manager,
            handler,
            concurrency=args.concurrency,
            newcomer_slots=args.newcomer_slots,
            park_after=None if args.park_after is None else timedelta(seconds=args.park_after),
            lease=timedelta(seconds=args.lease),
            max_attempts=args.max_attempts,
            partitions=only,
            name=args.name,
            cancel_hints=not args.no_cancel_hints,
        )
        try:
            # Redis may be down or failing over while a worker starts: wait for it.
            await manager.__aenter__()
            if start_check is not None:
                await start_check(manager)
            await candidate.__aenter__()
        except ValueError as exc:  # the start check refused: nothing to retry
            await manager.__aexit__(None, None, None)
            logger.error("could not start: %s", exc, extra={"event": "startup_refused"})
            return 2
        except BackendError as exc:
            await manager.__aexit__(None, None, None)
            why = unavailable(exc, args.redis_url)
            if loop.time() + delay > deadline:
                logger.error(
                    "could not start: %s",
                    why,
                    extra={"event": "startup_failed", "error": type(exc).__name__},
                )
                return 1
            logger.warning(
                "%s; retrying at startup",
                why,
                extra={"event": "startup_retry", "error": type(exc).__name__, "retry_in": delay},
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), delay)
            delay = min(delay * 2, 5.0)
            continue
        worker = candidate
        started(worker)
        try:
            if stop.is_set():
                break
            await worker.run()
        finally:
            await worker.__aexit__(None, None, None)
            await manager.__aexit__(None, None, None)
        break
    return 0


def run_worker(args: argparse.Namespace) -> int:
    """Run the worker the parsed ``args`` describe."""
    configure_logging(args.log_level)
    try:
        loop = loop_name(args.loop)
    except (ValueError, ImportError) as exc:
        print(f"redis-tasks worker: {exc}", file=sys.stderr)
        return 2
    app: Any = None
    if (args.handler is None) == (args.fastmcp is None):
        print(
            "redis-tasks worker: give a handler (MODULE:FUNCTION) or --fastmcp APP",
            file=sys.stderr,
        )
        return 2
    try:
        if args.fastmcp is not None:
            from ._cli_fastmcp import fastmcp_app

            app, handler, start_check = fastmcp_app(args)
        else:
            handler = load_handler(args.handler)
    except (HandlerError, ValueError) as exc:
        print(f"redis-tasks worker: {exc}", file=sys.stderr)
        return 2
    # After the app, whose extension may name the Redis.
    problem = check_redis_options(args)
    if problem is not None:
        print(f"redis-tasks worker: {problem}", file=sys.stderr)
        return 2
    export = None
    if args.metrics_port is not None:
        from ._telemetry.prometheus import PrometheusExport

        try:
            export = PrometheusExport()
        except ImportError as exc:
            print(f"redis-tasks worker: {exc}", file=sys.stderr)
            return 2
    if app is not None:
        return run(_serve_app(app, args, handler, export, start_check), loop)
    return run(_serve(args, handler, export), loop)


async def _serve_app(
    app: Any,
    args: argparse.Namespace,
    handler: Handler,
    export: PrometheusExport | None,
    start_check: StartCheck | None = None,
) -> int:
    """:func:`_serve` inside the FastMCP app's lifespan (its tools' resources)."""
    from .fastmcp._fastmcp import app_lifespan

    try:
        async with app_lifespan(app):
            return await _serve(args, handler, export, start_check)
    except BackendError as exc:
        logger.error(
            "could not start: %s",
            unavailable(exc, args.redis_url),
            extra={"event": "startup_failed", "error": type(exc).__name__},
        )
        return 1
