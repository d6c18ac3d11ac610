"""``redis-tasks inspect [TASK_ID]``: the work queues, or one task, as an operator sees them.

Without a task ID it reads every partition once (``RedisTaskManager.inspect``,
one read-only script call per partition) and prints the totals, a row per
partition, the consumers, the tenants (how many wait, the top ones by backlog
and by running, refusals by reason) and the leases about to run out; ``--watch`` redraws
every few seconds with the rates since the last reading, and ``--json`` prints
JSON (one document per reading) for scripts. With a task ID it prints that
task's status, times, lease, fence, attempts and work entry. Neither reads nor
prints a task's origin, payload, answers or result, and the Redis URL is never
printed. Tenants are shown by digest; ``--tenant-key KEY`` (repeatable) digests
``KEY`` here and shows it beside its digest, the only way a tenant key is shown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any, TextIO

from ._cli_common import (
    add_redis_options,
    add_sample_option,
    check_redis_options,
    manager_from,
    only_partitions,
)
from ._errors import BackendError, InternalError
from ._inspection import Inspection, Rates
from ._inspection.tenants import named_tenants
from ._inspection.text import render_inspection, render_task
from ._loop import run
from ._redis.manager import RedisTaskManager

__all__ = ["add_inspect_command", "run_inspect"]

_CLEAR = "\x1b[H\x1b[2J"


def add_inspect_command(commands: Any) -> None:
    """Register the ``inspect`` sub-command and its options."""
    inspect = commands.add_parser(
        "inspect", help="show the work queues (or one task): backlog, leases, statuses"
    )
    inspect.add_argument("task_id", nargs="?", default=None, help="show this task only")
    add_redis_options(inspect)
    add_sample_option(inspect)
    inspect.add_argument(
        "--expiring",
        type=float,
        default=10.0,
        help="list leases that run out within this many seconds (default 10)",
    )
    inspect.add_argument(
        "--watch",
        type=float,
        nargs="?",
        const=2.0,
        default=None,
        metavar="SECONDS",
        help="redraw every SECONDS (default 2) until interrupted",
    )
    inspect.add_argument(
        "--count", type=int, default=None, help="with --watch: stop after this many readings"
    )
    inspect.add_argument("--json", action="store_true", help="print JSON instead of tables")
    inspect.add_argument(
        "--tenant-key",
        action="append",
        default=[],
        metavar="KEY",
        help="show this tenant key (create_task's tenant=) beside its digest; repeatable",
    )


def _problem(args: argparse.Namespace) -> str | None:
    problem = check_redis_options(args)
    if problem is not None:
        return problem
    if not args.expiring >= 0:
        return "--expiring must not be negative"
    if args.watch is not None and not args.watch > 0:
        return "--watch must be positive"
    if args.count is not None and (args.watch is None or args.count < 1):
        return "--count needs --watch and must be at least 1"
    if args.task_id is not None and args.watch is not None:
        return "--watch shows the queues, not one task"
    for key in args.tenant_key:
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            return "--tenant-key must be valid UTF-8"  # and is not repeated here
    return None


async def _show_task(manager: RedisTaskManager, args: argparse.Namespace, out: TextIO) -> int:
    task = await manager.inspect_task(args.task_id)
    if task is None:
        print(
            "redis-tasks inspect: no such task (unknown, expired or malformed ID)", file=sys.stderr
        )
        return 1
    names = named_tenants(args.tenant_key)
    if args.json:
        found = task.to_json()
        found["tenant_key"] = names.get(task.tenant or "")
        print(json.dumps(found, sort_keys=True), file=out)
    else:
        print("\n".join(render_task(task, names)), file=out)
    return 0


def _print(
    inspection: Inspection,
    args: argparse.Namespace,
    previous: Inspection | None,
    out: TextIO,
) -> None:
    names = named_tenants(args.tenant_key)
    if args.json:
        document = inspection.to_json(names=names)
        print(json.dumps(document, sort_keys=True), file=out, flush=True)
        return
    rates = None if previous is None else Rates(previous, inspection)
    lines = render_inspection(
        inspection,
        prefix=args.prefix,
        expiring_ms=round(args.expiring * 1000),
        rates=rates,
        names=names,
    )
    redraw = args.watch is not None and out.isatty()
    print((_CLEAR if redraw else "") + "\n".join(lines), file=out, flush=True)
    if args.watch is not None and not redraw:
        print(file=out, flush=True)  # a blank line between readings in a log


async def _show_queues(manager: RedisTaskManager, args: argparse.Namespace, out: TextIO) -> int:
    chosen = only_partitions(args)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    if args.watch is not None:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
    previous: Inspection | None = None
    readings = 0
    while True:
        inspection = await manager.inspect(chosen, sample=args.sample)
        _print(inspection, args, previous, out)
        readings += 1
        previous = inspection
        if args.watch is None or (args.count is not None and readings >= args.count):
            return 0
        try:
            await asyncio.wait_for(stop.wait(), args.watch)
        except TimeoutError:
            continue
        return 0


async def _inspect(args: argparse.Namespace, out: TextIO) -> int:
    try:
        async with manager_from(args) as manager:
            if args.task_id is not None:
                return await _show_task(manager, args, out)
            return await _show_queues(manager, args, out)
    except BackendError as exc:
        # The URL may hold a password: the message names the failure's kind only.
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "BackendError"
        print(f"redis-tasks inspect: Redis unavailable ({cause})", file=sys.stderr)
        return 1
    except InternalError:
        print("redis-tasks inspect: an unexpected reply from Redis", file=sys.stderr)
        return 1


def run_inspect(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``redis-tasks inspect`` for the parsed ``args``."""
    problem = _problem(args)
    if problem is not None:
        print(f"redis-tasks inspect: {problem}", file=sys.stderr)
        return 2
    return run(_inspect(args, out or sys.stdout), "asyncio")
