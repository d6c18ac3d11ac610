"""The scenarios of redis-tasks alone: ``lifecycle``, retained ``memory``, ``find``,
``notify`` and ``limit``.

They measure redis-tasks operations that peers do not have, from this process
(``lifecycle`` from client processes of its own); ``limit`` measures Redis
itself with ``redis-benchmark`` running our scripts, the ceiling the other
figures are fractions of.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import json
import shutil
import sys
import time
from typing import Any, Final

from redis_tasks._ids import RANDOM_CHARS, parse_task_id
from redis_tasks._models import TaskRequestContext
from redis_tasks._origin import TaskOrigin
from redis_tasks._plans import TenantPlan, plan_terms
from redis_tasks._redis import scripts as lua
from redis_tasks._redis.manager import RedisTaskManager
from redis_tasks._tenancy import admission

from ._adapter import ORIGIN, WHO, delete_prefix
from ._bench_base import MEMORY_WARM, BenchBase, latencies
from ._children import spawn
from ._probe import Probe, RedisAddress
from ._systems import AdapterProcess, System, ours

__all__ = ["OurScenarios", "sized_origin"]

_CREATE_CHUNK: Final = 500  # creates in flight at once in this process


def _evalsha(call: lua.Call) -> list[str]:
    """A bound script call as a ``redis-benchmark`` command line (text arguments)."""
    script, keys, args = call
    text = [arg.decode() if isinstance(arg, bytes) else str(arg) for arg in args]
    return ["EVALSHA", script.sha, str(len(keys)), *keys, *text]


def sized_origin(size: int) -> TaskOrigin:
    """A no-op tool call whose persisted origin is exactly ``size`` bytes (at least 36)."""
    head, tail = '{"tool":"noop","arguments":{"x":"', '"}}'
    pad = size - len(head) - len(tail)
    if pad < 0:
        raise ValueError(f"an origin takes at least {len(head) + len(tail)} bytes")
    return TaskOrigin.from_persisted_string(head + "x" * pad + tail)


class OurScenarios(BenchBase):
    """``lifecycle``, ``memory_retained``, ``find``, ``notify`` and ``limit``: redis-tasks only."""

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
            **latencies(samples, 0.5, 0.99, 0.999),
            "clients": settings.clients,
            "client_processes": procs_n,
            "client_us_per_task": round(client_cpu / n * 1e6),
            "worker_us_per_task": round(worker_cpu / n * 1e6),
            "redis_us_per_task": round(redis_cpu / n * 1e6),
        }

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
            RedisTaskManager.from_url(self.url, prefix=self.new_queue()) as manager,
        ):
            # The signal stream is trimmed as the event stream is (a client's complete
            # signals the task's worker): bounded too, not kept for the retention.
            streams = [
                key
                for p in range(manager.partitions)
                for key in (
                    manager.keyspace.work(p),
                    manager.keyspace.events(p),
                    manager.keyspace.signals(p),
                )
            ]
            for _ in range(MEMORY_WARM):
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
            **latencies([s * 1000 for s in samples], 0.5, 0.99),
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
        return {**latencies([s * 1000 for s in samples], 0.5, 0.99), "samples": m}

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
            # A valid ID in partition 0 whose last 12 characters redis-benchmark
            # fills in (__rand_int__, 12 digits) at every call.
            rand_id = "0." + "b" * (RANDOM_CHARS - 12) + "__rand_int__"
            fresh = manager.keyspace.task(0, rand_id)
            endpoint, binding = WHO.endpoint, f"={WHO.partition_key}"
            grant = (endpoint.encode(), binding.encode())
            # The creates' grant keys differ as their IDs do (redis-benchmark fills
            # in __rand_int__ in every argument); the digest stored is any one.
            digest = keys.binding_digest(*grant)
            # One tenant, WHO's binding, as create_task admits it by default.
            limits = manager.limits
            who = admission(
                limits, *grant, None, plan_terms(limits, TenantPlan.of_limits(limits), 1)
            )
            tenant = manager.keyspace.tenant(0, who.tenant)
            # A lone create: a create call of one, as create_task sends it alone.
            create = _evalsha(
                lua.create(
                    work=fresh.work,
                    events=fresh.events,
                    stats=fresh.stats,
                    ring=tenant.ring,
                    tenants=tenant.tenants,
                    signals=fresh.signals,
                    seen=tenant.seen,
                    tag=manager.keyspace.tag(0),
                    event_opts="10000",
                    fair=int(manager.fair_dispatch),
                    creates=[
                        lua.CreateArgs(
                            rand_id,
                            "b__rand_int__",
                            digest,
                            ORIGIN.to_persisted_string().encode(),
                            b"",
                            3600000,
                            1000,
                            b"",
                            b"",
                            who.tenant,
                            lua.limits_arg(
                                who.settings,
                                who.cap,
                                who.max_open,
                                who.rate_us,
                                who.burst_us,
                                who.plan,
                            ),
                        )
                    ],
                )
            )
            find = _evalsha(
                lua.find(
                    task=keys.task,
                    requests=keys.requests,
                    grant=keys.grant(*grant),
                    binding=digest,
                    confirm=0,
                )
            )
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
        process = await spawn(
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
