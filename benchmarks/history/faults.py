"""A recording under faults: clients and workers in several processes (or in this one)
load a private server while this process injects faults in turn, then the histories
are checked.

On one private redis-server (:class:`OneRedisFaults`): the server SIGKILLed and
started again on its append-only file; every client connection killed; ``CLIENT
PAUSE ALL`` for half the calls' timeout, then for one and a half (calls then time out,
and their outcome is unknown to their callers). ``appendfsync always`` puts every
write on disk before Redis acknowledges it; ``everysec`` fsyncs once a second, so a
SIGKILL may take the last second of acknowledged writes with it. The cluster's faults
are in :mod:`.cluster`.

Processes share one clock: ``time.monotonic()`` is the host's ``CLOCK_MONOTONIC``,
so their entries merge into one history per task as they are.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing
import queue
import random
import signal
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from redis.asyncio import Redis

from benchmarks.faults.processes import PrivateRedis
from redis_tasks import RedisTaskManager

from .checker import Anomaly, check
from .cluster import CLUSTER_KINDS, ClusterFaults
from .promises import Breach, check_promises
from .recorder import Entry, Recorder, histories, run_clients, run_workers

__all__ = ["KINDS", "OneRedisFaults", "Run", "classify", "record_with_faults"]

#: The key prefix every recording writes under.
PREFIX: Final = "h"
#: Partitions of the recorded manager.
PARTITIONS: Final = 16


@dataclass
class Run:
    """One recording: its settings, the faults injected, the operations and anomalies."""

    topology: str
    fsync: str
    wait_replicas: int | str
    processes: int
    seconds: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    #: Replication bytes a promoted replica had not received, per lagging failover.
    missed_bytes: list[int] = field(default_factory=list)
    operations: int = 0
    #: Operations by kind, and by what they saw (``park``: parked or not).
    kinds: Counter[str] = field(default_factory=Counter)
    unknown: int = 0
    tasks: int = 0
    anomalies: list[Anomaly] = field(default_factory=list)
    breaches: list[Breach] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """The figures of the README's table for this run."""
        kinds = Counter(classify(a) for a in self.anomalies)
        return {
            "topology": self.topology,
            "fsync": self.fsync,
            "wait_replicas": self.wait_replicas,
            "processes": self.processes,
            "seconds": round(self.seconds, 1),
            "faults": dict(self.faults),
            "replica_lagged": sum(1 for b in self.missed_bytes if b > 0),
            "replica_missed_bytes_median": (
                statistics.median(self.missed_bytes) if self.missed_bytes else None
            ),
            "tasks": self.tasks,
            "operations": self.operations,
            "by_kind": dict(sorted(self.kinds.items())),
            "unknown": self.unknown,
            "anomalies": dict(kinds),
            "per_thousand": round(1000 * len(self.anomalies) / max(self.operations, 1), 3),
            "promises_broken": dict(Counter(b.kind for b in self.breaches)),
        }


def classify(anomaly: Anomaly) -> str:
    """The kind of an anomaly, by its minimal history (which keeps every operation
    nobody heard back from: see :mod:`.checker`)."""
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
    if any(not op.known and op.kind != "find" for op in ops):
        # A state seen that only an unconfirmed write (a timeout, a lost connection,
        # ReplicationError) could have made, and that a later operation did not see.
        return "unconfirmed write seen, then rolled back"
    last = ops[-1]
    if (last.kind == "find" and last.value is None) or last.value == "not_found":
        return "acknowledged task lost"
    if last.kind == "find":
        return "stale read or lost write"
    return f"unexplained {last.kind}"


#: The faults on one Redis, in the order they are injected.
KINDS: Final = ("restart", "kill", "pause")


class Faults(Protocol):
    """What a recording injects faults into: one server or a cluster."""

    faults: Counter[str]

    @property
    def url(self) -> str:
        """A URL the load connects to."""
        ...

    async def inject(self, kind: str) -> None:
        """Inject one fault of ``kind``; return once the server serves again."""
        ...

    def stop(self) -> None:
        """Stop every server."""
        ...


@dataclass
class OneRedisFaults:
    """A private redis-server and the faults injected on it (see the module)."""

    server: PrivateRedis
    call_timeout: float
    faults: Counter[str] = field(default_factory=Counter)

    @property
    def url(self) -> str:
        """The server's URL (the same across restarts)."""
        return self.server.url

    def stop(self) -> None:
        """Stop the server."""
        self.server.stop()

    async def inject(self, kind: str) -> None:
        """One restart, connection kill or pause."""
        if kind == "restart":
            await self.server.restart(signal.SIGKILL)
        else:
            admin = Redis.from_url(self.server.url, socket_timeout=10)
            try:
                if kind == "kill":
                    await admin.client_kill_filter(_type="normal", skipme=True)
                else:
                    # Alternately shorter and longer than a call's deadline.
                    pause = self.call_timeout * (0.5 if self.faults[kind] % 2 == 0 else 1.5)
                    await admin.client_pause(int(pause * 1000), all=True)
                    await asyncio.sleep(pause)  # let it end before the next fault
            finally:
                await admin.aclose()
        self.faults[kind] += 1


class _Stop(Protocol):
    def wait(self, timeout: float | None = None) -> bool: ...


async def _load(
    url: str, name: str, stop: _Stop, settings: dict[str, Any], ready: Any = None
) -> list[Entry]:
    """One process's clients and workers until ``stop`` is set (workers 2 s longer, to
    finish what the clients left running); ``ready`` (a queue) hears ``name`` once the
    manager is connected, before the first fault may strike its seed node."""
    recorder = Recorder(name)
    rng = random.Random(f"{settings['seed']}-{name}")
    stopped_at = [math.inf]

    async def watch() -> None:
        await asyncio.to_thread(stop.wait)
        stopped_at[0] = time.monotonic()

    async with RedisTaskManager.from_url(
        url,
        prefix=PREFIX,
        partitions=PARTITIONS,
        timeout=settings["call_timeout"],
        wait_replicas=settings["wait_replicas"],
        cluster=settings["cluster"],
    ) as m:
        if ready is not None:
            ready.put(name)
        watcher = asyncio.create_task(watch())
        await asyncio.gather(
            run_clients(
                m,
                recorder,
                clients=settings["clients"],
                until=lambda: time.monotonic() >= stopped_at[0],
                rng=rng,
            ),
            run_workers(
                m,
                recorder,
                workers=settings["workers"],
                until=lambda: time.monotonic() >= stopped_at[0] + 2.0,
                rng=rng,
            ),
        )
        await watcher
    return recorder.entries


def _child(
    url: str, name: str, stop: _Stop, out: Any, ready: Any, settings: dict[str, Any]
) -> None:
    """A recording process: its entries go back through ``out``."""
    out.put(asyncio.run(_load(url, name, stop, settings, ready)))


async def _collect(children: list[Any], out: Any) -> list[Entry]:
    """Every child's entries; raises at once if one exits without sending them."""
    entries: list[Entry] = []
    got = 0
    while got < len(children):
        try:
            entries.extend(await asyncio.to_thread(out.get, True, 1.0))
            got += 1
        except queue.Empty:
            if any(c.exitcode not in (None, 0) for c in children):
                raise RuntimeError("a recording process failed (its traceback is above)") from None
    for child in children:
        await asyncio.to_thread(child.join, 60)
    return entries


async def record_with_faults(
    directory: Path,
    *,
    seconds: float,
    topology: str = "standalone",
    fsync: str = "always",
    wait_replicas: int | str = "auto",
    every: float = 2.0,
    clients: int = 16,
    workers: int = 4,
    processes: int = 0,
    seed: int = 1,
    kinds: tuple[str, ...] | None = None,
    each: int = 0,
    call_timeout: float = 2.0,
) -> Run:
    """Record at least ``seconds`` of load on a private server (``topology``
    ``"standalone"`` or ``"cluster"``) under faults, and at least ``each`` faults of
    every kind, then check it. ``processes`` recording processes, each with
    ``clients`` client and ``workers`` worker coroutines (0: in this process)."""
    target: Faults
    if topology == "cluster":
        target = await ClusterFaults.start(
            directory, prefix=PREFIX, partitions=PARTITIONS, call_timeout=call_timeout
        )
        kinds = kinds or CLUSTER_KINDS
    else:
        server = await PrivateRedis.start(directory, fsync)
        target = OneRedisFaults(server, call_timeout)
        kinds = kinds or KINDS
    run = Run(topology, fsync if topology == "standalone" else "none", wait_replicas, processes)
    settings = {
        "seed": seed,
        "call_timeout": call_timeout,
        "wait_replicas": wait_replicas,
        "cluster": topology == "cluster",
        "clients": clients,
        "workers": workers,
    }
    context = multiprocessing.get_context("spawn")
    stop: Any = context.Event() if processes else threading.Event()
    out: Any = context.Queue()
    ready: Any = context.Queue()
    children = [
        context.Process(target=_child, args=(target.url, f"p{n}", stop, out, ready, settings))
        for n in range(processes)
    ]
    started = time.monotonic()
    entries: list[Entry] = []
    try:
        for child in children:
            child.start()
        local = (
            asyncio.create_task(_load(target.url, "p0", stop, settings, ready))
            if not processes
            else None
        )
        for _ in range(max(processes, 1)):
            await asyncio.to_thread(ready.get, True, 120)
        n = 0
        while time.monotonic() - started < seconds or any(target.faults[k] < each for k in kinds):
            await asyncio.sleep(every)  # the schedule itself: a fault every `every` s
            if any(not c.is_alive() for c in children) or (local and local.done()):
                break  # a recorder died: its error is below
            await target.inject(kinds[n % len(kinds)])
            n += 1
        stop.set()
        entries = await local if local is not None else await _collect(children, out)
    finally:
        stop.set()
        for child in children:
            if child.is_alive():
                child.kill()
        target.stop()
    run.seconds = time.monotonic() - started
    run.faults = Counter(target.faults)
    run.missed_bytes = list(getattr(target, "missed_bytes", []))
    tasks = histories(entries)
    run.tasks = len(tasks)
    run.operations = sum(len(ops) for ops in tasks.values())
    run.kinds = Counter(
        op.kind if op.kind != "park" else f"park {op.value}" for ops in tasks.values() for op in ops
    )
    run.unknown = sum(1 for ops in tasks.values() for op in ops if not op.known)
    run.anomalies = await check(tasks)
    run.breaches = check_promises(tasks)
    return run
