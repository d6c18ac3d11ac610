"""``redis-tasks tenants``: who holds what, tenant by tenant, as an operator sees it.

It reads every partition once (``RedisTaskManager.inspect_tenants``: the tenants
seen in the last day and those waiting, with their open, running and queued
tasks, their plan and their refused creates) and merges in the running tasks of
``inspect``'s sampled leases (a tenant without a cap has no run set), then prints
the totals and the top tenants by open, queued, running and refused tasks;
``--json`` prints one JSON document. Tenants are shown by digest: ``--tenant-key
KEY`` (repeatable) digests ``KEY`` here and shows it beside its digest, the only
way a tenant key is shown. No task data and no Redis URL is printed.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

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
from ._inspection.tenant_report import render_tenants
from ._inspection.tenants import named_tenants
from ._redis.setup import hush_start_warnings

__all__ = ["add_tenants_command", "run_tenants"]


def add_tenants_command(commands: Any) -> None:
    """Register the ``tenants`` sub-command and its options."""
    tenants = commands.add_parser(
        "tenants", help="show the tenants: open, queued, running and refused tasks, plans"
    )
    add_redis_options(tenants)
    add_sample_option(tenants)
    tenants.add_argument(
        "--top", type=int, default=10, help="tenants listed by each order (default 10)"
    )
    tenants.add_argument("--json", action="store_true", help="print JSON instead of tables")
    add_tenant_key_option(tenants)


def _problem(args: argparse.Namespace) -> str | None:
    problem = check_redis_options(args)
    if problem is not None:
        return problem
    if not 1 <= args.top <= 1000:
        return "--top must be 1 to 1000"
    if args.sample < 1:
        return "--sample must be at least 1 here"
    return tenant_key_problem(args)


async def _tenants(args: argparse.Namespace, out: TextIO) -> int:
    names = named_tenants(args.tenant_key, args.binding)
    async with manager_from(args) as manager:
        chosen = only_partitions(args)
        report = await manager.inspect_tenants(chosen, sample=args.sample)
        inspection = await manager.inspect(chosen, sample=args.sample)
    running = {t: f.running for t, f in inspection.tenants.figures.items() if f.running}
    report = report.with_running(running)
    if args.json:
        print(json.dumps(report.to_json(names, top=args.top), sort_keys=True), file=out)
    else:
        print("\n".join(render_tenants(report, names, top=args.top)), file=out)
    return 0


def run_tenants(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``redis-tasks tenants`` for the parsed ``args``."""
    hush_start_warnings()  # it only reads: the warnings are for who stores tasks
    return run_reading("tenants", _problem(args), lambda: _tenants(args, out or sys.stdout))
