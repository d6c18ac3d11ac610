"""``redis-tasks check --redis-url URL [--prefix P] [--json]``: is this Redis ready for tasks?

For an operator plugging the library into a Redis they run. It prints one line
per finding (``ok``, ``warn`` or ``error``, with the fix), then a verdict, or
one JSON document with ``--json``. Exit status: 0 when the Redis is ready
(warnings allowed), 1 when a finding is an error, 2 for bad arguments or a
server that cannot be reached. The URL's password is never printed; TLS and its
settings come with the URL (``rediss://...?ssl_ca_certs=/path/ca.pem``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, TextIO

from ._check import PINGS, Unreachable, check
from ._check.report import scrub
from ._ids import MAX_PARTITIONS
from ._loop import run

__all__ = ["add_check_command", "run_check"]


def add_check_command(commands: Any) -> None:
    """Register the ``check`` sub-command and its options."""
    parser = commands.add_parser(
        "check",
        help="check that a Redis is ready for tasks: version, eviction, persistence, "
        "ACL rights, scripts, latency",
    )
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="Redis to check, any node of a cluster (default: $REDIS_URL); rediss:// for TLS",
    )
    parser.add_argument("--prefix", default="rt", help="key prefix (default: rt)")
    parser.add_argument(
        "--partitions",
        type=int,
        default=16,
        help="partitions of the prefix (default: 16); on a cluster, how they fall on its "
        "primaries, and the count that spreads them evenly",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        help="every Redis call's deadline in seconds (default 5); on a cluster also "
        "compared with what a failover needs",
    )
    parser.add_argument(
        "--pings",
        type=int,
        default=PINGS,
        help=f"PING round trips timed per primary (default {PINGS}; 0 skips the latency)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _problem(args: argparse.Namespace) -> str | None:
    if not args.redis_url:
        return "needs --redis-url or REDIS_URL"
    if not args.timeout > 0:
        return "--timeout must be positive"
    if not 0 <= args.pings <= 10_000:
        return "--pings must be 0 to 10000"
    if not 1 <= args.partitions <= MAX_PARTITIONS:
        return f"--partitions must be 1 to {MAX_PARTITIONS}"
    if not args.prefix or "{" in args.prefix or "}" in args.prefix:
        return "--prefix must be non-empty, without braces"
    return None


class _Progress:
    """A one-line ping counter on a terminal's stderr; nothing elsewhere."""

    def __init__(self, err: TextIO) -> None:
        self._err = err
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        if done % 50 and done != total:
            return
        self._err.write(f"\rtiming PING round trips: {done}/{total}")
        self._err.flush()
        self._shown = True

    def clear(self) -> None:
        if self._shown:
            self._err.write("\r\x1b[K")
            self._err.flush()


def run_check(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run ``redis-tasks check`` for the parsed ``args``: 0 ready, 1 not, 2 cannot tell."""
    out = out or sys.stdout
    problem = _problem(args)
    if problem is not None:
        print(f"redis-tasks check: {problem}", file=sys.stderr)
        return 2
    progress = _Progress(sys.stderr) if sys.stderr.isatty() and not args.json else None
    try:
        report = run(
            check(
                args.redis_url,
                prefix=args.prefix,
                partitions=args.partitions,
                call_timeout=args.timeout,
                pings=args.pings,
                progress=progress,
            ),
            "asyncio",
        )
    except Unreachable as exc:
        print(f"redis-tasks check: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # a URL redis-py cannot parse
        print(f"redis-tasks check: {scrub(str(exc), args.redis_url)}", file=sys.stderr)
        return 2
    finally:
        if progress is not None:
            progress.clear()
    if args.json:
        print(json.dumps(report.to_json(), sort_keys=True), file=out)
    else:
        print("\n".join(report.lines()), file=out)
    return 0 if report.ready else 1
