"""Instructions, not seconds: the work per drained job of the primaries and our workers.

Why: on a shared two-core machine, CPU seconds per job swing by a third between rounds,
and a cluster's six servers sharing two cores pay for their crowding (cache refills,
context switches, waiting for a core) in seconds that a cluster with a core per server
does not pay. callgrind counts the instructions a process runs in user space whatever
else the machine does: the same work gives the same count, run after run.

The cost: each private server and each of our worker processes runs under
``valgrind --tool=callgrind`` from its start
(``--instr-atstart=no``: a few times slower while not counted), and about fifty times
slower while counted, so the drain runs at a few hundred jobs a second. What the kernel
does for the server (its reads, writes and ``epoll_wait``) is not counted: the I/O
events per job stand beside it for that. Nor is ``serverCron``: it runs by the clock,
ten times a second on each primary, so under callgrind's slowdown it would weigh fifty
times what it weighs at full speed, and three times more on three primaries.
``callgrind_control`` switches counting on in the workers before they are stopped for
the enqueue and in each primary as they resume, and dumps the counts when the last job
has started.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Final

__all__ = ["Callgrind", "CallgrindError"]

_CONTROL_TIMEOUT: Final = 30.0  # seconds for callgrind_control to reach a busy server
_TOTALS: Final = re.compile(rb"^totals:\s*(\d+)\s*$", re.MULTILINE)


class CallgrindError(RuntimeError):
    """valgrind or callgrind_control is missing, or a server did not answer it."""


class Callgrind:
    """The servers' callgrind dumps, in ``directory``: a wrapper to start each server
    under callgrind, and the switches that count one stretch of their work."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def command(self, *, children: bool = False) -> list[str]:
        """The valgrind command line a counted program's own follows: callgrind, not
        counting until told, dumps in :attr:`directory`; with ``children``, what the
        program execs is counted in its place (``env ... python``)."""
        valgrind = shutil.which("valgrind")
        if valgrind is None or shutil.which("callgrind_control") is None:
            raise CallgrindError("--instructions needs valgrind (apt-get install valgrind)")
        self.directory.mkdir(parents=True, exist_ok=True)
        return [
            valgrind,
            "--tool=callgrind",
            "--instr-atstart=no",
            # serverCron's work goes by the clock, not by the jobs: ten runs a second,
            # each fifty times slower under callgrind, would count as if per job, and
            # three primaries run three. Not counted (clusterCron runs inside it).
            "--toggle-collect=serverCron",
            "--collect-atstart=yes",  # a toggle alone would count serverCron only
            f"--callgrind-out-file={self.directory}/cg.%p",
            f"--log-file={self.directory}/valgrind.%p.log",
            *(["--trace-children=yes"] if children else []),
        ]

    def wrapper(self, binary: str | None = None) -> Path:
        """A script that runs ``binary`` (a redis-server) under callgrind, not counting
        until told; its path takes the binary's place. By default the server
        ``redis_tasks.testing`` starts: ``$REDIS_SERVER``, else the ``PATH``'s."""
        if binary is None:
            binary = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
            if binary is None:
                raise CallgrindError("redis-server not found: install it (`make test` does)")
        script = self.directory / "redis-server-under-callgrind"
        command = [*self.command(), binary]
        script.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n')
        script.chmod(0o755)
        return script

    async def start(self, pids: Sequence[int]) -> None:
        """Count from now in the servers ``pids``."""
        await asyncio.gather(*(self._control("--instr=on", pid) for pid in pids))

    async def take(self, pids: Sequence[int]) -> list[int]:
        """The instructions each server in ``pids`` ran since :meth:`start`; counting
        stops."""
        await asyncio.gather(*(self._control("--dump", pid) for pid in pids))
        await asyncio.gather(*(self._control("--instr=off", pid) for pid in pids))
        return [self._newest_total(pid) for pid in pids]

    async def _control(self, command: str, pid: int) -> None:
        process = await asyncio.create_subprocess_exec(
            "callgrind_control",
            command,
            str(pid),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(_CONTROL_TIMEOUT):
                out, _ = await process.communicate()
        except TimeoutError:
            process.kill()
            await process.wait()
            raise CallgrindError(f"callgrind_control {command} {pid}: no answer") from None
        if process.returncode != 0 or b"OK." not in out:
            said = out.decode(errors="replace").strip()[-300:]
            raise CallgrindError(f"callgrind_control {command} {pid} failed: {said}")

    def _newest_total(self, pid: int) -> int:
        # Dumps are cg.<pid>.<n>, n counting up from 1; each holds what ran since the last.
        dumps = sorted(
            self.directory.glob(f"cg.{pid}.*"), key=lambda path: int(path.suffix.lstrip("."))
        )
        if not dumps:
            raise CallgrindError(f"server {pid} wrote no callgrind dump")
        found = _TOTALS.search(dumps[-1].read_bytes())
        if found is None:
            raise CallgrindError(f"{dumps[-1]} has no totals line")
        return int(found.group(1))
