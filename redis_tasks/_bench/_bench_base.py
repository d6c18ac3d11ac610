"""What every benchmark scenario runs with: :class:`Settings` and :class:`BenchBase`.

:class:`Settings` holds the sizes of every scenario (the CLI's options);
:class:`BenchBase` the URL, progress and log a :class:`~._scenarios.Bench` runs
with, fresh queue names, and warm adapter processes of a system.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

from ._args import FAIRNESS_PARTS
from ._callgrind import Callgrind
from ._namespace import RunNames
from ._progress import Progress, percentile
from ._systems import AdapterError, AdapterProcess, System

__all__ = ["MEMORY_WARM", "BenchBase", "Settings", "latencies"]

MEMORY_WARM: Final = 50  # jobs before the memory baseline: queue structures exist
_WARM_TRIES: Final = 200


@dataclass(frozen=True)
class Settings:
    """Sizes of every scenario (the CLI's options)."""

    tasks: int = 10_000
    concurrency: int = 32
    workers: tuple[int, ...] = (1, 2)
    rounds: int = 3
    pickups: int = 1_000  # per round: the p99 of a few hundred is its few worst, noise
    lifecycle_tasks: int = 5_000
    clients: int = 32
    lifecycle_processes: int = 2
    memory_tasks: int = 20_000
    pollers: int = 64
    find_ops: int = 50_000
    notifies: int = 200
    limit_requests: int = 100_000
    #: fairness: tenant A's flood (N), the worker's concurrency (C), the handler's
    #: sleep in ms (D), tenant B's tasks created during the flood (K).
    fair_tasks: int = 2_000
    fair_concurrency: int = 16
    fair_handler_ms: int = 50
    fair_late: int = 20
    #: fairness: how each tool's duration is drawn, of mean D (:data:`~._args.DURATIONS`),
    #: and when tenant B creates: from this long after the flood began, one every so
    #: many ms.
    fair_durations: str = "fixed"
    fair_late_after_ms: int = 200
    fair_late_every_ms: int = 100
    #: fairness: the worker's ``--newcomer-slots``, and the measurements a round
    #: takes (of :data:`~._args.FAIRNESS_PARTS`).
    fair_newcomer_slots: int = 0
    fair_parts: tuple[str, ...] = FAIRNESS_PARTS
    #: fairness: tenants and tasks each for the fairness index; tasks of each of
    #: the two weighted tenants.
    fair_tenants: int = 100
    fair_tenant_tasks: int = 100
    fair_weighted_tasks: int = 400
    #: fairness: create the many tenants' tasks interleaved (task i of every tenant,
    #: then task i + 1) instead of tenant after tenant.
    fair_interleaved: bool = False
    #: parking: tenant A's tasks that each ask a question nobody answers (N), the
    #: worker's concurrency (C), tenant B's plain tasks (K), how many of A's are
    #: answered at once (M), and the seconds Redis's commands are counted over (S).
    park_tasks: int = 10_000
    park_concurrency: int = 16
    park_late: int = 200
    park_answered: int = 1_000
    park_idle_s: float = 30.0
    #: drain: the folder of the callgrind dumps when the private servers and our
    #: workers run under callgrind (``--instructions``): each round then counts
    #: their instructions per job too.
    callgrind: Path | None = None


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def latencies(samples_ms: Sequence[float], *quantiles: float) -> dict[str, float]:
    names = {0.5: "p50", 0.99: "p99", 0.999: "p99.9"}
    return {names[q]: round(percentile(list(samples_ms), q), 3) for q in quantiles}


class BenchBase:
    """The URL, sizes, progress and log of a run; fresh queues; adapter processes.

    Queue names come from ``names``, the run's (:mod:`._namespace`): every key the
    run writes can be found by the run's pattern. Without it, a run of its own.
    """

    def __init__(
        self,
        url: str,
        settings: Settings,
        progress: Progress,
        log: IO[bytes],
        names: RunNames | None = None,
    ) -> None:
        self.url = url
        self.settings = settings
        self.progress = progress
        self.log = log
        self.names = names or RunNames()

    def new_queue(self) -> str:
        """A fresh queue name (a redis-tasks prefix or a peer's queue) of this run."""
        return self.names.queue()

    # -- processes ---------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _processes(
        self, system: System, queue: str, workers: int
    ) -> AsyncIterator[tuple[AdapterProcess, list[AdapterProcess]]]:
        """A client and ``workers`` warm worker processes; the queue is cleaned after."""
        started: list[AdapterProcess] = []
        try:
            client = await AdapterProcess.start(
                system, ("client", self.url, queue), self.log, f"{system.name} client"
            )
            started.append(client)
            procs = []
            # With --instructions our workers run under callgrind too (the drain counts them).
            worker_system = system
            if self.settings.callgrind is not None and system.is_redis_tasks:
                # Children too: a variant's command may start with `env`, which execs Python.
                under = Callgrind(self.settings.callgrind).command(children=True)
                worker_system = dataclasses.replace(system, command=(*under, *system.command))
            for i in range(workers):
                proc = await AdapterProcess.start(
                    worker_system,
                    ("worker", self.url, queue, str(self.settings.concurrency)),
                    self.log,
                    f"{system.name} worker {i}",
                )
                started.append(proc)
                procs.append(proc)
            if procs:
                await self._warm(client, procs)
            yield client, procs
            # Workers first: a worker still reading while its queue is deleted
            # would only recreate what the clean removes.
            await asyncio.gather(*(p.stop() for p in procs))
            await client.ask("clean")
        finally:
            await asyncio.gather(*(p.stop() for p in started), return_exceptions=True)

    async def _warm(self, client: AdapterProcess, procs: list[AdapterProcess]) -> None:
        """Until every worker has run a job: all are connected and reading."""
        warm: set[int] = set()
        for _ in range(_WARM_TRIES):
            before = [count for count, _, _ in [await p.report() for p in procs]]
            await client.ask("enqueue 1")
            deadline = time.monotonic() + 60
            while True:
                now = [count for count, _, _ in [await p.report() for p in procs]]
                if sum(now) > sum(before):
                    break
                if time.monotonic() > deadline:
                    raise AdapterError("a warm-up job was not run within 60 s")
                await asyncio.sleep(0.005)
            warm.update(i for i, (a, b) in enumerate(zip(before, now, strict=True)) if b > a)
            if len(warm) == len(procs):
                return
        raise AdapterError(f"only {len(warm)} of {len(procs)} workers took a job")
