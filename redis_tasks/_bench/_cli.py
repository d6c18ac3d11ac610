"""``redis-tasks bench``: run the scenarios, print the table, write JSON and a plot.

:func:`run_bench` starts the private servers it is asked for, picks the systems,
and hands them to :func:`~._run.run`; the sub-command's options are in
:mod:`._options`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from redis_tasks._bench._mcp_settings import mcp_settings
from redis_tasks._bench._options import SCENARIOS, add_bench_command
from redis_tasks._bench._progress import Progress
from redis_tasks._bench._report import plot, table
from redis_tasks._bench._run import run
from redis_tasks._bench._scenarios import Settings
from redis_tasks._bench._systems import (
    PEERS,
    AdapterError,
    System,
    ours,
    ours_metered,
    ours_on_uvloop,
    ours_traced,
    peer,
)
from redis_tasks._cli_common import url_problem
from redis_tasks._loop import loop_name

__all__ = ["SCENARIOS", "add_bench_command", "run_bench"]


def _systems(args: argparse.Namespace) -> list[System]:
    names = list(PEERS) if args.peers == "all" else [p for p in args.peers.split(",") if p]
    systems = [ours()]
    if args.uvloop:
        loop_name("uvloop")  # ImportError now, not in an adapter process later
        systems.append(ours_on_uvloop())
    if args.metrics:
        from redis_tasks._telemetry.prometheus import require_extra

        require_extra()  # ImportError now, not in an adapter process later
        systems.append(ours_metered())
    if args.traces:
        from redis_tasks._telemetry.prometheus import require_extra

        require_extra()  # the SDK comes with the otel extra
        systems.append(ours_traced())
    for name in names:
        systems.append(peer(name.replace("-", "_"), args.peers_python, args.peers_dir))
    return systems


def run_bench(args: argparse.Namespace) -> int:
    """Run ``redis-tasks bench``; returns the exit status."""
    settings = Settings(
        tasks=args.tasks,
        concurrency=args.concurrency,
        workers=args.workers,
        rounds=args.rounds,
        pickups=args.pickups,
        lifecycle_tasks=args.lifecycle_tasks,
        clients=args.clients,
        lifecycle_processes=args.lifecycle_processes,
        memory_tasks=args.memory_tasks,
        pollers=args.pollers,
        find_ops=args.find_ops,
        notifies=args.notifies,
        limit_requests=args.limit_requests,
        fair_tasks=args.fair_tasks,
        fair_concurrency=args.fair_concurrency,
        fair_handler_ms=args.fair_handler_ms,
        fair_late=args.fair_late,
        fair_tenants=args.fair_tenants,
        fair_tenant_tasks=args.fair_tenant_tasks,
        fair_weighted_tasks=args.fair_weighted_tasks,
        fair_interleaved=args.fair_interleaved,
    )
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        print(f"redis-tasks bench: unknown scenario {unknown[0]!r}", file=sys.stderr)
        return 2
    scenarios = tuple(args.scenarios) or SCENARIOS
    if args.redis_url is not None:
        problem = url_problem(args.redis_url)
        if problem is not None:
            print(f"redis-tasks bench: {problem}", file=sys.stderr)
            return 2
    try:
        systems = _systems(args)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        print(f"redis-tasks bench: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="redis-tasks-bench-") as scratch:
        log_path = Path(scratch) / "bench.log"
        from redis_tasks.testing import (
            start_redis_cluster,
            start_redis_server,
            start_replicated_server,
        )

        topology = "cluster" if args.start_cluster else args.topology
        if topology is None and not args.redis_url:
            topology = "standalone"
        servers: list[Any] = []
        urls: dict[str, str] = {}
        progress = Progress(quiet=args.quiet)
        try:
            if topology in ("standalone", "both"):
                replicas = args.replicas or 0
                servers.append(
                    start_replicated_server(Path(scratch) / "redis", replicas=replicas)
                    if replicas
                    else start_redis_server(Path(scratch) / "redis")
                )
                urls["standalone"] = servers[-1].url
            if topology in ("cluster", "both"):
                replicas = 1 if args.replicas is None else args.replicas
                progress.note(f"starting a private 3-primary cluster, {replicas} replica(s) each")
                servers.append(
                    start_redis_cluster(Path(scratch) / "cluster", replicas_per_primary=replicas)
                )
                urls["cluster"] = servers[-1].url
            if topology is None:
                urls["redis"] = args.redis_url
            with log_path.open("ab") as log:
                results = asyncio.run(
                    run(urls, settings, scenarios, systems, log, progress, mcp_settings(args))
                )
        except (AdapterError, OSError, RuntimeError) as exc:
            print(f"redis-tasks bench: {exc}", file=sys.stderr)
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            return 1
        finally:
            for server in servers:
                server.stop()
    if args.json is not None:
        text = json.dumps(results, indent=2)
        if str(args.json) == "-":
            print(text)
        else:
            args.json.write_text(text + "\n")
    if str(args.json) != "-":
        print(table(results))
    if args.plot is not None:
        plot(results, args.plot)
    return 0
