"""The ``parking`` scenario: tasks waiting for people hold no worker (redis-tasks only).

Each round takes a fresh key prefix and one ``redis-tasks worker`` process at
concurrency C (``--park-concurrency``, 16) running :mod:`._park_handler`, with the
worker's default ``park_after``. This process creates and answers the tasks and
stamps them with ``time.monotonic()``, the clock the handler's lines are in. In order:

1. *Idle*: tenant B creates K plain tasks (``--park-late``, 200), one every 10 ms,
   on the idle worker: their create-to-start latencies, the baseline; then the
   commands Redis ran in S seconds (``--park-idle-s``, 30) with nothing to do
   (``INFO commandstats``, the primaries' sum: the worker's blocked reads, its
   signal tail, its gauges).
2. *Parked*: tenant A creates N tasks that each ask one question (``--park-tasks``,
   10,000), 500 in flight; nobody answers. Each starts, asks, and is parked (at once:
   every slot is taken); the time until all N are parked. Then Redis's memory per
   parked task (``used_memory``, against before the creates), the handlers inside
   the worker (starts less ends: 0 when none holds a slot), and the commands Redis
   ran in S seconds with the N parked, against the idle S seconds.
3. *Beside them*: tenant B's K plain tasks again, with the N parked: their
   create-to-start latencies, to set beside the idle ones.
4. *Answered at once*: first, as the yardstick, M new plain tasks (``--park-answered``,
   1,000) of a third tenant created together on the same worker (every ``create_task``
   in flight at once): each one's create-to-start, from its call and from its return,
   what this machine gives the cheapest way in. Then M of the parked tasks answered
   together (every ``update_task`` in flight at once): each one's answer-to-resume
   (from just before its answer to its handler's start as a resumed run), and
   whether each resumed and completed exactly once.
5. *Stopped*: SIGTERM to the worker, the rest still parked: the seconds until it
   exited (it holds nothing, so nothing waits out its grace).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

from redis_tasks._models import RequestContext, TaskUpdateContext
from redis_tasks._redis.manager import RedisTaskManager

from ._adapter import ORIGIN, delete_prefix
from ._bench_base import BenchBase
from ._park_figures import parking_figures
from ._park_handler import STARTS_ENV
from ._probe import Probe, calls_between
from ._systems import AdapterError
from ._worker_process import LineFile, wait_progress, wait_reading, worker_process

__all__ = ["ParkingScenarios", "parking_rounds"]

_HANDLER: Final = "redis_tasks._bench._park_handler:handler"
_ENDPOINT: Final = "/mcp"
_CHUNK: Final = 500  # creates in flight at once
_LATE_EVERY: Final = 0.01  # seconds between tenant B's creates
_STOP_WAIT: Final = 30.0  # seconds a stopped worker may take before it is killed
#: The answer every asked task gets (an elicitation's accept).
_ANSWER: Final = {"q": {"action": "accept", "content": {}}}


class _Lines:
    """The worker's handler lines (:mod:`._park_handler`), read from its file as they
    come: each label's starts (time, parks) and ends (time, how), in order."""

    def __init__(self, path: Path) -> None:
        self._lines = LineFile(path)
        self.starts: dict[str, list[tuple[float, int]]] = {}
        self.ends: dict[str, list[tuple[float, str]]] = {}
        self.ended: Counter[str] = Counter()  # ends by how

    def read(self) -> None:
        """Take in the lines written since the last read."""
        for line in self._lines.new_lines():
            label, event, stamp, extra = line.split(" ")
            if event == "start":
                self.starts.setdefault(label, []).append((float(stamp), int(extra)))
            else:
                self.ends.setdefault(label, []).append((float(stamp), extra))
                self.ended[extra] += 1

    def inside(self) -> int:
        """Handlers started and not ended: those inside the worker now."""
        return sum(len(s) for s in self.starts.values()) - sum(len(e) for e in self.ends.values())


class ParkingScenarios(BenchBase):
    """``parking``: tasks waiting for people beside other tenants' (see the module)."""

    def _park_worker(
        self, queue: str, lines: Path
    ) -> contextlib.AbstractAsyncContextManager[asyncio.subprocess.Process]:
        """A ``redis-tasks worker`` process running :mod:`._park_handler` on ``queue``
        (the round stops it itself: what its stop takes is measured)."""
        options = ["--prefix", queue, "--concurrency", str(self.settings.park_concurrency),
                   "--log-level", "warning", "--name", "bench-parking"]  # fmt: skip
        return worker_process(
            _HANDLER,
            options,
            url=self.url,
            log=self.log,
            env={STARTS_ENV: str(lines)},
            grace=_STOP_WAIT,
        )

    async def _until(
        self,
        lines: _Lines,
        process: asyncio.subprocess.Process,
        done: Callable[[_Lines], int],
        label: str,
        total: int,
    ) -> None:
        """Until ``done(lines)`` (a count) reaches ``total``."""

        def count() -> int:
            lines.read()
            return done(lines)

        await wait_progress(count, total, process, "parking", self.progress, label)

    async def _plain(
        self,
        manager: RedisTaskManager,
        lines: _Lines,
        process: asyncio.subprocess.Process,
        tenant: str,
        label: str,
        count: int,
        every: float,
    ) -> tuple[list[float], list[float]]:
        """``count`` plain tasks of ``tenant``, one every ``every`` seconds (0: all at
        once), each run to its end: each one's create-to-start (ms) from its call, and
        from its return."""
        context = RequestContext(_ENDPOINT, tenant)
        names = [f"{label.replace(' ', '-')}.{i}" for i in range(count)]
        stamps: dict[str, float] = {}
        returned: dict[str, float] = {}
        began = time.monotonic()

        async def create(i: int, name: str) -> None:
            if every:
                await asyncio.sleep(max(0.0, began + i * every - time.monotonic()))
            stamps[name] = time.monotonic()
            await manager.create_task(context, ORIGIN, payload=f"{name} plain".encode())
            returned[name] = time.monotonic()

        await asyncio.gather(*(create(i, name) for i, name in enumerate(names)))

        def done(seen: _Lines) -> int:
            return sum(1 for name in names if name in seen.ends)

        await self._until(lines, process, done, label, count)
        starts = {name: lines.starts[name][0][0] for name in names}
        return (
            [(starts[name] - stamps[name]) * 1000 for name in names],
            [max(0.0, (starts[name] - returned[name]) * 1000) for name in names],
        )

    async def _calls_per_s(self, probe: Probe) -> float:
        """Commands Redis ran per second over the idle window (the primaries' sum)."""
        seconds = self.settings.park_idle_s
        before = await probe.command_calls()
        began = time.monotonic()
        await asyncio.sleep(seconds)  # the window measured: nothing is waited for
        calls = calls_between(before, await probe.command_calls())
        return sum(calls.values()) / (time.monotonic() - began)

    async def park_round(self, label: str) -> dict[str, Any]:
        """One round (see the module)."""
        settings = self.settings
        n, m = settings.park_tasks, min(settings.park_answered, settings.park_tasks)
        queue = self.new_queue()
        asking = RequestContext(_ENDPOINT, "user:asking")
        with tempfile.TemporaryDirectory(prefix="redis-tasks-park-") as scratch:
            path = Path(scratch) / "lines"
            path.touch()
            lines = _Lines(path)
            async with (
                Probe(self.url) as probe,
                RedisTaskManager.from_url(self.url, prefix=queue) as creator,
                RedisTaskManager.from_url(self.url, prefix=queue) as lone,
            ):
                try:
                    mark = await probe.newest_clients()
                    async with self._park_worker(queue, path) as worker:
                        await wait_reading(probe, mark, worker, creator.partitions, "parking")
                        k = settings.park_late
                        idle_ms, _ = await self._plain(
                            lone, lines, worker, "user:late", f"{label} idle", k, _LATE_EVERY
                        )
                        idle_calls = await self._calls_per_s(probe)
                        memory_before = await probe.used_memory()
                        began = time.monotonic()
                        ids: dict[str, str] = {}
                        for start in range(0, n, _CHUNK):
                            labels = [f"a.{i}" for i in range(start, min(n, start + _CHUNK))]
                            tasks = await asyncio.gather(
                                *(
                                    creator.create_task(
                                        asking, ORIGIN, payload=f"{name} ask".encode()
                                    )
                                    for name in labels
                                )
                            )
                            ids.update(zip(labels, (t.task_id for t in tasks), strict=True))

                        def parked(seen: _Lines) -> int:
                            return seen.ended["parked"]

                        await self._until(lines, worker, parked, f"{label} park", n)
                        parked_s = time.monotonic() - began
                        memory = await probe.used_memory() - memory_before
                        inside = lines.inside()
                        parked_calls = await self._calls_per_s(probe)
                        lines.read()
                        inside_after = lines.inside()
                        beside_ms, _ = await self._plain(
                            lone, lines, worker, "user:late", f"{label} beside", k, _LATE_EVERY
                        )
                        burst_call_ms, burst_ms = await self._plain(
                            lone, lines, worker, "user:burst", f"{label} new", m, 0.0
                        )
                        chosen = dict(list(ids.items())[:m])
                        answered, answer_ms = await self._answer(
                            creator, lines, worker, asking, chosen, f"{label} answer"
                        )
                        stopped = time.monotonic()
                        worker.send_signal(signal.SIGTERM)
                        try:
                            async with asyncio.timeout(_STOP_WAIT):
                                code = await worker.wait()
                        except TimeoutError:
                            raise AdapterError(
                                f"the parking worker did not stop within {_STOP_WAIT} s"
                            ) from None
                        stop_s = time.monotonic() - stopped
                finally:
                    await delete_prefix(creator)
        return {
            "idle_b_ms": idle_ms,
            "beside_b_ms": beside_ms,
            "parked_s": parked_s,
            "memory_per_parked": memory / n,
            "handlers_inside": max(inside, inside_after),
            "idle_calls_per_s": idle_calls,
            "parked_calls_per_s": parked_calls,
            "burst_call_ms": burst_call_ms,
            "burst_ms": burst_ms,
            "answer_ms": answer_ms,
            **answered,
            "stop_s": stop_s,
            "stop_code": code,
        }

    async def _answer(
        self,
        manager: RedisTaskManager,
        lines: _Lines,
        process: asyncio.subprocess.Process,
        asking: RequestContext,
        ids: dict[str, str],
        label: str,
    ) -> tuple[dict[str, Any], list[float]]:
        """The parked tasks ``ids`` (label -> task ID) answered at once: each
        answer-to-resume (ms), and how many resumed, completed, and ran more than once
        after their answer."""
        stamps: dict[str, float] = {}
        accepted: dict[str, float] = {}

        async def answer(name: str) -> None:
            stamps[name] = time.monotonic()
            await manager.update_task(TaskUpdateContext(asking, ids[name], _ANSWER))
            accepted[name] = time.monotonic()

        await asyncio.gather(*(answer(name) for name in ids))

        def completed(seen: _Lines) -> int:
            return sum(
                1 for name in ids if any(how == "done" for _, how in seen.ends.get(name, ()))
            )

        await self._until(lines, process, completed, label, len(ids))
        resumed = {name: [s for s in lines.starts[name] if s[1] > 0] for name in ids}
        samples = [(runs[0][0] - stamps[name]) * 1000 for name, runs in resumed.items() if runs]
        # From the answer accepted (its call returned): what the worker took, without
        # the time this one process took to send a thousand answers.
        after = [
            max(0.0, (runs[0][0] - accepted[name]) * 1000) for name, runs in resumed.items() if runs
        ]
        return {
            "answered": len(ids),
            "resumed": sum(1 for runs in resumed.values() if runs),
            "resumed_twice": sum(1 for runs in resumed.values() if len(runs) > 1),
            "completed": completed(lines),
            "completed_twice": sum(
                1 for name in ids if sum(how == "done" for _, how in lines.ends[name]) > 1
            ),
            "answer_call_ms": [(accepted[name] - stamps[name]) * 1000 for name in ids],
            "accepted_ms": after,
        }, samples


async def parking_rounds(benches: Mapping[str, ParkingScenarios]) -> dict[str, dict[str, Any]]:
    """Every round of the ``parking`` scenario on every topology of ``benches``,
    alternating; per topology the figures (:func:`~._park_figures.parking_figures`)."""
    some = next(iter(benches.values()))
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in benches}
    for round_ in range(some.settings.rounds):
        for name, bench in benches.items():
            samples[name].append(await bench.park_round(f"parking #{round_ + 1}"))
    return {name: parking_figures(rows, some.settings) for name, rows in samples.items()}
