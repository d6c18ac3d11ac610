"""``redis-tasks inspect [TASK]``: the work queues, or tasks, as an operator sees them.

Without a task ID it reads every partition once (``RedisTaskManager.inspect``,
one read-only script call per partition) and prints the totals, a row per
partition, the consumers, the tenants (how many wait, the top ones by backlog
and by running, refusals by reason) and the leases about to run out; ``--watch`` redraws
every few seconds with the rates since the last reading, and ``--json`` prints
JSON (one document per reading) for scripts; a lease names its task by reference
(``11.Wt0jM9``), never by ID. With a task ID it prints that task's status, times,
lease, fence, attempts and work entry; with a reference (as logs, spans and the
dashboard name a task) or any longer prefix of an ID, the same for each live
task it matches in its partition (a bounded ``SCAN``: the user needs ``+scan``).
Neither reads nor prints a task's origin, payload, answers or result, and the
Redis URL is never printed. Tenants are shown by digest; ``--tenant-key KEY``
(repeatable) digests ``KEY`` here and shows it beside its digest, the only way a
tenant key is shown.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any, TextIO

from redis.exceptions import NoPermissionError

from ._cli_common import (
    add_redis_options,
    add_sample_option,
    add_tenant_key_option,
    check_redis_options,
    manager_from,
    only_partitions,
    run_reading,
    tenant_key_problem,
)
from ._errors import BackendError
from ._ids import parse_task_id
from ._inspection import Inspection, Rates, TaskInspection
from ._inspection.tenants import named_tenants
from ._inspection.text import render_inspection, render_task
from ._redis.manager import RedisTaskManager
from ._redis.setup import hush_start_warnings

__all__ = ["add_inspect_command", "run_inspect"]

_CLEAR = "\x1b[H\x1b[2J"


def add_inspect_command(commands: Any) -> None:
    """Register the ``inspect`` sub-command and its options."""
    inspect = commands.add_parser(
        "inspect", help="show the work queues (or one task): backlog, leases, statuses"
    )
    inspect.add_argument(
        "task_id",
        nargs="?",
        default=None,
        metavar="TASK",
        help="show this task only: its ID, or its reference (11.Wt0jM9, as logs name it) "
        "to list the tasks that match",
    )
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
    add_tenant_key_option(inspect)


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
    return tenant_key_problem(args)


def _print_task(task: TaskInspection, args: argparse.Namespace, out: TextIO) -> None:
    names = named_tenants(args.tenant_key, args.binding)
    if args.json:
        found = task.to_json()
        found["tenant_key"] = names.get(task.tenant or "")
        print(json.dumps(found, sort_keys=True), file=out)
    else:
        print("\n".join(render_task(task, names)), file=out)


def _no_partition(partition: int, manager: RedisTaskManager) -> int:
    """A reference to a partition the prefix does not have: said, exit 2 (a mistake, not
    a task that ended)."""
    print(
        f"redis-tasks inspect: no partition {partition}: this prefix has "
        f"{manager.partitions} (0-{manager.partitions - 1}); check --prefix and --partitions",
        file=sys.stderr,
    )
    return 2


async def _show_task(manager: RedisTaskManager, args: argparse.Namespace, out: TextIO) -> int:
    partition = parse_task_id(args.task_id)
    if partition is None:
        return await _show_matches(manager, args, out)
    if partition >= manager.partitions:
        return _no_partition(partition, manager)
    task = await manager.inspect_task(args.task_id)
    if task is None:
        print("redis-tasks inspect: no such task (unknown or expired)", file=sys.stderr)
        return 1
    _print_task(task, args, out)
    return 0


async def _show_matches(manager: RedisTaskManager, args: argparse.Namespace, out: TextIO) -> int:
    """Every live task a reference matches: one block (or JSON line) each."""
    try:
        matches = await manager.match_tasks(args.task_id)
    except BackendError as exc:
        if not isinstance(exc.__cause__, NoPermissionError):
            raise
        print(
            "redis-tasks inspect: matching a reference needs +scan, which this Redis user "
            "lacks; give the whole task ID, or run inspect as a user with +scan",
            file=sys.stderr,
        )
        return 1
    if matches is None:
        print(
            "redis-tasks inspect: not a task ID or reference (PARTITION.CHARACTERS, "
            "e.g. 11.Wt0jM9)",
            file=sys.stderr,
        )
        return 2
    if matches.partition >= manager.partitions:
        return _no_partition(matches.partition, manager)
    tasks = [t for t in [await manager.inspect_task(i) for i in matches.task_ids] if t is not None]
    if not args.json:
        print(f"{len(tasks)} live task(s) match, in partition {matches.partition}", file=out)
    for task in tasks:
        if not args.json:
            print(file=out)
        _print_task(task, args, out)
    if not matches.complete:
        print(
            "redis-tasks inspect: the lookup stopped early (too many matches or keys): more "
            "tasks may match; give more characters of the ID",
            file=sys.stderr,
        )
    return 0 if tasks else 1


def _print(
    inspection: Inspection,
    args: argparse.Namespace,
    previous: Inspection | None,
    out: TextIO,
) -> None:
    names = named_tenants(args.tenant_key, args.binding)
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
    async with manager_from(args) as manager:
        if args.task_id is not None:
            return await _show_task(manager, args, out)
        return await _show_queues(manager, args, out)


def run_inspect(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``redis-tasks inspect`` for the parsed ``args``."""
    hush_start_warnings()  # it only reads: the warnings are for who stores tasks
    return run_reading("inspect", _problem(args), lambda: _inspect(args, out or sys.stdout))
