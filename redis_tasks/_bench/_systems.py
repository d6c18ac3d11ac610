"""The processes a benchmark drives: a system's client and workers (see :mod:`._protocol`)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from ._children import spawn

__all__ = [
    "PEERS",
    "AdapterProcess",
    "System",
    "ours",
    "ours_metered",
    "ours_on_uvloop",
    "ours_traced",
    "peer",
]

#: The peer queues with an adapter in ``benchmarks/peers/peer_<name>.py``.
PEERS: Final = ("taskiq_redis", "bullmq", "saq", "arq", "docket")
_REPLY_TIMEOUT: Final = 600.0  # enqueueing 100,000 jobs of a slow peer takes minutes


@dataclass(frozen=True)
class System:
    """A queue under test: its name and the command line that runs its adapter."""

    name: str
    command: tuple[str, ...]

    @property
    def is_ours(self) -> bool:
        """Whether this is redis-tasks itself."""
        return self.name == "redis-tasks"

    @property
    def is_redis_tasks(self) -> bool:
        """Whether this is redis-tasks of any revision or variant (uvloop, metrics)."""
        return self.name.startswith("redis-tasks")


def ours() -> System:
    """redis-tasks, run by this interpreter."""
    return System("redis-tasks", (sys.executable, "-m", "redis_tasks._bench._adapter"))


def ours_on_uvloop() -> System:
    """redis-tasks again, its client and workers on uvloop: shown beside the default loop."""
    return System(
        "redis-tasks+uvloop",
        ("env", "REDIS_TASKS_LOOP=uvloop", sys.executable, "-m", "redis_tasks._bench._adapter"),
    )


def ours_metered() -> System:
    """redis-tasks again, recording every metric into the OpenTelemetry SDK with a
    Prometheus reader (as ``redis-tasks worker --metrics-port`` does): the cost of metrics."""
    return System(
        "redis-tasks+metrics",
        (
            "env",
            "REDIS_TASKS_METRICS=prometheus",
            sys.executable,
            "-m",
            "redis_tasks._bench._adapter",
        ),
    )


def ours_traced() -> System:
    """redis-tasks again, making its spans through the OpenTelemetry SDK's tracer
    provider (batched, exported nowhere): the cost of traces with a provider."""
    return System(
        "redis-tasks+traces",
        (
            "env",
            "REDIS_TASKS_BENCH_TRACES=1",
            sys.executable,
            "-m",
            "redis_tasks._bench._adapter",
        ),
    )


def peer(name: str, python: Path, peers_dir: Path) -> System:
    """The peer ``name``'s adapter, run by the peers' virtualenv ``python``."""
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; known: {', '.join(PEERS)}")
    script = peers_dir / f"peer_{name}.py"
    if not script.is_file():
        raise FileNotFoundError(f"no adapter at {script} (run from a source checkout)")
    if not python.is_file():
        raise FileNotFoundError(f"no peers' interpreter at {python} (make bench-peers)")
    return System(name.replace("_", "-"), (str(python), str(script)))


class AdapterError(RuntimeError):
    """An adapter process answered an error or went away."""


class AdapterProcess:
    """One adapter process, ``client`` or ``worker``, spoken to line by line."""

    def __init__(self, process: asyncio.subprocess.Process, label: str) -> None:
        self._process = process
        self.label = label
        self.latencies: list[float] = []  # ``lat`` lines seen so far, in ms
        self._stopped = False

    @property
    def pid(self) -> int:
        """The adapter process's ID."""
        return self._process.pid

    @classmethod
    async def start(
        cls, system: System, mode: Sequence[str], log: IO[bytes], label: str
    ) -> AdapterProcess:
        """Start ``system``'s adapter with ``mode`` arguments; stderr goes to ``log``."""
        process = await spawn(
            *system.command,
            *mode,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            # Its own process group: SIGSTOP/SIGCONT reach only it, and a
            # Ctrl-C of the harness does not kill it before it cleans up.
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        return cls(process, label)

    async def send(self, line: str) -> None:
        """Write one command line."""
        assert self._process.stdin is not None
        self._process.stdin.write(line.encode() + b"\n")
        await self._process.stdin.drain()

    async def read_until(self, *prefixes: str, within: float = _REPLY_TIMEOUT) -> str:
        """The next line starting with one of ``prefixes``; ``lat`` lines are collected."""
        assert self._process.stdout is not None
        async with asyncio.timeout(within):
            while True:
                raw = await self._process.stdout.readline()
                if not raw:
                    code = await self._process.wait()
                    raise AdapterError(f"{self.label} exited ({code}); see the bench log")
                line = raw.decode().strip()
                if line.startswith("lat "):
                    self.latencies.append(float(line[4:]))
                if line.startswith("error "):
                    raise AdapterError(f"{self.label}: {line}")
                if line.startswith(prefixes):
                    return line

    async def ask(self, command: str, *replies: str, within: float = _REPLY_TIMEOUT) -> str:
        """Send ``command`` and return the reply line (``ok`` unless ``replies`` say)."""
        await self.send(command)
        return await self.read_until(*(replies or ("ok",)), within=within)

    async def report(self) -> tuple[int, float, float]:
        """A worker's jobs since ``reset``, when the last of them started, its CPU seconds."""
        _, count, last, cpu = (await self.ask("report", "seen ")).split()
        return int(count), float(last), float(cpu)

    async def claim_sizes(self) -> dict[int, int]:
        """How many claim calls brought how many jobs, so far (empty: not counted, or an
        earlier revision's adapter, which does not know the command)."""
        try:
            reply = await self.ask("sizes", "sizes ")
        except AdapterError as exc:
            if "unknown-command:sizes" in str(exc):
                return {}
            raise
        return {int(size): count for size, count in json.loads(reply[len("sizes ") :]).items()}

    async def wait_latency(self, within: float = 30.0) -> float:
        """The next ``lat`` line's value, in ms."""
        seen = len(self.latencies)
        while len(self.latencies) == seen:
            await self.read_until("lat ", within=within)
        return self.latencies[seen]

    def pause(self) -> None:
        """SIGSTOP: the process holds still until :meth:`resume`."""
        self._process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT."""
        self._process.send_signal(signal.SIGCONT)

    async def stop(self, grace: float = 30.0) -> None:
        """Close stdin (the adapter's signal to stop); SIGKILL after ``grace`` seconds."""
        if self._stopped:
            return
        self._stopped = True
        if self._process.returncode is None:
            self._process.send_signal(signal.SIGCONT)
            assert self._process.stdin is not None
            self._process.stdin.close()
            try:
                async with asyncio.timeout(grace):
                    await self._process.wait()
            except TimeoutError:
                self._process.kill()
                await self._process.wait()
