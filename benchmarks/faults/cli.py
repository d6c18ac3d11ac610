"""The command line: ``python -m benchmarks.faults`` and its summary."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from redis_tasks._bench._progress import Progress

from . import __doc__ as USAGE
from .records import COMPLETED, Settings
from .run import run_faults


def summary(f: dict[str, Any]) -> Iterator[str]:
    """The human-readable report of the figures ``f``."""
    s, t, w = f["settings"], f["tasks"], f["workers"]
    yield (
        f"{f['load_seconds']} s of load, {s['clients']} clients, {w['count']} workers "
        f"x {s['concurrency']}, timeout {s['timeout']} s (+{s['slack']} s slack), "
        f"lease {s['lease']} s; {f['server']} Redis"
    )
    kinds = ", ".join(f"{k} {n}" for k, n in f["faults"].items())
    yield f"faults injected: {kinds}"
    yield (
        f"recovery: first successful create at most {f['max_recovery_s']} s after a fault "
        f"healed; {f['unrecovered_faults']} faults never recovered from"
    )
    for kind, o in f["ops"].items():
        yield (
            f"{kind}: {o['total']} calls, {o['ok']} ok, {o['backend_error']} BackendError "
            f"({o['timed_out']} of them after the whole timeout), "
            f"{o['none']} not found, unexpected {o['unexpected'] or 0}; "
            f"p50 {o['p50_ms']} ms, p99 {o['p99_ms']} ms, max {o['max_ms']} ms; "
            f"{o['over_limit']} over the limit"
        )
    yield (
        f"max call latency {f['max_latency_ms']} ms vs limit {s['limit_s'] * 1000:.0f} ms; "
        f"{f['ops_over_limit']} calls over it; event-loop lag p99 {f['loop_lag_ms']['p99']} ms, "
        f"max {f['loop_lag_ms']['max']} ms"
    )
    yield (
        f"tasks: {t['created']} created, {t['creates_failed']} creates raised "
        f"({t['ambiguous_persisted']} of them stored anyway), {t['checked']} checked "
        f"{t['statuses']}, {t['lost']} lost, {t['not_terminal']} not terminal, "
        f"{t['duplicated']} completed twice, {t['fence_mismatch']} fence mismatches, "
        f"{t['re_run']} re-run (max {t['max_runs']} runs), {t['abandoned_finishes']} finishes "
        f"abandoned, {t['completed_per_s']} completed/s"
    )
    yield (
        f"workers: alive {w['alive_at_end']}, tasks after the last fault "
        f"{w['tasks_after_last_fault']}, exit codes {w['exit_codes']}, stopped cleanly "
        f"{w['stopped_cleanly']}, handler slot bugs {w['slot_bugs']}, log errors "
        f"{w['log_errors'] or 0}"
    )
    m = f["manager"]
    yield (
        f"load manager: event tail delivering after the last fault: "
        f"{m['events_after_last_fault']}; log {m['log'] or 0}"
    )
    notable = {k: n for k, n in w["log_events"].items() if k not in ("task_started", *COMPLETED)}
    yield f"worker log events: {notable}"
    if f["broken"]:
        yield "BROKEN: " + "; ".join(f["broken"])
    else:
        yield "every promise held"


def main() -> int:
    """``python -m benchmarks.faults``: run, print the summary, exit 1 if a promise broke."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.faults",
        description=USAGE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    defaults = Settings()
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    parser.add_argument("--seconds", type=float, default=defaults.seconds)
    parser.add_argument("--clients", type=int, default=defaults.clients)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument("--timeout", type=float, default=defaults.timeout, help="call timeout (s)")
    parser.add_argument("--slack", type=float, default=defaults.slack, help="allowed lateness (s)")
    parser.add_argument("--lease", type=float, default=defaults.lease)
    parser.add_argument("--warmup", type=float, default=defaults.warmup)
    parser.add_argument("--every", type=float, default=defaults.every)
    parser.add_argument("--gap", type=float, default=defaults.gap)
    parser.add_argument("--recovery", type=float, default=defaults.recovery)
    parser.add_argument("--settle", type=float, default=defaults.settle)
    parser.add_argument("--handler-ms", type=float, default=defaults.handler_ms)
    parser.add_argument(
        "--appendfsync",
        choices=("always", "everysec", "no"),
        default=defaults.fsync,
        help="the private server's fsync policy (default: always)",
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy worker logs here")
    args = parser.parse_args()
    settings = Settings(
        seconds=args.seconds,
        clients=args.clients,
        workers=args.workers,
        concurrency=args.concurrency,
        timeout=args.timeout,
        slack=args.slack,
        lease=args.lease,
        warmup=args.warmup,
        every=args.every,
        gap=args.gap,
        recovery=args.recovery,
        settle=args.settle,
        handler_ms=args.handler_ms,
        fsync=args.appendfsync,
    )
    with tempfile.TemporaryDirectory(prefix="faults-") as scratch:
        result = asyncio.run(
            run_faults(settings, Path(scratch), url=args.redis_url, progress=Progress())
        )
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for log in Path(scratch).glob("worker-*.log"):
                shutil.copy(log, args.keep_logs / log.name)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    for line in summary(result):
        print(line)
    return 0 if result["ok"] else 1
