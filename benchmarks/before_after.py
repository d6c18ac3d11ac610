"""This checkout's worker against an earlier revision's, side by side in one run.

Usage: python -m benchmarks.before_after --rev c37a6b7 [--rounds 3] [--json FILE]
       [--topology standalone|cluster|both] [--pickups N] [--metrics] [--workers 1,2]
       [--instructions] [SCENARIO ...]

A change to a hot path is judged by the same harness on the same servers in the
same run: the earlier revision is checked out into a temporary git worktree and
its own adapter (``redis_tasks._bench._adapter`` of that tree) runs as one more
system beside ours. ``drain`` (1 and 2 worker processes for ours, 1 for the
earlier one) and ``pickup`` then run on a private standalone server and a private
3-primary, 3-replica cluster, rounds alternating between systems and topologies.
Only the adapters differ: the harness, its probe and its report are this
checkout's. Needs git and a source checkout.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from redis_tasks._bench._args import counts
from redis_tasks._bench._callgrind import Callgrind
from redis_tasks._bench._progress import Progress
from redis_tasks._bench._report import table
from redis_tasks._bench._run import run
from redis_tasks._bench._scenarios import Settings
from redis_tasks._bench._systems import System, ours, ours_metered, ours_on_uvloop
from redis_tasks.testing import (
    RedisCluster,
    RedisServer,
    start_redis_cluster,
    start_redis_server,
)

ROOT = Path(__file__).resolve().parent.parent


def earlier(rev: str, tree: Path, metered: bool = False) -> list[System]:
    """``rev``'s adapter, run from a worktree at ``tree`` by this interpreter (and
    again recording metrics into a Prometheus export when ``metered``)."""
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev],
        check=True,
        capture_output=True,
    )
    # Run from the tree too: `python -m` puts the working directory first on sys.path,
    # so from this checkout's root it would import this checkout's package, whatever
    # PYTHONPATH says.
    adapter = (sys.executable, "-m", "redis_tasks._bench._adapter")
    systems = [
        System(f"redis-tasks@{rev[:7]}", ("env", "-C", str(tree), f"PYTHONPATH={tree}", *adapter))
    ]
    if metered:
        variables = ("-C", str(tree), f"PYTHONPATH={tree}", "REDIS_TASKS_METRICS=prometheus")
        systems.append(System(f"redis-tasks@{rev[:7]}+metrics", ("env", *variables, *adapter)))
    return systems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rev",
        action="append",
        required=True,
        help="an earlier git revision (repeat for several, each measured beside ours)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=10_000, help="jobs per drain round")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    parser.add_argument("--pickups", type=int, default=200, help="pickups per round")
    parser.add_argument("--topology", choices=("standalone", "cluster", "both"), default="both")
    # No choices= here: argparse (3.11) checks an empty list against them and refuses it.
    parser.add_argument("scenarios", nargs="*", help="drain and/or pickup (default: both)")
    parser.add_argument("--uvloop", action="store_true", help="ours on uvloop too")
    parser.add_argument("--workers", type=counts, default=(1, 2), help="worker processes (1,2)")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="servers and workers under callgrind: instructions per job (bench --instructions)",
    )
    parser.add_argument(
        "--metrics",
        action="store_true",
        help="each revision again with metrics recorded (as --metrics-port records them)",
    )
    args = parser.parse_args()
    if not set(args.scenarios) <= {"drain", "pickup"}:
        parser.error("scenarios are drain and pickup")
    with tempfile.TemporaryDirectory(prefix="redis-tasks-before-after-") as scratch:
        trees = [Path(scratch) / f"earlier-{i}" for i in range(len(args.rev))]
        systems = [ours()]
        if args.metrics:
            systems.append(ours_metered())
        for rev, tree in zip(args.rev, trees, strict=True):
            systems += earlier(rev, tree, metered=args.metrics)
        if args.uvloop:
            systems.append(ours_on_uvloop())
        servers: list[RedisServer | RedisCluster] = []
        urls: dict[str, str] = {}
        counter = Callgrind(Path(scratch) / "callgrind") if args.instructions else None
        if counter is not None:  # the servers started below run $REDIS_SERVER
            os.environ["REDIS_SERVER"] = str(counter.wrapper())
        try:
            if args.topology in ("standalone", "both"):
                servers.append(start_redis_server(Path(scratch) / "redis"))
                urls["standalone"] = servers[-1].url
            if args.topology in ("cluster", "both"):
                servers.append(start_redis_cluster(Path(scratch) / "cluster"))
                urls["cluster"] = servers[-1].url
            settings = Settings(
                tasks=args.tasks,
                workers=args.workers,
                rounds=args.rounds,
                pickups=args.pickups,
                callgrind=None if counter is None else counter.directory,
            )
            with (Path(scratch) / "bench.log").open("ab") as log:
                results = asyncio.run(
                    run(
                        urls,
                        settings,
                        tuple(args.scenarios) or ("drain", "pickup"),
                        systems,
                        log,
                        Progress(),
                    )
                )
        finally:
            for server in servers:
                server.stop()
            for tree in trees:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                    check=False,
                    capture_output=True,
                )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
    print(table(results))


if __name__ == "__main__":
    main()
