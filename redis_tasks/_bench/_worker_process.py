"""One ``redis-tasks worker`` process a scenario runs its own handler in, and the file
of lines that handler writes (the ``fairness`` and ``parking`` scenarios).

The handler writes a line per event to a file rather than stdout or Redis: an append
never blocks the worker's event loop on a reader that falls behind (a pipe does once
its buffer is full), and it adds no Redis command to the load being measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import IO, Final

from ._children import spawn
from ._probe import Probe
from ._progress import Progress
from ._systems import AdapterError

__all__ = ["LineFile", "check_alive", "wait_progress", "wait_reading", "worker_process"]

_READY: Final = 120.0  # seconds for a worker to start reading (imports are slow)
_POLL: Final = 0.02  # seconds between looks at a condition
_STALL: Final = 60.0  # seconds without progress before a scenario gives up


@contextlib.asynccontextmanager
async def worker_process(
    handler: str,
    options: Sequence[str],
    *,
    url: str,
    log: IO[bytes],
    env: dict[str, str],
    grace: float,
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``redis-tasks worker <handler> <options>`` on ``url`` (by ``$REDIS_URL``, never
    on a command line: it may hold a password), with ``env`` added; stopped after
    with SIGTERM, and killed if it takes longer than ``grace`` seconds."""
    process = await spawn(
        sys.executable,
        "-m",
        "redis_tasks",
        "worker",
        handler,
        *options,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=log,
        env={**os.environ, "REDIS_URL": url, **env},
        # Its own process group: a Ctrl-C of the harness does not stop it before the
        # harness does, in order (the worker first, then the keys go).
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    await process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()


def check_alive(process: asyncio.subprocess.Process, what: str) -> None:
    """Raise when the worker ``what`` names has exited."""
    if process.returncode is not None:
        raise AdapterError(f"the {what} worker exited ({process.returncode}); see the bench log")


async def wait_reading(
    probe: Probe, mark: list[int], process: asyncio.subprocess.Process, readers: int, what: str
) -> None:
    """Until the worker blocks a stream read on every partition (``readers`` of them,
    by clients newer than ``mark``): it is idle and ready."""
    deadline = time.monotonic() + _READY
    while await probe.blocked_clients("xreadgroup", mark) < readers:
        check_alive(process, what)
        if time.monotonic() > deadline:
            raise AdapterError(f"the {what} worker was not reading within {_READY} s")
        await asyncio.sleep(_POLL)  # poll interval of this condition wait


async def wait_progress(
    count: Callable[[], int],
    total: int,
    process: asyncio.subprocess.Process,
    what: str,
    progress: Progress,
    label: str,
) -> None:
    """Until ``count()`` (what the worker ``what`` names has done so far, as the lines it
    wrote tell) reaches ``total``, shown as ``label``'s progress; gives up after
    :data:`_STALL` seconds without progress, or when the worker exits."""
    seen, moved = -1, time.monotonic()
    while True:
        done = count()
        progress.update(label, min(done, total), total)
        if done >= total:
            return
        check_alive(process, what)
        now = time.monotonic()
        if done > seen:
            seen, moved = done, now
        elif now - moved > _STALL:
            raise AdapterError(f"{label}: no progress for {_STALL:.0f} s")
        await asyncio.sleep(_POLL)  # poll interval of this condition wait


class LineFile:
    """The lines a worker's handler appends to a file, read as they come (whole lines
    only: a line half written is read once it is whole)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = 0

    def new_lines(self) -> list[str]:
        """The lines written since the last call."""
        with self._path.open("rb") as file:
            file.seek(self._offset)
            data = file.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        return data[:end].decode().splitlines()
