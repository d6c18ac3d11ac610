"""``redis-tasks bench``: run the scenarios, print the table, write JSON and a plot.

:func:`run_bench` starts the private servers it is asked for, picks the systems,
and hands them to :func:`~._run.run`, guarded (:mod:`._run_guard`) so that a Redis it
did not start keeps none of the run's keys, whatever way the run ends; ``--clean``
removes what runs killed outright left. The sub-command's options are in
:mod:`._options`.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from redis.exceptions import RedisError

from redis_tasks._bench._callgrind import Callgrind
from redis_tasks._bench._footprint import footprint
from redis_tasks._bench._leftovers import RunKeys, remove_earlier_runs
from redis_tasks._bench._mcp_settings import mcp_settings
from redis_tasks._bench._namespace import RunNames
from redis_tasks._bench._options import SCENARIOS, add_bench_command
from redis_tasks._bench._progress import Progress
from redis_tasks._bench._report import plot, table
from redis_tasks._bench._run import run
from redis_tasks._bench._run_guard import CleanupFailed, Interrupted, Refused, RunGuard, guarded
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


def _settings(args: argparse.Namespace) -> Settings:
    return Settings(
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
        fair_newcomer_slots=args.fair_newcomer_slots,
        fair_parts=args.fair_parts,
        fair_late=args.fair_late,
        fair_durations=args.fair_durations,
        fair_late_after_ms=args.fair_late_after_ms,
        fair_late_every_ms=args.fair_late_every_ms,
        fair_tenants=args.fair_tenants,
        fair_tenant_tasks=args.fair_tenant_tasks,
        fair_weighted_tasks=args.fair_weighted_tasks,
        fair_interleaved=args.fair_interleaved,
        park_tasks=args.park_tasks,
        park_concurrency=args.park_concurrency,
        park_late=args.park_late,
        park_answered=args.park_answered,
        park_idle_s=args.park_idle_s,
    )


def _say(text: str, status: int) -> int:
    """Print ``text`` as the bench's line on stderr; return ``status``."""
    print(f"redis-tasks bench: {text}", file=sys.stderr)
    return status


async def _clean(url: str) -> str:
    """``--clean``: remove what killed runs left on ``url``; what was removed."""
    async with RunKeys(url) as keys:
        return (await remove_earlier_runs(keys, everything=True)).summary()


def run_bench(args: argparse.Namespace) -> int:
    """Run ``redis-tasks bench``; returns the exit status."""
    settings = _settings(args)
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        return _say(f"unknown scenario {unknown[0]!r}", 2)
    scenarios = tuple(args.scenarios) or SCENARIOS
    if args.instructions and args.redis_url and not (args.topology or args.start_cluster):
        return _say("--instructions counts the servers the bench starts: give --topology", 2)
    if args.redis_url is not None:
        problem = url_problem(args.redis_url)
        if problem is not None:
            return _say(problem, 2)
    if args.clean:
        if args.redis_url is None or args.topology or args.start_cluster or args.scenarios:
            return _say("--clean takes a --redis-url (or $REDIS_URL) and nothing to run", 2)
        try:
            return _say(asyncio.run(_clean(args.redis_url)), 0)
        except (RedisError, OSError, TimeoutError) as exc:
            return _say(f"could not clean ({type(exc).__name__}: {exc})", 1)
        except KeyboardInterrupt:  # what was unlinked is gone; the rest waits for the next
            return _say("stopped by SIGINT", 128 + signal.SIGINT)
    try:
        systems = _systems(args)
    except (ValueError, FileNotFoundError, ImportError) as exc:
        return _say(str(exc), 2)
    mcp = mcp_settings(args)
    names = RunNames()
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
        named = os.environ.get("REDIS_SERVER")
        try:
            if args.instructions:
                counter = Callgrind(Path(scratch) / "callgrind")
                # The testing helpers start $REDIS_SERVER: the wrapper, for this run.
                os.environ["REDIS_SERVER"] = str(counter.wrapper())
                settings = dataclasses.replace(settings, callgrind=counter.directory)
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
            # Only a server the bench did not start is guarded: a private one goes whole.
            guard = None
            if topology is None:
                urls["redis"] = args.redis_url
                guard = RunGuard(args.redis_url, names)
            plan = footprint(settings, scenarios, mcp, peers=any(not s.is_ours for s in systems))
            with log_path.open("ab") as log:

                async def body() -> dict[str, Any]:
                    if guard is not None:
                        await guard.start(plan, allow_large=args.allow_large)
                    return await run(urls, settings, scenarios, systems, log, progress, mcp, names)

                results = asyncio.run(guarded(body, guard))
        except Refused as exc:
            return _say(str(exc), 2)
        except Interrupted as exc:
            progress.end_line()
            gone = "" if exc.removed is None else f"; removed the run's {exc.removed:,} keys"
            return _say(f"stopped by {exc}{gone}", 128 + exc.signum)
        except KeyboardInterrupt:  # before the run's loop took the signal over
            progress.end_line()
            return _say("stopped by SIGINT", 128 + signal.SIGINT)
        except CleanupFailed as exc:
            return _say(str(exc), 1)
        except (AdapterError, OSError, RuntimeError, RedisError) as exc:
            print(f"redis-tasks bench: {exc}", file=sys.stderr)
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            return 1
        finally:
            for server in servers:
                server.stop()
            if args.instructions:  # the servers are gone: $REDIS_SERVER as it was
                if named is None:
                    os.environ.pop("REDIS_SERVER", None)
                else:
                    os.environ["REDIS_SERVER"] = named
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
