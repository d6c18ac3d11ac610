"""The benchmark scenarios, each run against one Redis URL.

``drain`` and ``pickup`` run any :class:`~._systems.System` (redis-tasks or a
peer) through its adapter processes, so every queue is measured by the same
code. ``lifecycle``, ``find`` and ``notify`` measure redis-tasks operations that
peers do not have, from this process. ``limit`` measures Redis itself with
``redis-benchmark`` running our scripts, the ceiling the other figures are
fractions of.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import dataclasses
import itertools
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from redis_tasks._ids import parse_task_id
from redis_tasks._models import TaskRequestContext
from redis_tasks._redis import RedisTaskManager
from redis_tasks._scripts import scripts

from ._adapter import ORIGIN, WHO, delete_prefix
from ._probe import Probe, RedisAddress
from ._progress import Progress, percentile
from ._systems import AdapterError, AdapterProcess, System, ours

__all__ = ["Bench", "Settings", "pickup_figures"]

_ENQUEUE_CHUNK: Final = 2_000  # jobs per enqueue command: the progress bar's step
_WARM_TRIES: Final = 200
_REPORT_EVERY: Final = 0.02  # seconds between drain progress reports
_SETTLE: Final = 0.3  # seconds for the last acknowledgements to land before counting


@dataclass(frozen=True)
class Settings:
    """Sizes of every scenario (the CLI's options)."""

    tasks: int = 10_000
    concurrency: int = 32
    workers: tuple[int, ...] = (1, 2)
    rounds: int = 3
    pickups: int = 200
    lifecycle_tasks: int = 5_000
    clients: int = 32
    pollers: int = 64
    find_ops: int = 50_000
    notifies: int = 200
    limit_requests: int = 100_000


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _latencies(samples_ms: Sequence[float], *quantiles: float) -> dict[str, float]:
    names = {0.5: "p50", 0.99: "p99", 0.999: "p99.9"}
    return {names[q]: round(percentile(list(samples_ms), q), 3) for q in quantiles}


def pickup_figures(samples_ms: Sequence[float]) -> dict[str, Any]:
    """p50, p99 and the sample count of pickup latencies (ms)."""
    return {**_latencies(samples_ms, 0.5, 0.99), "samples": len(samples_ms)}


class Bench:
    """Runs scenarios against ``url``; adapter stderr goes to ``log``."""

    def __init__(self, url: str, settings: Settings, progress: Progress, log: IO[bytes]) -> None:
        self.url = url
        self.settings = settings
        self.progress = progress
        self.log = log

    @staticmethod
    def new_queue() -> str:
        """A fresh queue name (a redis-tasks prefix), so runs never share keys."""
        return f"bench-{secrets.token_hex(4)}"

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
            for i in range(workers):
                proc = await AdapterProcess.start(
                    system,
                    ("worker", self.url, queue, str(self.settings.concurrency)),
                    self.log,
                    f"{system.name} worker {i}",
                )
                started.append(proc)
                procs.append(proc)
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

    # -- any system --------------------------------------------------------------

    async def drain(
        self, system: System, workers: int, label: str
    ) -> tuple[float, dict[str, int], dict[str, Any]]:
        """One round: N jobs enqueued while the workers are stopped, then drained.

        Returns jobs/s (from the resume until the last job started), the calls per
        command Redis ran for enqueueing and draining them, and where the CPU went
        while draining: microseconds per job in the workers and in Redis (in all,
        and per primary on a cluster), and how many cores each kept busy.
        """
        n = self.settings.tasks
        async with (
            Probe(self.url) as probe,
            self._processes(system, self.new_queue(), workers) as (client, procs),
        ):
            for proc in procs:
                await proc.ask("reset")
            cpu_before = sum([(await proc.report())[2] for proc in procs])
            for proc in procs:
                proc.pause()
            await probe.reset_stats()
            for start in range(0, n, _ENQUEUE_CHUNK):
                await client.ask(f"enqueue {min(_ENQUEUE_CHUNK, n - start)}")
                self.progress.update(f"{label} enqueue", min(n, start + _ENQUEUE_CHUNK), n)
            redis_before = await probe.cpu_by_primary()
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
            finished = max(last for _, last, _ in reports)
            worker_cpu = sum(cpu for _, _, cpu in reports) - cpu_before
            # The last poll came up to one report interval after the last job.
            span = max(finished - started, 1e-6)
            polled = max(time.time() - started, span)
            await asyncio.sleep(_SETTLE)
            calls = await probe.command_calls()
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

    # -- redis-tasks only -------------------------------------------------------

    async def lifecycle(self, workers: int) -> dict[str, Any]:
        """N tasks created by C clients, each polled to terminal: tasks/s, latency, and
        the CPU each part spent per task (this client process, the workers, Redis)."""
        n, label = self.settings.lifecycle_tasks, f"lifecycle w={workers}"
        queue = self.new_queue()
        async with (
            Probe(self.url) as probe,
            self._processes(ours(), queue, workers) as (_, procs),
            RedisTaskManager.from_url(self.url, prefix=queue) as manager,
        ):
            changed: dict[str, asyncio.Event] = {}

            def on_change(task_id: str) -> None:
                event = changed.get(task_id)
                if event is not None:
                    event.set()

            registration = manager.event_publisher.subscribe(on_change)
            await manager.event_publisher.wait_ready()
            numbers = itertools.count()
            samples: list[float] = []

            async def client() -> None:
                while next(numbers) < n:
                    began = time.perf_counter()
                    task = await manager.create_task(WHO, ORIGIN)
                    event = changed[task.task_id] = asyncio.Event()
                    ctx = TaskRequestContext(WHO, task.task_id)
                    while True:
                        event.clear()
                        found = await manager.find_task(ctx)
                        if found is None:
                            raise AdapterError("a benchmark task vanished")
                        if found.is_terminal:
                            break
                        # The publisher wakes us; the timeout only bounds a missed event.
                        with contextlib.suppress(TimeoutError):
                            async with asyncio.timeout(0.05):
                                await event.wait()
                    del changed[task.task_id]
                    samples.append(time.perf_counter() - began)
                    self.progress.update(label, len(samples), n)

            workers_before = sum([(await proc.report())[2] for proc in procs])
            redis_before = await probe.cpu_seconds()
            client_before = time.process_time()
            started = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(self.settings.clients)))
            elapsed = time.perf_counter() - started
            client_cpu = time.process_time() - client_before
            redis_cpu = await probe.cpu_seconds() - redis_before
            worker_cpu = sum([(await proc.report())[2] for proc in procs]) - workers_before
            registration.close()
        return {
            "rate": round(n / elapsed),
            **_latencies([s * 1000 for s in samples], 0.5, 0.99, 0.999),
            "clients": self.settings.clients,
            "client_us_per_task": round(client_cpu / n * 1e6),
            "worker_us_per_task": round(worker_cpu / n * 1e6),
            "redis_us_per_task": round(redis_cpu / n * 1e6),
        }

    async def find(self) -> dict[str, Any]:
        """``find_task`` from C concurrent pollers, each on its own task: ops/s, latency."""
        pollers, ops = self.settings.pollers, self.settings.find_ops
        each = max(1, ops // pollers)
        async with RedisTaskManager.from_url(self.url, prefix=self.new_queue()) as manager:
            tasks = await asyncio.gather(
                *(manager.create_task(WHO, ORIGIN) for _ in range(pollers))
            )
            samples: list[float] = []

            async def poll(task_id: str) -> None:
                ctx = TaskRequestContext(WHO, task_id)
                for _ in range(each):
                    began = time.perf_counter()
                    await manager.find_task(ctx)
                    samples.append(time.perf_counter() - began)
                    if len(samples) % 1000 == 0:
                        self.progress.update("find", len(samples), each * pollers)

            started = time.perf_counter()
            await asyncio.gather(*(poll(t.task_id) for t in tasks))
            elapsed = time.perf_counter() - started
            self.progress.update("find", len(samples), len(samples))
            await delete_prefix(manager)
        return {
            "rate": round(len(samples) / elapsed),
            **_latencies([s * 1000 for s in samples], 0.5, 0.99),
            "pollers": pollers,
        }

    async def notify(self) -> dict[str, Any]:
        """Change-to-subscriber latency: a create until the publisher hands us its ID."""
        m = self.settings.notifies
        async with RedisTaskManager.from_url(self.url, prefix=self.new_queue()) as manager:
            arrived: dict[str, float] = {}
            wake = asyncio.Event()

            def on_change(task_id: str) -> None:
                arrived.setdefault(task_id, time.perf_counter())
                wake.set()

            registration = manager.event_publisher.subscribe(on_change)
            await manager.event_publisher.wait_ready()
            samples = []
            for i in range(m):
                began = time.perf_counter()
                task = await manager.create_task(WHO, ORIGIN)
                async with asyncio.timeout(10):
                    while task.task_id not in arrived:
                        wake.clear()
                        await wake.wait()
                samples.append(arrived.pop(task.task_id) - began)
                self.progress.update("notify", i + 1, m)
            registration.close()
            await delete_prefix(manager)
        return {**_latencies([s * 1000 for s in samples], 0.5, 0.99), "samples": m}

    async def limit(self) -> dict[str, Any]:
        """``redis-benchmark`` running our ``create`` and ``find`` scripts with EVALSHA."""
        binary = shutil.which("redis-benchmark")
        if binary is None:
            raise FileNotFoundError("redis-benchmark not found (Debian: redis-tools)")
        address = RedisAddress.parse(self.url)
        async with (
            Probe(self.url) as probe,
            RedisTaskManager.from_url(self.url, prefix=self.new_queue()) as manager,
        ):
            task = await manager.create_task(WHO, ORIGIN)
            while parse_task_id(task.task_id) != 0:  # the find must hit partition 0 too
                task = await manager.create_task(WHO, ORIGIN)
            keys = manager.keyspace.task(0, task.task_id)
            # The arguments create_task and find_task send for WHO and ORIGIN; a
            # random ID per call (all in partition 0's slot, as a cluster needs).
            fresh = manager.keyspace.task(0, "b__rand_int__")
            endpoint, binding = WHO.endpoint, f"={WHO.partition_key}"
            grant = (endpoint.encode(), binding.encode())
            create = [
                "EVALSHA", scripts["create"].sha, "4", fresh.task, fresh.work, fresh.events,
                fresh.grant(*grant), "b__rand_int__", endpoint, binding,
                ORIGIN.to_persisted_string(),
                "", "3600000", "1000", "", "10000",
            ]  # fmt: skip
            find = ["EVALSHA", scripts["find"].sha, "3", keys.task, keys.requests,
                    keys.grant(*grant), endpoint, binding]  # fmt: skip
            if probe.cluster:
                # Every key of the run lives in partition 0's slot: load the primary
                # that owns it, directly (the ceiling of one primary).
                host, port = probe.owner(fresh.task)
                address = dataclasses.replace(address, host=host, port=port)
            results = {}
            for name, command in (("create", create), ("find", find)):
                self.progress.update(f"limit {name} (redis-benchmark)", 0, 1)
                results[name] = await self._redis_benchmark(binary, address, command)
                self.progress.update(f"limit {name} (redis-benchmark)", 1, 1)
            await delete_prefix(manager)
        return {**results, "clients": self.settings.pollers, "primaries": 1}

    async def _redis_benchmark(
        self, binary: str, address: RedisAddress, command: list[str]
    ) -> dict[str, float]:
        argv = [binary, "-h", address.host, "-p", str(address.port), "-c",
                str(self.settings.pollers), "-n", str(self.settings.limit_requests),
                "-r", "1000000000", "--csv"]  # fmt: skip
        if address.password:
            # redis-benchmark takes the password on its command line only.
            argv += ["-a", address.password]
            if address.username:
                argv += ["--user", address.username]
        if address.tls:
            argv.append("--tls")
        process = await asyncio.create_subprocess_exec(
            *argv,
            *command,
            stdout=asyncio.subprocess.PIPE,
            stderr=self.log,
        )
        out, _ = await process.communicate()
        if process.returncode != 0:
            raise RuntimeError(f"redis-benchmark exited {process.returncode}")
        lines = out.decode().strip().splitlines()
        if len(lines) < 2:
            raise RuntimeError("redis-benchmark printed no CSV result")
        # The test name quotes the command unescaped (our JSON origin has quotes), so
        # read the numeric columns from the right of the last row.
        names = next(csv.reader([lines[0]]))[1:]
        values = lines[-1].rsplit(",", len(names))[1:]
        row = dict(zip(names, (float(v.strip('"')) for v in values), strict=True))
        return {
            "rate": round(row["rps"]),
            "p50": row["p50_latency_ms"],
            "p99": row["p99_latency_ms"],
        }
