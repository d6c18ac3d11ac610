"""Record under faults and check: ``python -m benchmarks.history [--topology
standalone|cluster] [--seconds 20] [--each N] [--fsync always|everysec] [--wait-replicas
auto|0|1] [--processes N] [--every 2] [--json FILE]``; prints the summary and each anomaly's
minimal history."""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from .faults import record_with_faults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", choices=("standalone", "cluster"), default="standalone")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--each", type=int, default=0, help="at least this many of each fault")
    parser.add_argument("--fsync", choices=("always", "everysec"), default="always")
    parser.add_argument(
        "--wait-replicas",
        type=lambda text: text if text == "auto" else int(text),
        default="auto",
        help="the manager's wait_replicas: auto (the library's default) or a count",
    )
    parser.add_argument("--processes", type=int, default=2, help="recording processes")
    parser.add_argument("--clients", type=int, default=8, help="client coroutines per process")
    parser.add_argument("--workers", type=int, default=2, help="worker coroutines per process")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between faults")
    parser.add_argument("--kinds", default="", help="comma-separated fault kinds (default all)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="redis-tasks-history-") as scratch:
        run = asyncio.run(
            record_with_faults(
                Path(scratch),
                seconds=args.seconds,
                topology=args.topology,
                fsync=args.fsync,
                wait_replicas=args.wait_replicas,
                processes=args.processes,
                clients=args.clients,
                workers=args.workers,
                each=args.each,
                every=args.every,
                kinds=tuple(args.kinds.split(",")) if args.kinds else None,
                seed=args.seed,
            )
        )
    summary = run.summary()
    print(json.dumps(summary, indent=1))
    for anomaly in run.anomalies[:10]:
        print(anomaly.describe())
    for breach in run.breaches[:10]:
        print(breach.describe())
    if args.json is not None:
        summary["minimal_histories"] = [a.describe() for a in run.anomalies]
        summary["breaches"] = [b.describe() for b in run.breaches]
        args.json.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
