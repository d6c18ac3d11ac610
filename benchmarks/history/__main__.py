"""Record under faults and check: ``python -m benchmarks.history [--seconds 20] [--fsync
always|everysec] [--every 2] [--json FILE]``; prints the summary and each anomaly's minimal
history."""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from .faults import record_with_faults


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--fsync", choices=("always", "everysec"), default="always")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between faults")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="redis-tasks-history-") as scratch:
        run = asyncio.run(
            record_with_faults(
                Path(scratch),
                seconds=args.seconds,
                fsync=args.fsync,
                every=args.every,
                seed=args.seed,
            )
        )
    summary = run.summary()
    print(json.dumps(summary, indent=1))
    for anomaly in run.anomalies[:10]:
        print(anomaly.describe())
    if args.json is not None:
        summary["minimal_histories"] = [a.describe() for a in run.anomalies]
        args.json.write_text(json.dumps(summary, indent=1) + "\n")


if __name__ == "__main__":
    main()
