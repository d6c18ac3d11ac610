"""``redis-tasks bench``: run the scenarios, print the table, write JSON and a plot."""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any, Final

from redis_tasks._bench._args import counts, positive, replica_count
from redis_tasks._bench._mcp_load import mcp_runs
from redis_tasks._bench._mcp_settings import McpSettings, add_mcp_options, mcp_settings
from redis_tasks._bench._probe import Probe
from redis_tasks._bench._progress import Progress
from redis_tasks._bench._report import compare, plot, ratios, table
from redis_tasks._bench._scenarios import Bench, Settings, pickup_figures
from redis_tasks._bench._systems import PEERS, AdapterError, System, ours, ours_on_uvloop, peer
from redis_tasks._loop import loop_name

__all__ = ["SCENARIOS", "add_bench_command", "run_bench"]

#: The memory scenario's (origin bytes, payload bytes): the issue's case, a small call,
#: and a large one still stored in pieces. The first measurement on a server also pays
#: for its key tables' growth (8 bytes a slot, two tables, about 50 bytes a task at
#: 20,000 tasks), as a deployment's tables grow with its tasks: the issue's case goes
#: first, before the peers.
MEMORY_CASES: Final = ((100, 64), (40, 0), (400, 256))
#: Every scenario, in the order a run takes them.
SCENARIOS: Final = ("limit", "drain", "pickup", "lifecycle", "find", "notify", "memory", "mcp")


def add_bench_command(commands: Any) -> None:
    """Register the ``bench`` sub-command and its options."""
    bench = commands.add_parser(
        "bench",
        help="load-test redis-tasks (and peer queues) against a Redis",
        description="Load-test redis-tasks against a Redis, optionally side by side with "
        "peer queues (from a source checkout with `make bench-peers`). Prints a table; "
        "--json and --plot write the results.",
    )
    bench.add_argument(
        "scenarios",
        nargs="*",
        metavar="SCENARIO",
        help=f"any of {', '.join(SCENARIOS)} (default: all)",
    )
    bench.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="Redis or Redis Cluster to load (default: $REDIS_URL, else a private "
        "redis-server on a free loopback port)",
    )
    bench.add_argument(
        "--topology",
        choices=("standalone", "cluster", "both"),
        default=None,
        help="load private servers on loopback instead of --redis-url: a redis-server, a "
        "3-primary, 3-replica cluster, or both, every scenario's rounds alternating between "
        "them and the cluster's figures compared with standalone's",
    )
    bench.add_argument(
        "--start-cluster",
        action="store_true",
        help="the same as --topology cluster",
    )
    bench.add_argument(
        "--replicas",
        type=replica_count,
        default=None,
        help="replicas per primary of the private servers (default: none for standalone, "
        "one per primary for the cluster); with --topology both, give the same to both",
    )
    defaults = Settings()
    sizes = bench.add_argument_group("sizes")
    sizes.add_argument("--tasks", type=positive, default=defaults.tasks, help="drain: jobs")
    sizes.add_argument("--concurrency", type=positive, default=defaults.concurrency)
    sizes.add_argument(
        "--workers",
        type=counts,
        default=defaults.workers,
        help="worker process counts for drain and lifecycle, e.g. 1,2,4",
    )
    sizes.add_argument("--rounds", type=positive, default=defaults.rounds)
    sizes.add_argument("--pickups", type=positive, default=defaults.pickups)
    sizes.add_argument("--lifecycle-tasks", type=positive, default=defaults.lifecycle_tasks)
    sizes.add_argument(
        "--clients", type=positive, default=defaults.clients, help="lifecycle: clients in all"
    )
    sizes.add_argument(
        "--lifecycle-processes",
        type=positive,
        default=defaults.lifecycle_processes,
        help="lifecycle: client processes the clients are spread over",
    )
    sizes.add_argument(
        "--memory-tasks",
        type=positive,
        default=defaults.memory_tasks,
        help="memory: tasks (jobs) per measurement",
    )
    sizes.add_argument("--pollers", type=positive, default=defaults.pollers)
    sizes.add_argument("--find-ops", type=positive, default=defaults.find_ops)
    sizes.add_argument("--notifies", type=positive, default=defaults.notifies)
    sizes.add_argument("--limit-requests", type=positive, default=defaults.limit_requests)
    add_mcp_options(bench)
    peers = bench.add_argument_group("peers (drain and pickup, side by side)")
    peers.add_argument(
        "--peers",
        default="",
        help=f"comma-separated, or 'all': {', '.join(PEERS)}",
    )
    peers.add_argument(
        "--peers-python",
        type=Path,
        default=Path("benchmarks/.venv-peers/bin/python"),
        help="the peers' virtualenv interpreter (default: %(default)s)",
    )
    peers.add_argument("--peers-dir", type=Path, default=Path("benchmarks/peers"))
    peers.add_argument(
        "--uvloop",
        action="store_true",
        help="also run redis-tasks on uvloop (pip install 'redis-tasks[fast]'), beside the "
        "default asyncio loop",
    )
    out = bench.add_argument_group("output")
    out.add_argument("--json", type=Path, default=None, help="write the results here ('-': stdout)")
    out.add_argument("--plot", type=Path, default=None, help="write a PNG plot here")
    out.add_argument("--quiet", action="store_true", help="no progress bar")


def _systems(args: argparse.Namespace) -> list[System]:
    names = list(PEERS) if args.peers == "all" else [p for p in args.peers.split(",") if p]
    systems = [ours()]
    if args.uvloop:
        loop_name("uvloop")  # ImportError now, not in an adapter process later
        systems.append(ours_on_uvloop())
    for name in names:
        systems.append(peer(name.replace("-", "_"), args.peers_python, args.peers_dir))
    return systems


async def _environment(url: str) -> dict[str, Any]:
    async with Probe(url) as probe:
        return {
            "redis_version": await probe.version(),
            "redis_mode": "cluster" if probe.cluster else "standalone",
            "primaries": probe.primaries,
            "replicas_per_primary": await probe.replicas(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "machine": platform.machine(),
        }


async def _run(
    urls: dict[str, str],
    settings: Settings,
    scenarios: tuple[str, ...],
    systems: list[System],
    log: IO[bytes],
    progress: Progress,
    mcp: McpSettings | None = None,
) -> dict[str, Any]:
    """Every scenario on every topology of ``urls`` (name -> URL).

    With more than one topology the rounds of each scenario alternate between
    them, so drift on a shared machine hits both alike, and the result holds a
    comparison (cluster over standalone).
    """
    benches = {
        name: Bench(url, settings, progress.tagged(name) if len(urls) > 1 else progress, log)
        for name, url in urls.items()
    }
    runs: dict[str, dict[str, Any]] = {}
    for name, url in urls.items():
        runs[name] = {
            "environment": await _environment(url),
            "systems": {s.name: {} for s in systems},
        }
    if "limit" in scenarios:
        for name, bench in benches.items():
            runs[name]["limit"] = await bench.limit()
    if "drain" in scenarios:
        await _drains(benches, systems, runs)
    if "pickup" in scenarios:
        await _pickups(benches, systems, runs)
    if "lifecycle" in scenarios:
        for workers in settings.workers:

            def lifecycle(bench: Bench, workers: int = workers) -> Awaitable[dict[str, Any]]:
                return bench.lifecycle(workers)

            for name, row in (await _rounds(benches, lifecycle)).items():
                runs[name].setdefault("lifecycle", {})[str(workers)] = row
    if "find" in scenarios:
        for name, row in (await _rounds(benches, lambda b: b.find())).items():
            runs[name]["find"] = row
    if "notify" in scenarios:
        for name, bench in benches.items():
            runs[name]["notify"] = await bench.notify()
    if "memory" in scenarios:
        await _memory(benches, systems, runs)
    if "mcp" in scenarios:
        for name, bench in benches.items():
            runs[name].update(await mcp_runs(bench.url, mcp or McpSettings(), bench.progress, log))
    for run in runs.values():
        run["systems"] = {k: v for k, v in run["systems"].items() if v}
        run["ratios"] = ratios(run)
    header: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "settings": {**settings.__dict__, "workers": list(settings.workers)},
    }
    if "mcp" in scenarios:
        header["settings"]["mcp"] = (mcp or McpSettings()).__dict__
    if len(runs) == 1:
        return {**header, **next(iter(runs.values()))}
    return {**header, "topologies": runs, "comparison": compare(runs)}


async def _memory(
    benches: dict[str, Bench], systems: list[System], runs: dict[str, dict[str, Any]]
) -> None:
    """Bytes per queued job of every system; ours also per retained task, by size."""
    for name, bench in benches.items():
        runs[name]["memory"] = {
            "retained": [
                await bench.memory_retained(origin, payload) for origin, payload in MEMORY_CASES
            ]
        }
        for system in systems:
            try:
                row = await bench.memory_queued(system)
            except AdapterError as exc:
                runs[name]["systems"][system.name]["memory_error"] = str(exc)
                continue
            runs[name]["systems"][system.name]["memory"] = row


async def _rounds(
    benches: dict[str, Bench], measure: Callable[[Bench], Awaitable[dict[str, Any]]]
) -> dict[str, dict[str, Any]]:
    """``measure`` for ``rounds`` rounds on every topology, alternating; per topology the
    round with the median rate, and every round's rate."""
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in benches}
    rounds = next(iter(benches.values())).settings.rounds
    for _ in range(rounds):
        for name, bench in benches.items():
            samples[name].append(await measure(bench))
    out = {}
    for name, rows in samples.items():
        median = sorted(rows, key=lambda row: row["rate"])[len(rows) // 2]
        out[name] = {**median, "rounds": [row["rate"] for row in rows]}
    return out


async def _pickups(
    benches: dict[str, Bench], systems: list[System], runs: dict[str, dict[str, Any]]
) -> None:
    """Pickup rounds, alternating systems and topologies; samples pooled per pair."""
    samples: dict[tuple[str, str], list[float]] = {}
    failed: set[tuple[str, str]] = set()
    rounds = next(iter(benches.values())).settings.rounds
    for round_ in range(rounds):
        for system in systems:
            for name, bench in benches.items():
                if (name, system.name) in failed:
                    continue
                label = f"{system.name} pickup #{round_ + 1}"
                try:
                    got = await bench.pickup_samples(system, label)
                except AdapterError as exc:
                    failed.add((name, system.name))
                    runs[name]["systems"][system.name]["pickup_error"] = str(exc)
                    continue
                samples.setdefault((name, system.name), []).extend(got)
    for (name, system_name), values in samples.items():
        if (name, system_name) not in failed:
            runs[name]["systems"][system_name]["pickup"] = pickup_figures(values)


async def _drains(
    benches: dict[str, Bench], systems: list[System], runs: dict[str, dict[str, Any]]
) -> None:
    """Every system's drain rounds, interleaved across systems and topologies, so drift
    on the machine hits all alike."""
    samples: dict[tuple[str, str, int], list[tuple[float, dict[str, int], dict[str, Any]]]] = {}
    failed: set[tuple[str, str]] = set()
    settings = next(iter(benches.values())).settings
    for round_ in range(settings.rounds):
        for system in systems:
            for workers in settings.workers if system.is_ours else (1,):
                for name, bench in benches.items():
                    if (name, system.name) in failed:
                        continue
                    label = f"{system.name} drain w={workers} #{round_ + 1}"
                    try:
                        sample = await bench.drain(system, workers, label)
                    except AdapterError as exc:
                        failed.add((name, system.name))
                        runs[name]["systems"][system.name]["drain_error"] = str(exc)
                        continue
                    samples.setdefault((name, system.name, workers), []).append(sample)
                    bench.progress.note(f"{label}: {sample[0]:.0f} jobs/s")
    n = settings.tasks
    for (name, system_name, workers), rounds in samples.items():
        rates = [rate for rate, _, _ in rounds]
        # Counts and CPU of the median round: they belong to the rate reported.
        _, calls, usage = sorted(rounds, key=lambda sample: sample[0])[len(rounds) // 2]
        out = runs[name]["systems"][system_name]
        out.setdefault("drain", {})[str(workers)] = {
            "rate": round(statistics.median(rates)),
            "rounds": [round(rate) for rate in rates],
            "commands_per_job": round(sum(calls.values()) / n, 1),
            "commands": {
                cmd: round(count / n, 2) for cmd, count in sorted(calls.items()) if count >= n / 20
            },
            **usage,
        }


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
    )
    unknown = sorted(set(args.scenarios) - set(SCENARIOS))
    if unknown:
        print(f"redis-tasks bench: unknown scenario {unknown[0]!r}", file=sys.stderr)
        return 2
    scenarios = tuple(args.scenarios) or SCENARIOS
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
                    _run(urls, settings, scenarios, systems, log, progress, mcp_settings(args))
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
