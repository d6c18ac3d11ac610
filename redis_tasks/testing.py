"""Throwaway redis-server processes for tests and benchmarks.

``start_redis_server(directory)`` starts Debian's (or ``$REDIS_SERVER``'s)
``redis-server`` on a free loopback port with persistence off unless ``extra``
arguments say otherwise, and returns once it answers ``PING``. It never binds
anything but 127.0.0.1.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import redis

__all__ = ["RedisServer", "free_port", "start_redis_server"]


@dataclass(frozen=True)
class RedisServer:
    """A running redis-server process."""

    url: str
    port: int
    directory: Path
    process: subprocess.Popen[bytes]

    def stop(self) -> None:
        """Terminate the server (SIGTERM) and wait for it."""
        if self.process.poll() is None:
            self.process.terminate()
        self.process.wait(timeout=30)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def start_redis_server(
    directory: Path, *extra: str, port: int | None = None, startup_timeout: float = 15.0
) -> RedisServer:
    """Start redis-server on a free (or the given) loopback port; wait until it answers.

    Data and the log (``redis.log``) go to ``directory``; ``extra`` arguments are
    appended to the command line (e.g. ``"--appendonly", "yes"``).
    """
    binary = os.environ.get("REDIS_SERVER") or shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server not found: install it (`make test` does)")
    port = port or free_port()
    process = subprocess.Popen(  # noqa: S603 - a fixed binary with our own arguments
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(directory),
            "--logfile",
            str(directory / "redis.log"),
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url, socket_connect_timeout=0.2)
    deadline = time.monotonic() + startup_timeout
    try:
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    process.kill()
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.02)  # polling a process that is starting; nothing to wait on
    finally:
        client.close()
    return RedisServer(url, port, directory, process)
