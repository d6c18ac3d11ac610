"""The processes the harness starts: each dies with it, and it can stop those left.

Every child of a bench run (an adapter, a worker, a server, a client,
``redis-benchmark``) is started by :func:`spawn`. On Linux the child asks the kernel
for SIGKILL when the harness dies (``PR_SET_PDEATHSIG``): a harness killed outright
(SIGKILL, the OOM killer) leaves no worker behind that would write keys again after
``redis-tasks bench --clean`` removed them. :func:`kill_all` stops whatever a
scenario cut short by Ctrl-C or an error had no chance to stop, before the run's keys
are removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, Final

__all__ = ["kill_all", "spawn"]

_PR_SET_PDEATHSIG: Final = 1  # <linux/prctl.h>
_KILL_WAIT: Final = 10.0  # seconds for killed children to be reaped

_live: set[asyncio.subprocess.Process] = set()


def _find_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


# Looked up once here: the forked child only calls it (no loading between fork and exec).
_PRCTL: Final = _find_prctl()


def _dies_with(parent: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` asking for SIGKILL when ``parent`` dies (None off Linux)."""
    prctl = _PRCTL
    if prctl is None:
        return None
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sigkill)
        if os.getppid() != parent:  # the harness died before the request took hold
            os._exit(1)

    return preexec


async def spawn(*argv: str, **options: Any) -> asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec(*argv, **options)``, for a child that dies with
    this process and that :func:`kill_all` stops."""
    process = await asyncio.create_subprocess_exec(
        *argv, preexec_fn=_dies_with(os.getpid()), **options
    )
    _live.difference_update([p for p in _live if p.returncode is not None])
    _live.add(process)
    return process


async def kill_all() -> int:
    """SIGKILL every child still running and wait until they are gone; how many there were."""
    running = [p for p in _live if p.returncode is None]
    for process in running:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
    if running:
        async with asyncio.timeout(_KILL_WAIT):
            await asyncio.gather(*(p.wait() for p in running))
    _live.clear()
    return len(running)
