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
import json
import secrets
import shutil
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import IO, Any, Final

from redis_tasks._ids import parse_task_id
from redis_tasks._models import TaskRequestContext
from redis_tasks._origin import TaskOrigin
from redis_tasks._redis.manager import RedisTaskManager
from redis_tasks._redis.scripts import scripts

from ._adapter import ORIGIN, WHO, delete_prefix
from ._probe import Probe, RedisAddress
from ._progress import Progress, percentile
from ._systems import AdapterError, AdapterProcess, System, ours

__all__ = ["Bench", "Settings", "pickup_figures", "sized_origin"]

_ENQUEUE_CHUNK: Final = 2_000  # jobs per enqueue command: the progress bar's step
_CREATE_CHUNK: Final = 500  # creates in flight at once in this process
_MEMORY_WARM: Final = 50  # jobs before the memory baseline: queue structures exist
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
    pickups: int = 1_000  # per round: the p99 of a few hundred is its few worst, noise
    lifecycle_tasks: int = 5_000
    clients: int = 32
    lifecycle_processes: int = 2
    memory_tasks: int = 20_000
    pollers: int = 64
    find_ops: int = 50_000
    notifies: int = 200
    limit_requests: int = 100_000


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def _latencies(samples_ms: Sequence[float], *quantiles: float) -> dict[str, float]:
    names = {0.5: "p50", 0.99: "p99", 0.999: "p99.9"}
    return {names[q]: round(percentile(list(samples_ms), q), 3) for q in quantiles}


def sized_origin(size: int) -> TaskOrigin:
    """A no-op tool call whose persisted origin is exactly ``size`` bytes (at least 36)."""
    head, tail = '{"tool":"noop","arguments":{"x":"', '"}}'
    pad = size - len(head) - len(tail)
    if pad < 0:
        raise ValueError(f"an origin takes at least {len(head) + len(tail)} bytes")
    return TaskOrigin.from_persisted_string(head + "x" * pad + tail)


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

    @staticmethod
    def short_queue() -> str:
        """A fresh queue name as short as a deployment's (``rt`` is redis-tasks' default):
        a key's name is part of what each task costs, so the memory scenario uses this."""
        return f"m{secrets.token_hex(2)}"

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
        """N tasks created by C clients spread over P client processes, each task polled
        to terminal: tasks/s, latency, and the CPU each part spent per task (the client
        processes, the workers, Redis)."""
        settings = self.settings
        n, label = settings.lifecycle_tasks, f"lifecycle w={workers}"
        procs_n = max(1, min(settings.lifecycle_processes, settings.clients))
        queue = self.new_queue()
        client_system = System(
            "lifecycle client", (sys.executable, "-m", "redis_tasks._bench._lifecycle_client")
        )
        clients: list[AdapterProcess] = []
        async with Probe(self.url) as probe, self._processes(ours(), queue, workers) as (_, procs):
            try:
                for i in range(procs_n):
                    proc = await AdapterProcess.start(
                        client_system, (self.url, queue), self.log, f"lifecycle client {i}"
                    )
                    clients.append(proc)
                    await proc.read_until("ready")
                workers_before = sum([(await proc.report())[2] for proc in procs])
                redis_before = await probe.cpu_seconds()
                self.progress.update(label, 0, n)
                # Tasks and clients split as evenly as they go; every process starts at once.
                shares = [
                    (n // procs_n + (i < n % procs_n), settings.clients // procs_n
                     + (i < settings.clients % procs_n))
                    for i in range(procs_n)
                ]  # fmt: skip
                for proc, (count, concurrent) in zip(clients, shares, strict=True):
                    await proc.send(f"run {count} {concurrent}")
                lines = await asyncio.gather(*(p.read_until("result ") for p in clients))
                redis_cpu = await probe.cpu_seconds() - redis_before
                worker_cpu = sum([(await proc.report())[2] for proc in procs]) - workers_before
            finally:
                await asyncio.gather(*(p.stop() for p in clients), return_exceptions=True)
        results = [json.loads(line.removeprefix("result ")) for line in lines]
        self.progress.update(label, n, n)
        samples = [s for r in results for s in r["samples_ms"]]
        elapsed = max(r["ended"] for r in results) - min(r["started"] for r in results)
        client_cpu = sum(r["cpu"] for r in results)
        return {
            "rate": round(n / elapsed),
            **_latencies(samples, 0.5, 0.99, 0.999),
            "clients": settings.clients,
            "client_processes": procs_n,
            "client_us_per_task": round(client_cpu / n * 1e6),
            "worker_us_per_task": round(worker_cpu / n * 1e6),
            "redis_us_per_task": round(redis_cpu / n * 1e6),
        }

    async def memory_queued(self, system: System) -> dict[str, Any]:
        """Redis memory per queued no-op job (created, not yet run), any system.

        ``used_memory`` before and after the client enqueued N jobs with no worker
        running, on the primaries together; a few jobs go first, so the queue's own
        structures (streams, groups, loaded scripts) are not counted per job.
        """
        n, label = self.settings.memory_tasks, f"{system.name} memory"
        queue = self.short_queue()
        async with Probe(self.url) as probe, self._processes(system, queue, 0) as (client, _):
            await client.ask(f"enqueue {_MEMORY_WARM}")
            before = await probe.used_memory()
            for start in range(0, n, _ENQUEUE_CHUNK):
                await client.ask(f"enqueue {min(_ENQUEUE_CHUNK, n - start)}")
                self.progress.update(label, min(n, start + _ENQUEUE_CHUNK), n)
            after = await probe.used_memory()
        return {"bytes_per_job": round((after - before) / n), "jobs": n}

    async def memory_retained(self, origin_bytes: int, payload_bytes: int) -> dict[str, Any]:
        """Redis memory per task of redis-tasks, queued and then retained after
        completion, for an origin and a payload of the given sizes.

        Each figure is split into what the partitions' streams took (bounded:
        the work entry goes when the task ends, the event stream is trimmed to its
        MAXLEN) and the rest, the keys that stay for the task's whole retention
        and so grow with the creation rate times the TTL.
        """
        n, label = self.settings.memory_tasks, f"memory origin {origin_bytes} B"
        origin = sized_origin(origin_bytes)
        payload = b"p" * payload_bytes
        result = {"content": [{"type": "text", "text": "done"}]}
        async with (
            Probe(self.url) as probe,
            RedisTaskManager.from_url(self.url, prefix=self.short_queue()) as manager,
        ):
            streams = [
                key
                for p in range(manager.partitions)
                for key in (manager.keyspace.work(p), manager.keyspace.events(p))
            ]
            for _ in range(_MEMORY_WARM):
                await manager.create_task(WHO, origin, payload=payload)
            before = await probe.used_memory(), await probe.memory_usage(streams)
            task_ids: list[str] = []
            for start in range(0, n, _CREATE_CHUNK):
                batch = min(_CREATE_CHUNK, n - start)
                created = await asyncio.gather(
                    *(manager.create_task(WHO, origin, payload=payload) for _ in range(batch))
                )
                task_ids.extend(task.task_id for task in created)
                self.progress.update(f"{label} create", len(task_ids), n)
            queued = await probe.used_memory(), await probe.memory_usage(streams)
            for start in range(0, n, _CREATE_CHUNK):
                chunk = task_ids[start : start + _CREATE_CHUNK]
                await asyncio.gather(*(manager.complete_task(t, result) for t in chunk))
                self.progress.update(f"{label} complete", start + len(chunk), n)
            retained = await probe.used_memory(), await probe.memory_usage(streams)
            await delete_prefix(manager)

        def split(after: tuple[int, int]) -> dict[str, int]:
            total, in_streams = after[0] - before[0], after[1] - before[1]
            return {
                "total": round(total / n),
                "streams": round(in_streams / n),
                "keys": round((total - in_streams) / n),
            }

        return {
            "origin_bytes": origin_bytes,
            "payload_bytes": payload_bytes,
            "tasks": n,
            "queued": split(queued),
            "retained": split(retained),
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
            # The creates' grant keys differ as their IDs do (redis-benchmark fills
            # in __rand_int__ in every argument); the digest stored is any one.
            digest = keys.binding_digest(*grant)
            create = [
                "EVALSHA", scripts["create"].sha, "4", fresh.task, fresh.work, fresh.events,
                fresh.grant_prefix + "b__rand_int__", "b__rand_int__", digest,
                ORIGIN.to_persisted_string(),
                "", "3600000", "1000", "", "10000",
            ]  # fmt: skip
            find = ["EVALSHA", scripts["find"].sha, "3", keys.task, keys.requests,
                    keys.grant(*grant), digest]  # fmt: skip
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
