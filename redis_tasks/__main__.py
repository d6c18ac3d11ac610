"""The ``redis-tasks`` command line."""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["build_parser", "main"]

# What ``redis-tasks --help`` says first: plain words (the module docstring has markup).
_DESCRIPTION = "redis-tasks: durable task state for MCP servers, on the Redis you run."


def build_parser() -> argparse.ArgumentParser:
    """The ``redis-tasks`` argument parser, every sub-command included."""
    from ._bench._cli import add_bench_command
    from ._cli_check import add_check_command
    from ._cli_dashboard import add_dashboard_command
    from ._cli_inspect import add_inspect_command
    from ._cli_tenants import add_tenants_command
    from ._cli_worker import add_worker_command
    from ._version import DISTRIBUTION, __version__

    parser = argparse.ArgumentParser(prog="redis-tasks", description=_DESCRIPTION)
    parser.add_argument(
        "--version", action="version", version=f"redis-tasks {__version__} ({DISTRIBUTION})"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="run a short scripted demo of the task manager")
    demo.add_argument(
        "--redis-url",
        default=None,
        help="Redis to use (default: $REDIS_URL, else an embedded in-process Redis)",
    )
    add_worker_command(commands)
    add_inspect_command(commands)
    add_tenants_command(commands)
    add_dashboard_command(commands)
    add_bench_command(commands)
    add_check_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run ``redis-tasks <command>``."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from ._bench._cli import run_bench
    from ._cli_dashboard import run_dashboard
    from ._cli_inspect import run_inspect
    from ._cli_tenants import run_tenants
    from ._cli_worker import run_worker

    if args.command == "worker":
        return run_worker(args)
    if args.command == "inspect":
        return run_inspect(args)
    if args.command == "tenants":
        return run_tenants(args)
    if args.command == "dashboard":
        return run_dashboard(args)
    if args.command == "bench":
        return run_bench(args)
    if args.command == "check":
        from ._cli_check import run_check

        return run_check(args)
    if args.command == "demo":
        from .demo import main as demo_main

        return demo_main(args.redis_url)
    parser.error(f"unknown command {args.command}")  # pragma: no cover
    return 2  # pragma: no cover


def _main_quietly() -> int:
    """``main`` for the console script: a closed pipe (``| head``) ends quietly."""
    try:
        return main()
    except BrokenPipeError:
        # Python would complain again when flushing stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":
    sys.exit(_main_quietly())
