"""The ``fairness`` scenario: tenants sharing one worker (redis-tasks only; no peer has tenants).

Each measurement takes a fresh key prefix and one ``redis-tasks worker`` process
at concurrency C running :mod:`._fair_handler`, which records when each task
starts and then sleeps D ms. This process creates the tasks and stamps them with
``time.monotonic()``, the clock the handler's starts are in.

*Noisy neighbour* (:meth:`FairnessScenarios.fair_noisy`): with the worker idle
and reading, tenant A (partition key ``user:flood``) creates N tasks, 500 in
flight at a time; ``--fair-late-after-ms`` (0.2 s) after the flood began, tenant B
(``user:late``) creates K tasks, one every ``--fair-late-every-ms`` (100 ms), from
a manager of its own (its creates do not queue behind A's for a connection). Each
tool's duration is drawn (:func:`draw_durations`): all D (``fixed``: tools that
start together end together, so a slot frees only at the end of a whole wave, and
B may wait up to about one tool for it), or of mean D, ``uniform`` in [D/2, 3D/2]
or ``exponential``, from a generator seeded by the round's label (the same tools
in the same round of every run). B's create-to-start latency (from just before its
create call to its handler's start) beside first come, first served's
expectation N x D / C; how many of A's tasks started while a B task waited (the
order, whatever the machine's speed); and A's drain time (from the flood's start
to its last task's start). Run with fair dispatch (the default) and again with
``fair_dispatch=False`` on the creating managers (every task straight into the
work stream, as before tenants existed), side by side.

*Many tenants* (:meth:`FairnessScenarios.fair_tenants`): T tenants (``user:t<j>``)
create M tasks each before the worker starts, tenant after tenant (the harder
order: first come, first served would run the first tenants' tasks only;
``--fair-interleaved`` creates task i of every tenant, then task i + 1). The
backlog stands when the worker comes, so the index measures the order of
dispatch, not how fast this process creates (a worker running meanwhile would
rightly give the first tenants everything while they were alone). As in any
idle partition, the first task created in each goes straight into its work
stream: tenant after tenant, the first tenant gets one start more per
partition. Jain's fairness index of the starts per tenant over the first tenth
of them (1,000 of 10,000 at the defaults).

*Weights* (:meth:`FairnessScenarios.fair_weights`): two tenants of weight 3 and 1
create W tasks each, interleaved, before the worker starts; each one's share of
the first half of the starts (75 / 25 expected).

:func:`fairness_rounds` runs them all for every round, alternating the
measurements and the topologies; :mod:`._fair_figures` turns the rounds into the
reported figures and judges the targets.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import itertools
import random
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from redis_tasks._models import RequestContext
from redis_tasks._redis.manager import RedisTaskManager

from ._adapter import ORIGIN, delete_prefix
from ._args import FAIRNESS_PARTS
from ._bench_base import BenchBase
from ._fair_figures import fairness_figures
from ._fair_handler import STARTS_ENV
from ._probe import Probe
from ._worker_process import LineFile, wait_progress, wait_reading, worker_process

__all__ = ["MODES", "PARTS", "WEIGHTS", "FairnessScenarios", "draw_durations", "fairness_rounds"]

#: Fair dispatch, and first come, first served (``fair_dispatch=False``).
MODES: Final = ("fair", "fifo")
#: The measurements of a round, in the order a round takes them.
PARTS: Final = FAIRNESS_PARTS
#: The weighted measurement's two tenants' weights.
WEIGHTS: Final = (3, 1)
_HANDLER: Final = "redis_tasks._bench._fair_handler:handler"
_ENDPOINT: Final = "/mcp"
_CHUNK: Final = 500  # creates in flight at once: the flood is in place fast
_STOP_GRACE: Final = 15.0


class _Starts:
    """The worker's start lines (:mod:`._fair_handler`), read from its file as they come:
    each task's first start, in the order they started."""

    def __init__(self, path: Path) -> None:
        self._lines = LineFile(path)
        self.first: dict[str, float] = {}
        self.order: list[str] = []

    def read(self) -> None:
        """Take in the lines written since the last read."""
        for line in self._lines.new_lines():
            label, _, started = line.partition(" ")
            if label not in self.first:  # a task run twice counts at its first start
                self.first[label] = float(started)
                self.order.append(label)


def draw_durations(kind: str, mean_ms: int, count: int, seed: str) -> list[int]:
    """``count`` tool durations in ms, of mean ``mean_ms``, drawn as ``kind`` says (one
    of :data:`~._args.DURATIONS`) from a generator seeded by ``seed``."""
    if kind == "fixed":
        return [mean_ms] * count
    draw = random.Random(seed)  # noqa: S311 - durations of a benchmark, not a secret
    if kind == "uniform":
        return [draw.randint(mean_ms // 2, mean_ms * 3 // 2) for _ in range(count)]
    if kind == "exponential":
        return [max(1, round(draw.expovariate(1 / mean_ms))) for _ in range(count)]
    raise ValueError(f"unknown durations {kind!r}")


def _group(label: str) -> str:
    """The tenant part of a task's label (``t17.3`` -> ``t17``)."""
    return label.partition(".")[0]


async def _create_all(
    manager: RedisTaskManager, jobs: Sequence[tuple[RequestContext, int, str]]
) -> None:
    """Create a task per ``(who, weight, payload)``, up to :data:`_CHUNK` in flight."""
    for start in range(0, len(jobs), _CHUNK):
        await asyncio.gather(
            *(
                manager.create_task(who, ORIGIN, payload=payload.encode(), weight=weight)
                for who, weight, payload in jobs[start : start + _CHUNK]
            )
        )


class FairnessScenarios(BenchBase):
    """``fairness``: the noisy neighbour, many tenants, and weights (see the module)."""

    async def fair_part(self, part: str, label: str) -> dict[str, Any]:
        """One round of one measurement of :data:`PARTS`."""
        if part in MODES:
            return await self.fair_noisy(part, label)
        if part == "tenants":
            return await self.fair_tenants(label)
        if part == "weights":
            return await self.fair_weights(label)
        raise ValueError(f"unknown fairness measurement {part!r}")

    def _fair_worker(
        self, queue: str, starts: Path
    ) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
        """A ``redis-tasks worker`` process running :mod:`._fair_handler` on ``queue``,
        stopped gracefully (SIGTERM) after."""
        settings = self.settings
        options = ["--prefix", queue, "--concurrency", str(settings.fair_concurrency),
                   "--newcomer-slots", str(settings.fair_newcomer_slots),
                   # No line per task, as the other scenarios' workers; running handlers
                   # end within D ms of the stop.
                   "--log-level", "warning", "--name", "bench-fairness",
                   "--grace", "10"]  # fmt: skip
        return worker_process(
            _HANDLER,
            options,
            url=self.url,
            log=self.log,
            env={STARTS_ENV: str(starts)},
            grace=_STOP_GRACE,
        )

    async def _wait_starts(
        self, starts: _Starts, process: asyncio.subprocess.Process, count: int, label: str
    ) -> None:
        """Until ``count`` tasks have started."""

        def started() -> int:
            starts.read()
            return len(starts.order)

        await wait_progress(started, count, process, "fairness", self.progress, label)

    async def fair_noisy(self, mode: str, label: str) -> dict[str, Any]:
        """One noisy-neighbour run, fair dispatch or first come, first served (``mode``
        is one of :data:`MODES`): B's create-to-start latencies, A's drain."""
        settings = self.settings
        n, k = settings.fair_tasks, settings.fair_late
        # The same tools in both modes of a round: seeded by the round, not the mode.
        drawn = draw_durations(
            settings.fair_durations, settings.fair_handler_ms, n + k, label.split("#")[-1]
        )
        a_ms, b_ms = drawn[:n], drawn[n:]
        after, every = settings.fair_late_after_ms / 1000, settings.fair_late_every_ms / 1000
        fair = mode == "fair"
        queue = self.new_queue()
        flooder = RequestContext(_ENDPOINT, "user:flood")
        late = RequestContext(_ENDPOINT, "user:late")
        stamps: dict[str, float] = {}

        async def create_late(i: int, began: float, manager: RedisTaskManager) -> float:
            await asyncio.sleep(max(0.0, began + after + i * every - time.monotonic()))
            stamp = stamps[f"b.{i}"] = time.monotonic()
            await manager.create_task(late, ORIGIN, payload=f"b.{i} {b_ms[i]}".encode())
            return (time.monotonic() - stamp) * 1000

        with tempfile.TemporaryDirectory(prefix="redis-tasks-fair-") as scratch:
            path = Path(scratch) / "starts"
            path.touch()
            starts = _Starts(path)
            async with (
                Probe(self.url) as probe,
                RedisTaskManager.from_url(self.url, prefix=queue, fair_dispatch=fair) as flood,
                RedisTaskManager.from_url(self.url, prefix=queue, fair_dispatch=fair) as lone,
            ):
                try:
                    mark = await probe.newest_clients()
                    async with self._fair_worker(queue, path) as worker:
                        await wait_reading(probe, mark, worker, flood.partitions, "fairness")
                        began = time.monotonic()
                        late_creates = asyncio.gather(
                            *(create_late(i, began, lone) for i in range(k))
                        )
                        try:
                            await _create_all(
                                flood, [(flooder, 1, f"a.{i} {a_ms[i]}") for i in range(n)]
                            )
                            flooded = time.monotonic() - began
                        finally:
                            create_ms = await late_creates
                        await self._wait_starts(starts, worker, n + k, label)
                finally:
                    await delete_prefix(flood)
        a_starts = sorted(t for name, t in starts.first.items() if name.startswith("a."))
        b_starts = [starts.first[f"b.{i}"] for i in range(k)]
        b_stamps = [stamps[f"b.{i}"] for i in range(k)]
        # While B's tasks were created and waited, the longest stretch in which no task
        # started: with every slot busy, no slot freed then, so no order of dispatch
        # could have started a task of B's sooner than its end.
        window = [min(b_stamps), max(b_starts)]
        during = sorted([t for t in starts.first.values() if window[0] <= t <= window[1]])
        edges = [window[0], *during, window[1]]
        return {
            "b_ms": [
                (start - stamp) * 1000 for start, stamp in zip(b_starts, b_stamps, strict=True)
            ],
            "b_create_ms": list(create_ms),
            # Order, not time: how many of A's tasks started while a B task waited.
            "a_ahead": [
                bisect.bisect_left(a_starts, start) - bisect.bisect_right(a_starts, stamp)
                for start, stamp in zip(b_starts, b_stamps, strict=True)
            ],
            "a_drain_ms": (a_starts[-1] - began) * 1000,
            "longest_gap_ms": max(b - a for a, b in itertools.pairwise(edges)) * 1000,
            "flood_created_ms": flooded * 1000,
            "b_before_a_last": max(b_starts) < a_starts[-1],
        }

    async def _backlog_run(
        self, label: str, jobs: list[tuple[RequestContext, int, str]], count: int
    ) -> list[str]:
        """``jobs`` created with no worker running, then a worker started: the labels
        of the first ``count`` tasks it started, in order."""
        queue = self.new_queue()
        with tempfile.TemporaryDirectory(prefix="redis-tasks-fair-") as scratch:
            path = Path(scratch) / "starts"
            path.touch()
            starts = _Starts(path)
            async with RedisTaskManager.from_url(self.url, prefix=queue) as manager:
                try:
                    for start in range(0, len(jobs), _CHUNK):
                        await _create_all(manager, jobs[start : start + _CHUNK])
                        done = min(len(jobs), start + _CHUNK)
                        self.progress.update(f"{label} create", done, len(jobs))
                    async with self._fair_worker(queue, path) as worker:
                        await self._wait_starts(starts, worker, count, label)
                finally:
                    await delete_prefix(manager)
        return starts.order[:count]

    async def fair_tenants(self, label: str) -> dict[str, Any]:
        """Many tenants, created tenant after tenant (or interleaved, when the settings
        say): Jain's index of the starts per tenant over the first tenth of them."""
        settings = self.settings
        tenants, each, ms = (
            settings.fair_tenants,
            settings.fair_tenant_tasks,
            settings.fair_handler_ms,
        )
        pairs = (
            [(j, i) for i in range(each) for j in range(tenants)]
            if settings.fair_interleaved
            else [(j, i) for j in range(tenants) for i in range(each)]
        )
        jobs = [(RequestContext(_ENDPOINT, f"user:t{j}"), 1, f"t{j}.{i} {ms}") for j, i in pairs]
        window = max(1, len(jobs) // 10)
        order = await self._backlog_run(label, jobs, window)
        counts = Counter(_group(name) for name in order)
        starts = [counts.get(f"t{j}", 0) for j in range(tenants)]
        squares = sum(value * value for value in starts)
        return {
            "jain": sum(starts) ** 2 / (tenants * squares) if squares else 0.0,
            "window": window,
            "starts_min": min(starts),
            "starts_max": max(starts),
        }

    async def fair_weights(self, label: str) -> dict[str, Any]:
        """Two tenants of :data:`WEIGHTS`, W tasks each, interleaved: each one's share of
        the first half of the starts."""
        settings = self.settings
        each, ms = settings.fair_weighted_tasks, settings.fair_handler_ms
        tenants = [
            (RequestContext(_ENDPOINT, f"user:w{weight}"), weight, f"w{weight}")
            for weight in WEIGHTS
        ]
        jobs = [
            (who, weight, f"{tag}.{i} {ms}") for i in range(each) for who, weight, tag in tenants
        ]
        window = len(jobs) // 2
        counts = Counter(_group(name) for name in await self._backlog_run(label, jobs, window))
        shares = {str(weight): counts.get(tag, 0) / window for _, weight, tag in tenants}
        return {"window": window, "shares": shares, "heavy": shares[str(max(WEIGHTS))]}


async def fairness_rounds(benches: Mapping[str, FairnessScenarios]) -> dict[str, dict[str, Any]]:
    """Every round of the ``fairness`` scenario on every topology of ``benches``, the
    measurements and topologies alternating so drift on a shared machine hits all
    alike; per topology the figures (:func:`~._fair_figures.fairness_figures`)."""
    some = next(iter(benches.values()))
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {name: {} for name in benches}
    for round_ in range(some.settings.rounds):
        for part in some.settings.fair_parts:
            for name, bench in benches.items():
                row = await bench.fair_part(part, f"fairness {part} #{round_ + 1}")
                samples[name].setdefault(part, []).append(row)
    return {name: fairness_figures(parts, some.settings) for name, parts in samples.items()}
