"""Options every command that reaches a Redis shares (``worker``, ``inspect``,
``dashboard``), and the manager they describe."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from redis.asyncio.connection import parse_url

from ._check.report import redact, scrub
from ._errors import BackendError, InternalError
from ._ids import MAX_PARTITIONS
from ._loop import run
from ._redis.inspect import MAX_SAMPLE
from ._redis.manager import RedisTaskManager

__all__ = [
    "HandlerError",
    "StartCheck",
    "add_redis_options",
    "add_sample_option",
    "add_tenant_key_option",
    "check_redis_options",
    "manager_from",
    "only_partitions",
    "park_after_arg",
    "run_reading",
    "tenant_key_problem",
    "unavailable",
    "url_problem",
    "wait_replicas_arg",
]


#: What a worker checks once connected, before it claims anything: raises ``ValueError``
#: (one line) when it must not run.
StartCheck: TypeAlias = Callable[[RedisTaskManager], Awaitable[None]]


class HandlerError(ValueError):
    """The handler named on the command line cannot be used (one line: which and why)."""


class _Given(argparse.Action):
    """Stores the value and notes that it was given (``<dest>_given``): a default is
    not a choice, and an app's own setting may then win without contradicting one."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, f"{self.dest}_given", True)


def unavailable(exc: BaseException, url: str | None) -> str:
    """Where Redis was not reached and why, for a start that failed: the URL without its
    credentials and the deepest cause's text with the password blotted out (``Error 111
    connecting to localhost:6542. Connection refused.``), as ``check`` says it."""
    cause: BaseException = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    said = scrub(str(cause), url or "") or type(cause).__name__
    where = f" at {redact(url)}" if url else ""
    return f"Redis unavailable{where}: {said}"


def add_redis_options(parser: argparse.ArgumentParser) -> None:
    """``--redis-url``, ``--prefix``, ``--partitions``, ``--only-partitions``, ``--timeout``."""
    parser.add_argument(
        "--redis-url",
        default=os.environ.get("REDIS_URL"),
        help="Redis to use, any node of a cluster (default: $REDIS_URL)",
    )
    parser.add_argument(
        "--prefix",
        default="rt",
        action=_Given,
        help="key prefix: one application's queue (default: rt)",
    )
    parser.add_argument(
        "--partitions", type=int, default=16, help="partitions of the prefix (default: 16)"
    )
    parser.add_argument(
        "--only-partitions",
        default=None,
        help="comma-separated partitions to serve (default: all)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        help="every Redis call's deadline in seconds, retries included (default 5; on a "
        "cluster, at least 2 x cluster-node-timeout + 2 s rides through a failover)",
    )


def add_sample_option(parser: argparse.ArgumentParser) -> None:
    """``--sample``: how many pending entries an inspection looks up per partition
    (checked by :func:`check_redis_options` where the parser has it)."""
    parser.add_argument(
        "--sample",
        type=int,
        default=256,
        help=f"pending entries looked up per partition (0 to {MAX_SAMPLE}; default 256)",
    )


def add_tenant_key_option(parser: argparse.ArgumentParser) -> None:
    """``--tenant-key`` (repeatable): a tenant key to show beside its digest, the one
    way a key is shown (checked by :func:`tenant_key_problem`)."""
    parser.add_argument(
        "--tenant-key",
        action="append",
        default=[],
        metavar="KEY",
        help="show this tenant key (create_task's tenant=) beside its digest; repeatable",
    )
    parser.add_argument(
        "--binding",
        action="append",
        default=[],
        metavar="ENDPOINT[=PARTITION_KEY]",
        help="show the tenant of the tasks created under this binding (a task created "
        "without a tenant key counts against its client's endpoint and partition key), "
        "e.g. /mcp=user:alice; repeatable",
    )


def tenant_key_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with ``--tenant-key`` or ``--binding`` (never the key itself), or
    ``None``."""
    for option, values in (("--tenant-key", args.tenant_key), ("--binding", args.binding)):
        for value in values:
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                return f"{option} must be valid UTF-8"
    if any(not b.partition("=")[0] for b in args.binding):
        return "--binding needs an endpoint: ENDPOINT[=PARTITION_KEY], e.g. /mcp=user:alice"
    return None


def only_partitions(args: argparse.Namespace) -> list[int] | None:
    """``--only-partitions`` as a list (``None``: all); :class:`ValueError` when one is
    not a partition of ``--partitions``."""
    if not args.only_partitions:
        return None
    try:
        chosen = [int(p) for p in args.only_partitions.split(",")]
    except ValueError:
        raise ValueError("--only-partitions takes comma-separated integers") from None
    if any(not 0 <= p < args.partitions for p in chosen):
        raise ValueError(f"--only-partitions must lie in 0..{args.partitions - 1}")
    return chosen


def url_problem(url: str | None) -> str | None:
    """What is wrong with a Redis URL (one line, never the URL itself: it may hold a
    password), or ``None``."""
    if not url:
        return "needs --redis-url or REDIS_URL"
    try:
        parse_url(url)
    except ValueError as exc:
        return f"--redis-url is not a Redis URL: {exc}"
    return None


def check_redis_options(args: argparse.Namespace) -> str | None:
    """What is wrong with the shared options (a message for the user), or ``None``."""
    problem = url_problem(args.redis_url)
    if problem is not None:
        return problem
    if not 1 <= args.partitions <= MAX_PARTITIONS:
        return f"--partitions must be 1 to {MAX_PARTITIONS}"
    if not args.timeout > 0:
        return "--timeout must be positive"
    try:
        only_partitions(args)
    except ValueError as exc:
        return str(exc)
    if not 0 <= getattr(args, "sample", 0) <= MAX_SAMPLE:
        return f"--sample must be 0 to {MAX_SAMPLE}"
    return None


def manager_from(args: argparse.Namespace, **options: Any) -> RedisTaskManager:
    """The manager the shared options describe (not entered yet)."""
    return RedisTaskManager.from_url(
        args.redis_url,
        prefix=args.prefix,
        partitions=args.partitions,
        timeout=args.timeout,
        **options,
    )


def run_reading(command: str, problem: str | None, body: Callable[[], Awaitable[int]]) -> int:
    """Run ``redis-tasks <command>``, a command that reads Redis: its options'
    ``problem``, if any, on stderr (exit 2), else ``body()``'s exit status, with a
    Redis failure told in one line (exit 1)."""
    if problem is not None:
        print(f"redis-tasks {command}: {problem}", file=sys.stderr)
        return 2
    return run(_told(command, body), "asyncio")


async def _told(command: str, body: Callable[[], Awaitable[int]]) -> int:
    try:
        return await body()
    except BackendError as exc:
        # The URL may hold a password: the message names the failure's kind only.
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "BackendError"
        print(f"redis-tasks {command}: Redis unavailable ({cause})", file=sys.stderr)
        return 1
    except InternalError:
        print(f"redis-tasks {command}: an unexpected reply from Redis", file=sys.stderr)
        return 1


def wait_replicas_arg(text: str) -> int | str:
    """``--wait-replicas``: ``auto`` or a count (0 or more)."""
    if text == "auto":
        return text
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not auto or a count: {text!r}") from None
    if count < 0:
        raise argparse.ArgumentTypeError("a count is 0 or more")
    return count


def park_after_arg(text: str) -> float | None:
    """``--park-after``: seconds (0 or more), or ``never``."""
    if text == "never":
        return None
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not seconds or never: {text!r}") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError("seconds are 0 or more")
    return seconds
