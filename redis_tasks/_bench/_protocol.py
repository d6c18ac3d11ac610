"""The line protocol between the benchmark harness and a system under test.

Standard library only: peer adapters run it in their own virtualenv, which has
neither redis-tasks nor its dependencies, and load this file by path.

An *adapter* is an object with three coroutine functions (see :class:`Adapter`):
``enqueue`` puts no-op jobs on a queue, ``work`` runs a worker that calls
``on_job`` at the start of every job, and ``clean`` deletes the queue's keys.
:func:`main` runs an adapter as one of two processes the harness talks to over
stdin/stdout, one command or event per line:

``client URL QUEUE``
    reads ``enqueue N`` (N jobs, concurrently), ``stamp`` (one job carrying the
    wall-clock time just before the enqueue call) and ``clean``; answers ``ok``
    after each, or ``error <type>``.
``worker URL QUEUE CONCURRENCY``
    runs the worker. ``reset`` zeroes its job count (answer ``ok``); ``report``
    answers ``seen <jobs since reset> <unix time the last of them started> <CPU
    seconds this process has used>``;
    ``sizes`` answers ``sizes <JSON>``: how many claim calls brought how many jobs, so
    far (``{}`` from a system that does not count them: the adapter's optional
    ``claim_sizes()``).
    ``expect N`` answers ``expecting`` and prints ``done <unix time>`` when the
    N-th job since has started. For every job that carries a stamp it prints
    ``lat <ms>`` (handler start minus stamp). If the worker stops on an error
    it prints ``error <type>`` and exits.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

__all__ = ["Adapter", "OnJob", "main"]

#: Called by the adapter's job function when a job starts, with the job's stamp.
OnJob = Callable[[float | None], None]


class Adapter(Protocol):
    """What a system under test provides (a module with these functions will do)."""

    NAME: str

    def enqueue(
        self, url: str, queue: str, count: int, stamp: float | None
    ) -> Coroutine[Any, Any, None]:
        """Enqueue ``count`` no-op jobs whose argument is ``stamp``."""

    def work(
        self, url: str, queue: str, concurrency: int, on_job: OnJob
    ) -> Coroutine[Any, Any, None]:
        """Run a worker at ``concurrency`` until cancelled; call ``on_job`` per job."""

    def clean(self, url: str, queue: str) -> Coroutine[Any, Any, None]:
        """Delete every key the queue left behind."""


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _lines() -> Any:
    """Lines of stdin, read without blocking the event loop."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        yield line.decode().strip()


async def _client(adapter: Adapter, url: str, queue: str) -> None:
    async for line in _lines():
        command, _, arg = line.partition(" ")
        try:
            if command == "enqueue":
                await adapter.enqueue(url, queue, int(arg), None)
            elif command == "stamp":
                await adapter.enqueue(url, queue, 1, time.time())
            elif command == "clean":
                await adapter.clean(url, queue)
            else:
                _say(f"error unknown-command:{command}")
                continue
        except Exception as exc:
            _say(f"error {type(exc).__name__}")
            continue
        _say("ok")


async def _worker(adapter: Adapter, url: str, queue: str, concurrency: int) -> None:
    expected = 0
    seen = 0
    last = 0.0

    def on_job(stamp: float | None) -> None:
        nonlocal seen, last
        now = time.time()
        seen += 1
        last = now
        if stamp is not None:
            _say(f"lat {(now - stamp) * 1000:.4f}")
        if seen == expected:
            _say(f"done {now:.6f}")

    reader = asyncio.current_task()
    assert reader is not None

    def ended(task: asyncio.Task[None]) -> None:
        if not task.cancelled():
            # The worker stopped by itself: say why (the type only) and stop reading.
            error = task.exception()
            _say(f"error {type(error).__name__ if error else 'worker-returned'}")
            reader.cancel()

    runner = asyncio.create_task(adapter.work(url, queue, concurrency, on_job))
    runner.add_done_callback(ended)
    try:
        async for line in _lines():
            command, _, arg = line.partition(" ")
            if command == "expect":
                expected, seen = int(arg), 0
                _say("expecting")
            elif command == "reset":
                expected, seen, last = 0, 0, 0.0
                _say("ok")
            elif command == "report":
                _say(f"seen {seen} {last:.6f} {time.process_time():.6f}")
            elif command == "sizes":
                sizes = getattr(adapter, "claim_sizes", None)
                _say(f"sizes {json.dumps(sizes() if sizes is not None else {})}")
            else:
                _say(f"error unknown-command:{command}")
    finally:
        runner.cancel()
        await asyncio.gather(runner, return_exceptions=True)


def _run(main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run``, or uvloop's when ``REDIS_TASKS_LOOP=uvloop`` (redis-tasks'
    setting; a peer's adapter is run with the default loop)."""
    if os.environ.get("REDIS_TASKS_LOOP") == "uvloop":
        import uvloop

        uvloop.run(main)
    else:
        asyncio.run(main)


def main(adapter: Adapter, argv: list[str] | None = None) -> None:
    """Run ``adapter`` as the process ``argv`` names (see the module docstring)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) >= 3 and args[0] == "client":
        _run(_client(adapter, args[1], args[2]))
    elif len(args) >= 4 and args[0] == "worker":
        try:
            _run(_worker(adapter, args[1], args[2], int(args[3])))
        except asyncio.CancelledError:
            raise SystemExit(1) from None
    else:
        raise SystemExit("usage: client URL QUEUE | worker URL QUEUE CONCURRENCY")
