"""The ``mcp`` scenario's child processes: servers, workers and lean clients.

A process starts one (in its own process group, stderr to the log) and
stops it gracefully; :class:`Client` speaks the line protocol of
:mod:`._mcp_client`; :func:`running` starts a system's servers and workers, waits
until they listen and read, and stops them after. Their CPU comes from
``/proc/<pid>/stat`` (Linux; elsewhere it is None).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Self

from redis_tasks.testing import free_port

from ._children import spawn
from ._mcp_settings import McpSettings
from ._mcp_systems import McpSystem
from ._probe import Probe
from ._systems import AdapterError

__all__ = ["START_TIMEOUT", "Client", "Stack", "running"]

START_TIMEOUT: Final = 120.0  # seconds for a process to listen or read (imports are slow)
_STOP_GRACE: Final = 15.0
_POLL: Final = 0.05  # seconds between readiness checks


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of process ``pid`` (Linux ``/proc``), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: count fields after its ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_total(pids: Sequence[int]) -> float | None:
    readings = [_cpu_seconds(pid) for pid in pids]
    if any(reading is None for reading in readings):
        return None
    return sum(reading for reading in readings if reading is not None)


class _Process:
    """A child process of the scenario (a server, a worker or a client)."""

    def __init__(self, process: asyncio.subprocess.Process, label: str) -> None:
        self.process = process
        self.label = label

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        env: dict[str, str],
        log: IO[bytes],
        label: str,
        *,
        pipes: bool = False,
        cwd: str | None = None,
    ) -> Self:
        """Start ``argv``; stderr goes to ``log``; stdin/stdout are pipes when asked."""
        pipe = asyncio.subprocess.PIPE if pipes else asyncio.subprocess.DEVNULL
        process = await spawn(
            *argv,
            stdin=pipe,
            stdout=pipe,
            stderr=log,
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            cwd=cwd,
            # Its own process group: a Ctrl-C of the harness does not reach it
            # before the harness stops it in order.
            start_new_session=True,
        )
        return cls(process, label)

    @property
    def pid(self) -> int:
        """The process ID."""
        return self.process.pid

    def check(self) -> None:
        """Raise :class:`AdapterError` if the process has exited."""
        if self.process.returncode is not None:
            raise AdapterError(f"{self.label} exited ({self.process.returncode}); see the log")

    async def stop(self) -> None:
        """SIGTERM (servers and workers shut down gracefully), SIGKILL after a grace."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(_STOP_GRACE):
                    await self.process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()


class Client(_Process):
    """A :mod:`._mcp_client` process: job in, ``ready``, ``go``, progress, result."""

    done = 0

    async def send(self, line: str) -> None:
        """Write one line to its stdin."""
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()

    async def expect(self, prefix: str, within: float) -> str:
        """The next line starting with ``prefix`` (``n`` lines update :attr:`done`)."""
        assert self.process.stdout is not None
        async with asyncio.timeout(within):
            while True:
                raw = await self.process.stdout.readline()
                if not raw:
                    code = await self.process.wait()
                    raise AdapterError(f"{self.label} exited ({code}); see the log")
                line = raw.decode().strip()
                if line.startswith("error "):
                    raise AdapterError(f"{self.label}: {line}")
                if line.startswith("n "):
                    self.done = int(line[2:])
                if line.startswith(prefix):
                    return line

    async def stop(self) -> None:
        """Close stdin (the client then ends by itself); the base stop after."""
        if self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.close()
        await super().stop()


@dataclass
class Stack:
    """The running servers and workers of one system."""

    system: McpSystem
    ports: list[int] = field(default_factory=list)
    servers: list[_Process] = field(default_factory=list)
    workers: list[_Process] = field(default_factory=list)

    def endpoints(self) -> list[list[Any]]:
        """Every server as the client's ``[host, port, path]``."""
        return [["127.0.0.1", port, self.system.path] for port in self.ports]

    def cpu(self) -> tuple[float | None, float | None]:
        """CPU seconds the servers and the workers have used so far."""
        return (
            _cpu_total([p.pid for p in self.servers]),
            _cpu_total([p.pid for p in self.workers]),
        )

    def check(self) -> None:
        """Raise if a server or worker has exited."""
        for process in (*self.servers, *self.workers):
            process.check()


async def _listening(port: int, process: _Process) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        process.check()
        try:
            async with asyncio.timeout(1):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
        except (OSError, TimeoutError):
            writer = None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return
        if time.monotonic() > deadline:
            raise AdapterError(f"{process.label} did not listen within {START_TIMEOUT} s")
        await asyncio.sleep(_POLL)  # poll interval of this condition wait


@contextlib.asynccontextmanager
async def running(
    system: McpSystem, settings: McpSettings, probe: Probe, log: IO[bytes]
) -> AsyncIterator[Stack]:
    """The system's K servers (listening) and W workers (reading), stopped after."""
    stack = Stack(system)
    try:
        mark = await probe.newest_clients()
        for i in range(settings.workers):
            stack.workers.append(
                await _Process.start(
                    system.worker(i), system.env, log, f"{system.name} worker {i}", cwd=system.cwd
                )
            )
        for i in range(settings.servers):
            port = free_port()
            stack.ports.append(port)
            stack.servers.append(
                await _Process.start(
                    system.server(port),
                    system.env,
                    log,
                    f"{system.name} server {i}",
                    cwd=system.cwd,
                )
            )
        for port, server in zip(stack.ports, stack.servers, strict=True):
            await _listening(port, server)
        # Every worker blocks a read per partition once it is ready for work.
        wanted = settings.workers * system.readers + settings.servers * system.server_readers
        deadline = time.monotonic() + START_TIMEOUT
        while await probe.blocked_clients("xreadgroup", mark) < wanted:
            stack.check()
            if time.monotonic() > deadline:
                raise AdapterError(
                    f"{system.name} workers were not reading within {START_TIMEOUT} s"
                )
            await asyncio.sleep(_POLL)  # poll interval of this condition wait
        yield stack
    finally:
        # Servers first (no new tasks), then the workers, each shut down gracefully.
        await asyncio.gather(*(p.stop() for p in stack.servers), return_exceptions=True)
        await asyncio.gather(*(p.stop() for p in stack.workers), return_exceptions=True)
