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
from pathlib import Path
from typing import IO, Any, Final

from redis_tasks._bench._probe import Probe
from redis_tasks._bench._progress import Progress
from redis_tasks._bench._report import plot, ratios, table
from redis_tasks._bench._scenarios import Bench, Settings
from redis_tasks._bench._systems import PEERS, AdapterError, System, ours, peer

__all__ = ["SCENARIOS", "add_bench_command", "run_bench"]

#: Every scenario, in the order a run takes them.
SCENARIOS: Final = ("limit", "drain", "pickup", "lifecycle", "find", "notify")


def _counts(text: str) -> tuple[int, ...]:
    try:
        counts = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("give counts like 1,2,4") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError("counts must be >= 1")
    return counts


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("give a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


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
        "--start-cluster",
        action="store_true",
        help="load a private 3-primary, 3-replica Redis Cluster on loopback instead",
    )
    defaults = Settings()
    sizes = bench.add_argument_group("sizes")
    sizes.add_argument("--tasks", type=_positive, default=defaults.tasks, help="drain: jobs")
    sizes.add_argument("--concurrency", type=_positive, default=defaults.concurrency)
    sizes.add_argument(
        "--workers",
        type=_counts,
        default=defaults.workers,
        help="worker process counts for drain and lifecycle, e.g. 1,2,4",
    )
    sizes.add_argument("--rounds", type=_positive, default=defaults.rounds)
    sizes.add_argument("--pickups", type=_positive, default=defaults.pickups)
    sizes.add_argument("--lifecycle-tasks", type=_positive, default=defaults.lifecycle_tasks)
    sizes.add_argument("--clients", type=_positive, default=defaults.clients)
    sizes.add_argument("--pollers", type=_positive, default=defaults.pollers)
    sizes.add_argument("--find-ops", type=_positive, default=defaults.find_ops)
    sizes.add_argument("--notifies", type=_positive, default=defaults.notifies)
    sizes.add_argument("--limit-requests", type=_positive, default=defaults.limit_requests)
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
    out = bench.add_argument_group("output")
    out.add_argument("--json", type=Path, default=None, help="write the results here ('-': stdout)")
    out.add_argument("--plot", type=Path, default=None, help="write a PNG plot here")
    out.add_argument("--quiet", action="store_true", help="no progress bar")


def _systems(args: argparse.Namespace) -> list[System]:
    names = list(PEERS) if args.peers == "all" else [p for p in args.peers.split(",") if p]
    systems = [ours()]
    for name in names:
        systems.append(peer(name.replace("-", "_"), args.peers_python, args.peers_dir))
    return systems


async def _run(
    url: str,
    settings: Settings,
    scenarios: tuple[str, ...],
    systems: list[System],
    log: IO[bytes],
    progress: Progress,
) -> dict[str, Any]:
    bench = Bench(url, settings, progress, log)
    async with Probe(url) as probe:
        environment = {
            "redis_version": await probe.version(),
            "redis_mode": "cluster" if probe.cluster else "standalone",
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "machine": platform.machine(),
        }
    results: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "environment": environment,
        "settings": {**settings.__dict__, "workers": list(settings.workers)},
        "systems": {s.name: {} for s in systems},
    }
    if "limit" in scenarios:
        results["limit"] = await bench.limit()
    if "drain" in scenarios:
        await _drains(bench, systems, results["systems"])
    if "pickup" in scenarios:
        for system in systems:
            try:
                results["systems"][system.name]["pickup"] = await bench.pickup(system)
            except AdapterError as exc:
                results["systems"][system.name]["pickup_error"] = str(exc)
    if "lifecycle" in scenarios:
        results["lifecycle"] = {str(w): await bench.lifecycle(w) for w in settings.workers}
    if "find" in scenarios:
        results["find"] = await bench.find()
    if "notify" in scenarios:
        results["notify"] = await bench.notify()
    results["systems"] = {k: v for k, v in results["systems"].items() if v}
    results["ratios"] = ratios(results)
    return results


async def _drains(bench: Bench, systems: list[System], out: dict[str, Any]) -> None:
    """Every system's drain rounds, interleaved, so drift on the machine hits all alike."""
    samples: dict[tuple[str, int], list[tuple[float, dict[str, int], dict[str, float]]]] = {}
    failed: set[str] = set()
    for round_ in range(bench.settings.rounds):
        for system in systems:
            if system.name in failed:
                continue
            for workers in bench.settings.workers if system.is_ours else (1,):
                label = f"{system.name} drain w={workers} #{round_ + 1}"
                try:
                    sample = await bench.drain(system, workers, label)
                except AdapterError as exc:
                    failed.add(system.name)
                    out[system.name]["drain_error"] = str(exc)
                    break
                samples.setdefault((system.name, workers), []).append(sample)
                bench.progress.note(f"{label}: {sample[0]:.0f} jobs/s")
    n = bench.settings.tasks
    for (name, workers), rounds in samples.items():
        rates = [rate for rate, _, _ in rounds]
        # Counts and CPU of the median round: they belong to the rate reported.
        _, calls, usage = sorted(rounds, key=lambda sample: sample[0])[len(rounds) // 2]
        out[name].setdefault("drain", {})[str(workers)] = {
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
    except (ValueError, FileNotFoundError) as exc:
        print(f"redis-tasks bench: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="redis-tasks-bench-") as scratch:
        log_path = Path(scratch) / "bench.log"
        from redis_tasks.testing import start_redis_cluster, start_redis_server

        server: Any = None
        url = args.redis_url
        if args.start_cluster:
            server = start_redis_cluster(Path(scratch) / "cluster")
            url = server.url
        elif not url:
            server = start_redis_server(Path(scratch) / "redis")
            url = server.url
        try:
            with log_path.open("ab") as log:
                progress = Progress(quiet=args.quiet)
                results = asyncio.run(_run(url, settings, scenarios, systems, log, progress))
        except (AdapterError, OSError, RuntimeError) as exc:
            print(f"redis-tasks bench: {exc}", file=sys.stderr)
            print(log_path.read_text(errors="replace")[-4000:], file=sys.stderr)
            return 1
        finally:
            if server is not None:
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
