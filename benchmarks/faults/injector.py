"""The faults: pauses, connection kills and restarts, injected in turn."""

from __future__ import annotations

import asyncio
import itertools
import signal
from collections.abc import Awaitable, Callable
from typing import Any

from redis.asyncio import Redis

from .load import Load
from .processes import PrivateRedis
from .records import KINDS, Fault, Settings


class Injector:
    """Injects the faults in turn on the schedule the package docstring describes."""

    def __init__(
        self, url: str, server: PrivateRedis | None, settings: Settings, load: Load
    ) -> None:
        self.url = url
        self.server = server
        self.settings = settings
        self.load = load
        self.kinds = KINDS if server is not None else tuple(k for k in KINDS if k != "restart")
        self.faults: list[Fault] = []

    def count(self, kind: str) -> int:
        """How many faults of ``kind`` were injected so far."""
        return sum(1 for f in self.faults if f.kind == kind)

    async def run(self, until: float) -> None:
        """Inject faults until ``until`` (seconds into the load) and at least one of each kind."""
        next_at = self.settings.warmup
        for index in itertools.count():
            if self.load.now() >= until and all(self.count(k) for k in self.kinds):
                return
            # Sleeping between injections is the schedule itself, not a wait for a result.
            await asyncio.sleep(max(0.0, next_at - self.load.now()))
            fault = await self._inject(self.kinds[index % len(self.kinds)])
            self.faults.append(fault)
            next_at = max(fault.at + self.settings.every, fault.healed + self.settings.gap)

    async def _admin(self, command: Callable[[Redis], Awaitable[Any]]) -> None:
        """One command on a connection of its own (a kill spares it: SKIPME)."""
        admin = Redis.from_url(self.url, socket_timeout=10, socket_connect_timeout=10)
        try:
            await command(admin)
        finally:
            await admin.aclose()

    async def _inject(self, kind: str) -> Fault:
        timeout = self.settings.timeout
        nth = self.count(kind)
        at = self.load.now()
        if kind in ("pause_all", "pause_write"):
            # One pause shorter than the timeout (calls wait it out), one longer (they
            # time out); pause_all starts with the longer one, pause_write the shorter.
            longer = (nth % 2 == 0) == (kind == "pause_all")
            ms = int(timeout * (1.5 if longer else 0.5) * 1000)
            await self._admin(lambda r: r.client_pause(ms, all=kind == "pause_all"))
            return Fault(kind, at, at + ms / 1000, pause_ms=ms)
        if kind == "kill":
            await self._admin(lambda r: r.client_kill_filter(_type="normal", skipme=True))
            return Fault(kind, at, self.load.now())
        if kind == "pause_write_kill":
            ms = int(timeout * 2 * 1000)
            await self._admin(lambda r: r.client_pause(ms, all=False))
            # CLIENT KILL is no write, so it runs during a write pause (not an ALL one).
            await asyncio.sleep(timeout * 0.75)
            await self._admin(lambda r: r.client_kill_filter(_type="normal", skipme=True))
            return Fault(kind, at, at + ms / 1000, pause_ms=ms)
        assert kind == "restart"
        assert self.server is not None  # restart is only scheduled on a private server
        how = signal.SIGKILL if nth % 2 == 0 else signal.SIGTERM
        await self.server.restart(how)
        return Fault(kind, at, self.load.now(), how=how.name)
