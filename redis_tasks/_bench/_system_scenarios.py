"""The scenarios any system runs: ``drain``, ``pickup`` and queued ``memory``.

They drive a :class:`~._systems.System` (redis-tasks or a peer) through its
adapter processes, so every queue is measured by the same code.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Final

from ._bench_base import MEMORY_WARM, BenchBase, latencies
from ._callgrind import Callgrind
from ._probe import Probe, calls_between
from ._systems import System

__all__ = ["SystemScenarios", "claim_histogram", "pickup_figures"]

_ENQUEUE_CHUNK: Final = 2_000  # jobs per enqueue command: the progress bar's step
_REPORT_EVERY: Final = 0.02  # seconds between drain progress reports
_SETTLE: Final = 0.3  # seconds for the last acknowledgements to land before counting


def claim_histogram(
    before: Sequence[dict[int, int]], after: Sequence[dict[int, int]]
) -> dict[str, Any]:
    """The claim calls the workers made between ``before`` and ``after`` (each worker's
    calls by the jobs they brought): how many, by size, and the mean size; empty for a
    system that does not count them."""
    by_size: dict[int, int] = {}
    for old, new in zip(before, after, strict=True):
        for size, count in new.items():
            made = count - old.get(size, 0)
            if made:
                by_size[size] = by_size.get(size, 0) + made
    calls = sum(by_size.values())
    if not calls:
        return {}
    jobs = sum(size * count for size, count in by_size.items())
    return {
        "calls": calls,
        "jobs_per_call": round(jobs / calls, 2),
        "by_size": {str(size): by_size[size] for size in sorted(by_size)},
    }


def pickup_figures(samples_ms: Sequence[float]) -> dict[str, Any]:
    """p50, p99 and the sample count of pickup latencies (ms)."""
    return {**latencies(samples_ms, 0.5, 0.99), "samples": len(samples_ms)}


class SystemScenarios(BenchBase):
    """``drain``, ``pickup`` and ``memory_queued``: any system, through its adapters."""

    async def drain(
        self, system: System, workers: int, label: str
    ) -> tuple[float, dict[str, int], dict[str, Any]]:
        """One round: N jobs enqueued while the workers are stopped, then drained.

        Returns jobs/s (from the resume until the last job started), the calls per
        command Redis ran for enqueueing and draining them, and where the CPU went
        while draining: microseconds per job in the workers and in Redis (in all,
        and per primary on a cluster), and how many cores each kept busy. Under
        callgrind, also the instructions per job our workers and the primaries ran,
        and apart, what the primaries ran for the enqueue.
        """
        n = self.settings.tasks
        counter = None if self.settings.callgrind is None else Callgrind(self.settings.callgrind)
        async with (
            Probe(self.url) as probe,
            self._processes(system, self.new_queue(), workers) as (client, procs),
        ):
            for proc in procs:
                await proc.ask("reset")
            cpu_before = sum([(await proc.report())[2] for proc in procs])
            sizes_before = [await proc.claim_sizes() for proc in procs]
            # Our workers count from here: stopped for the enqueue, they run nothing.
            workers_counted = [p.pid for p in procs] if counter and system.is_redis_tasks else []
            if counter is not None:
                await counter.start(workers_counted)
            for proc in procs:
                proc.pause()
            calls_before = await probe.command_calls()
            pids = await probe.primary_pids() if counter is not None else []
            if counter is not None:  # the primaries' part of the enqueue, counted alone
                await counter.start(pids)
            for start in range(0, n, _ENQUEUE_CHUNK):
                await client.ask(f"enqueue {min(_ENQUEUE_CHUNK, n - start)}")
                self.progress.update(f"{label} enqueue", min(n, start + _ENQUEUE_CHUNK), n)
            enqueued = await counter.take(pids) if counter is not None else []
            redis_before = await probe.cpu_by_primary()
            if counter is not None:
                await counter.start(pids)
            started = time.time()
            for proc in procs:
                proc.resume()
            while True:
                reports = [await p.report() for p in procs]
                seen = sum(count for count, _, _ in reports)
                self.progress.update(label, min(seen, n), n)
                if seen >= n:
                    break
                await asyncio.sleep(_REPORT_EVERY)
            redis_after = await probe.cpu_by_primary()
            instructions: list[int] = []
            in_workers: list[int] = []
            if counter is not None:
                instructions, in_workers = await asyncio.gather(
                    counter.take(pids), counter.take(workers_counted)
                )
            finished = max(last for _, last, _ in reports)
            worker_cpu = sum(cpu for _, _, cpu in reports) - cpu_before
            # The last poll came up to one report interval after the last job.
            span = max(finished - started, 1e-6)
            polled = max(time.time() - started, span)
            await asyncio.sleep(_SETTLE)
            calls = calls_between(calls_before, await probe.command_calls())
            sizes_after = [await proc.claim_sizes() for proc in procs]
        per_primary = [b - a for a, b in zip(redis_before, redis_after, strict=True)]
        redis_cpu = sum(per_primary)
        usage: dict[str, Any] = {
            "worker_us_per_job": round(worker_cpu / n * 1e6),
            "redis_us_per_job": round(redis_cpu / n * 1e6),
            "worker_cores": round(worker_cpu / polled, 2),
            "redis_cores": round(redis_cpu / polled, 2),
        }
        if len(per_primary) > 1:
            usage["redis_us_per_job_by_primary"] = [round(cpu / n * 1e6) for cpu in per_primary]
        sizes = claim_histogram(sizes_before, sizes_after)
        if sizes:
            usage["claim_sizes"] = sizes
        if in_workers:
            usage["worker_instructions_per_job"] = round(sum(in_workers) / n)
        if instructions:
            usage["redis_instructions_per_job"] = round(sum(instructions) / n)
            usage["redis_enqueue_instructions_per_job"] = round(sum(enqueued) / n)
            if len(instructions) > 1:
                usage["redis_instructions_per_job_by_primary"] = [
                    round(count / n) for count in instructions
                ]
        return n / span, calls, usage

    async def pickup(self, system: System, label: str | None = None) -> dict[str, Any]:
        """An idle worker; M jobs enqueued one at a time: enqueue-to-start latency."""
        samples = await self.pickup_samples(system, label or f"{system.name} pickup")
        return pickup_figures(samples)

    async def pickup_samples(self, system: System, label: str) -> list[float]:
        """The enqueue-to-start latencies (ms) of one pickup round."""
        m = self.settings.pickups
        async with self._processes(system, self.new_queue(), 1) as (client, (worker,)):
            samples = []
            for i in range(m):
                await client.ask("stamp")
                samples.append(await worker.wait_latency())
                self.progress.update(label, i + 1, m)
        return samples

    async def memory_queued(self, system: System) -> dict[str, Any]:
        """Redis memory per queued no-op job (created, not yet run), any system.

        ``used_memory`` before and after the client enqueued N jobs with no worker
        running, on the primaries together; a few jobs go first, so the queue's own
        structures (streams, groups, loaded scripts) are not counted per job.
        """
        n, label = self.settings.memory_tasks, f"{system.name} memory"
        queue = self.new_queue()
        async with Probe(self.url) as probe, self._processes(system, queue, 0) as (client, _):
            await client.ask(f"enqueue {MEMORY_WARM}")
            before = await probe.used_memory()
            for start in range(0, n, _ENQUEUE_CHUNK):
                await client.ask(f"enqueue {min(_ENQUEUE_CHUNK, n - start)}")
                self.progress.update(label, min(n, start + _ENQUEUE_CHUNK), n)
            after = await probe.used_memory()
        return {"bytes_per_job": round((after - before) / n), "jobs": n}
