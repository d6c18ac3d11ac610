"""The processes the run starts: a private, restartable redis-server and the
``redis-tasks worker`` processes."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from redis_tasks.testing import RedisServer, start_redis_server

from .records import Settings

#: The checkout: workers run from here, so they import ``benchmarks.faults``' handler.
ROOT: Final = Path(__file__).resolve().parents[2]


class PrivateRedis:
    """A private redis-server with an append-only file, restartable in place.

    ``appendfsync always`` (the default) has every write on disk before it is
    acknowledged, so every acknowledged write survives a restart, even of the machine.
    """

    def __init__(self, server: RedisServer, options: tuple[str, ...]) -> None:
        self.server = server
        self.options = options

    @classmethod
    async def start(cls, directory: Path, fsync: str = "always") -> PrivateRedis:
        """Start one in ``directory`` on a free loopback port."""
        options = ("--appendonly", "yes", "--appendfsync", fsync)
        server = await asyncio.to_thread(
            start_redis_server, directory, *options, startup_timeout=60
        )
        return cls(server, options)

    @property
    def url(self) -> str:
        """Its URL (the same across restarts: same port)."""
        return self.server.url

    async def restart(self, how: signal.Signals) -> None:
        """Stop it with signal ``how``; start it again on the same port and data."""
        process = self.server.process
        process.send_signal(how)
        await asyncio.to_thread(process.wait, 60)
        self.server = await asyncio.to_thread(
            start_redis_server,
            self.server.directory,
            *self.options,
            port=self.server.port,
            startup_timeout=60,
        )

    def stop(self) -> None:
        """Stop it for good."""
        self.server.stop()


@dataclass
class WorkerProcess:
    """One ``redis-tasks worker benchmarks.faults:handler`` process and its log."""

    process: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        """Its process ID (the ``pid`` in the results of the tasks it ran)."""
        return self.process.pid

    @property
    def alive(self) -> bool:
        """Whether it is still running."""
        return self.process.returncode is None

    def started(self) -> bool:
        """Whether it logged that it runs."""
        if not self.log_path.exists():
            return False
        with self.log_path.open("rb") as lines:
            return any(b'"worker_started"' in line for line in lines)

    async def stop(self, grace: float) -> int:
        """SIGTERM (a graceful stop); SIGKILL after ``grace`` seconds. Its exit code."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    return await self.process.wait()
            except TimeoutError:
                self.process.kill()
        return await self.process.wait()


async def start_worker(
    url: str, prefix: str, settings: Settings, directory: Path, index: int
) -> WorkerProcess:
    """Start one worker process; its JSON log goes to ``directory``."""
    log_path = directory / f"worker-{index}.log"
    env = {
        **os.environ,
        # The URL travels in the environment, not on a command line others can read.
        "REDIS_URL": url,
        "FAULTS_PREFIX": prefix,
        "FAULTS_TIMEOUT": str(settings.timeout),
        "FAULTS_TTL_MS": str(int(settings.ttl * 1000)),
        "FAULTS_HANDLER_MS": str(settings.handler_ms),
    }
    log = log_path.open("wb")
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "redis_tasks",
            "worker",
            "benchmarks.faults:handler",
            "--prefix",
            prefix,
            "--name",
            f"faults-w{index}",
            "--concurrency",
            str(settings.concurrency),
            "--lease",
            str(settings.lease),
            "--timeout",
            str(settings.timeout),
            "--log-level",
            "info",
            cwd=ROOT,  # the handler's module is found from the checkout
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log,
            # Its own session: a Ctrl-C of the harness reaches it only as our SIGTERM.
            start_new_session=True,
        )
    finally:
        log.close()  # the child has its own copy
    return WorkerProcess(process, log_path)
