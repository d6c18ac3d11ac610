"""Faults while the recorder runs, on one private redis-server, in turn: the server
SIGKILLed and started again on its append-only file; every client connection killed;
``CLIENT PAUSE ALL`` for half the calls' timeout, then for one and a half (calls then
time out, and their outcome is unknown to their callers).

``appendfsync always`` puts every write on disk before Redis acknowledges it;
``everysec`` fsyncs once a second, so a SIGKILL may take the last second of
acknowledged writes with it. The checker says what clients saw either way. (The
cluster's faults, failovers with a lagging replica and slot migrations, come next.)
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from redis.asyncio import Redis

from benchmarks.faults.processes import PrivateRedis
from redis_tasks import RedisTaskManager

from .checker import Anomaly, check
from .recorder import Recorder, histories, run_clients, run_workers

__all__ = ["KINDS", "Run", "classify", "record_with_faults"]


@dataclass
class Run:
    """One recording: its settings, the faults injected, the operations and anomalies."""

    fsync: str
    wait_replicas: int
    seconds: float
    faults: Counter[str] = field(default_factory=Counter)
    operations: int = 0
    unknown: int = 0
    tasks: int = 0
    anomalies: list[Anomaly] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The figures of the README's table for this run."""
        kinds = Counter(classify(a) for a in self.anomalies)
        return {
            "fsync": self.fsync,
            "wait_replicas": self.wait_replicas,
            "seconds": self.seconds,
            "faults": dict(self.faults),
            "tasks": self.tasks,
            "operations": self.operations,
            "unknown": self.unknown,
            "anomalies": dict(kinds),
            "per_thousand": round(1000 * len(self.anomalies) / max(self.operations, 1), 3),
        }


def classify(anomaly: Anomaly) -> str:
    """The kind of an anomaly, by its minimal history."""
    ops = anomaly.history
    if anomaly.undecided:
        return "undecided"
    wins = [
        op
        for op in ops
        if op.known
        and ((op.kind in ("complete", "fail") and op.value == "ok") or op.value == "cancelled")
    ]
    if len(wins) > 1:
        return "two winners"
    last = ops[-1]
    if last.kind == "find" and last.value is None:
        return "acknowledged task lost"
    if last.kind == "find":
        return "stale read or lost write"
    return f"unexplained {last.kind}"


#: The faults, in the order they are injected.
KINDS: Final = ("restart", "kill", "pause")


async def _inject(
    server: PrivateRedis,
    run: Run,
    until: float,
    every: float,
    kinds: tuple[str, ...],
    call_timeout: float,
) -> None:
    n = 0
    while time.monotonic() + every < until:
        await asyncio.sleep(every)  # the schedule itself: a fault every `every` seconds
        kind = kinds[n % len(kinds)]
        n += 1
        if kind == "restart":
            await server.restart(signal.SIGKILL)
        else:
            admin = Redis.from_url(server.url, socket_timeout=10)
            try:
                if kind == "kill":
                    await admin.client_kill_filter(_type="normal", skipme=True)
                else:
                    # Alternately shorter and longer than a call's deadline.
                    pause = call_timeout * (0.5 if run.faults[kind] % 2 == 0 else 1.5)
                    await admin.client_pause(int(pause * 1000), all=True)
                    await asyncio.sleep(pause)  # let it end before the next fault
            finally:
                await admin.aclose()
        run.faults[kind] += 1


async def record_with_faults(
    directory: Path,
    *,
    seconds: float,
    fsync: str = "always",
    every: float = 2.0,
    clients: int = 16,
    workers: int = 4,
    seed: int = 1,
    kinds: tuple[str, ...] = KINDS,
    call_timeout: float = 2.0,
) -> Run:
    """Record ``seconds`` of load on a private server under faults, then check it."""
    server = await PrivateRedis.start(directory, fsync)
    run = Run(fsync, 0, seconds)
    rng = random.Random(seed)
    recorder = Recorder("p0")
    try:
        async with RedisTaskManager.from_url(server.url, prefix="h", timeout=call_timeout) as m:
            until = time.monotonic() + seconds
            await asyncio.gather(
                run_clients(m, recorder, clients=clients, until=until, rng=rng),
                run_workers(m, recorder, workers=workers, until=until + 2.0, rng=rng),
                _inject(server, run, until, every, kinds, call_timeout),
            )
    finally:
        server.stop()
    tasks = histories(recorder.entries)
    run.tasks = len(tasks)
    run.operations = sum(len(ops) for ops in tasks.values())
    run.unknown = sum(1 for ops in tasks.values() for op in ops if not op.known)
    run.anomalies = await check(tasks)
    return run
