"""One run of ``redis-tasks bench``: every scenario on every topology, into one result.

With more than one topology (a standalone server and a cluster) the rounds of
each scenario alternate between them, and between the systems, so drift on a
shared machine hits all alike.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
from collections.abc import Awaitable, Callable
from typing import IO, Any, Final

from redis_tasks._bench._fairness import fairness_rounds
from redis_tasks._bench._mcp_load import mcp_runs
from redis_tasks._bench._mcp_settings import McpSettings
from redis_tasks._bench._namespace import RunNames
from redis_tasks._bench._parking import parking_rounds
from redis_tasks._bench._probe import Probe
from redis_tasks._bench._progress import Progress
from redis_tasks._bench._report import compare, ratios
from redis_tasks._bench._scenarios import Bench, Settings, pickup_figures
from redis_tasks._bench._systems import AdapterError, System

__all__ = ["MEMORY_CASES", "run"]

#: The memory scenario's (origin bytes, payload bytes): the issue's case, a small call,
#: and a large one still stored in pieces. The first measurement on a server also pays
#: for its key tables' growth (8 bytes a slot, two tables, about 50 bytes a task at
#: 20,000 tasks), as a deployment's tables grow with its tasks: the issue's case goes
#: first, before the peers.
MEMORY_CASES: Final = ((100, 64), (40, 0), (400, 256))


async def _environment(url: str) -> dict[str, Any]:
    async with Probe(url) as probe:
        return {
            "redis_version": await probe.version(),
            "redis_mode": "cluster" if probe.cluster else "standalone",
            "primaries": probe.primaries,
            "replicas_per_primary": await probe.replicas(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "machine": platform.machine(),
        }


async def run(
    urls: dict[str, str],
    settings: Settings,
    scenarios: tuple[str, ...],
    systems: list[System],
    log: IO[bytes],
    progress: Progress,
    mcp: McpSettings | None = None,
    names: RunNames | None = None,
) -> dict[str, Any]:
    """Every scenario on every topology of ``urls`` (name -> URL), every queue named by
    ``names`` (the run's; a run of its own without).

    With more than one topology the rounds of each scenario alternate between
    them, so drift on a shared machine hits both alike, and the result holds a
    comparison (cluster over standalone).
    """
    names = names or RunNames()
    benches = {
        name: Bench(url, settings, progress.tagged(name) if len(urls) > 1 else progress, log, names)
        for name, url in urls.items()
    }
    runs: dict[str, dict[str, Any]] = {}
    for name, url in urls.items():
        runs[name] = {
            "environment": await _environment(url),
            "systems": {s.name: {} for s in systems},
        }
    if "limit" in scenarios:
        for name, bench in benches.items():
            runs[name]["limit"] = await bench.limit()
    if "drain" in scenarios:
        await _drains(benches, systems, runs)
    if "pickup" in scenarios:
        await _pickups(benches, systems, runs)
    if "lifecycle" in scenarios:
        for workers in settings.workers:

            def lifecycle(bench: Bench, workers: int = workers) -> Awaitable[dict[str, Any]]:
                return bench.lifecycle(workers)

            for name, row in (await _rounds(benches, lifecycle)).items():
                runs[name].setdefault("lifecycle", {})[str(workers)] = row
    if "find" in scenarios:
        for name, row in (await _rounds(benches, lambda b: b.find())).items():
            runs[name]["find"] = row
    if "notify" in scenarios:
        for name, bench in benches.items():
            runs[name]["notify"] = await bench.notify()
    if "memory" in scenarios:
        await _memory(benches, systems, runs)
    if "mcp" in scenarios:
        for name, bench in benches.items():
            runs[name].update(
                await mcp_runs(bench.url, mcp or McpSettings(), bench.progress, log, names)
            )
    if "fairness" in scenarios:
        for name, figures in (await fairness_rounds(benches)).items():
            runs[name]["fairness"] = figures
    if "parking" in scenarios:
        for name, figures in (await parking_rounds(benches)).items():
            runs[name]["parking"] = figures
    for run in runs.values():
        run["systems"] = {k: v for k, v in run["systems"].items() if v}
        run["ratios"] = ratios(run)
    header: dict[str, Any] = {
        "date": datetime.date.today().isoformat(),
        "settings": {
            **settings.__dict__,
            "workers": list(settings.workers),
            # Where the dumps went is this run's scratch; whether they were taken is the fact.
            "callgrind": settings.callgrind is not None,
        },
    }
    if "mcp" in scenarios:
        header["settings"]["mcp"] = (mcp or McpSettings()).__dict__
    if len(runs) == 1:
        return {**header, **next(iter(runs.values()))}
    return {**header, "topologies": runs, "comparison": compare(runs)}


async def _memory(
    benches: dict[str, Bench], systems: list[System], runs: dict[str, dict[str, Any]]
) -> None:
    """Bytes per queued job of every system; ours also per retained task, by size."""
    for name, bench in benches.items():
        runs[name]["memory"] = {
            "retained": [
                await bench.memory_retained(origin, payload) for origin, payload in MEMORY_CASES
            ]
        }
        for system in systems:
            try:
                row = await bench.memory_queued(system)
            except AdapterError as exc:
                runs[name]["systems"][system.name]["memory_error"] = str(exc)
                continue
            runs[name]["systems"][system.name]["memory"] = row


async def _rounds(
    benches: dict[str, Bench], measure: Callable[[Bench], Awaitable[dict[str, Any]]]
) -> dict[str, dict[str, Any]]:
    """``measure`` for ``rounds`` rounds on every topology, alternating; per topology the
    round with the median rate, and every round's rate."""
    samples: dict[str, list[dict[str, Any]]] = {name: [] for name in benches}
    rounds = next(iter(benches.values())).settings.rounds
    for _ in range(rounds):
        for name, bench in benches.items():
            samples[name].append(await measure(bench))
    out = {}
    for name, rows in samples.items():
        median = sorted(rows, key=lambda row: row["rate"])[len(rows) // 2]
        out[name] = {**median, "rounds": [row["rate"] for row in rows]}
    return out


async def _pickups(
    benches: dict[str, Bench], systems: list[System], runs: dict[str, dict[str, Any]]
) -> None:
    """Pickup rounds, alternating systems and topologies; samples pooled per pair."""
    samples: dict[tuple[str, str], list[float]] = {}
    failed: set[tuple[str, str]] = set()
    rounds = next(iter(benches.values())).settings.rounds
    for round_ in range(rounds):
        for system in systems:
            for name, bench in benches.items():
                if (name, system.name) in failed:
                    continue
                label = f"{system.name} pickup #{round_ + 1}"
                try:
                    got = await bench.pickup_samples(system, label)
                except AdapterError as exc:
                    failed.add((name, system.name))
                    runs[name]["systems"][system.name]["pickup_error"] = str(exc)
                    continue
                samples.setdefault((name, system.name), []).extend(got)
    for (name, system_name), values in samples.items():
        if (name, system_name) not in failed:
            runs[name]["systems"][system_name]["pickup"] = pickup_figures(values)


async def _drains(
    benches: dict[str, Bench], systems: list[System], runs: dict[str, dict[str, Any]]
) -> None:
    """Every system's drain rounds, interleaved across systems and topologies, so drift
    on the machine hits all alike."""
    samples: dict[tuple[str, str, int], list[tuple[float, dict[str, int], dict[str, Any]]]] = {}
    failed: set[tuple[str, str]] = set()
    settings = next(iter(benches.values())).settings
    for round_ in range(settings.rounds):
        for system in systems:
            for workers in settings.workers if system.is_ours else (1,):
                for name, bench in benches.items():
                    if (name, system.name) in failed:
                        continue
                    label = f"{system.name} drain w={workers} #{round_ + 1}"
                    try:
                        sample = await bench.drain(system, workers, label)
                    except AdapterError as exc:
                        failed.add((name, system.name))
                        runs[name]["systems"][system.name]["drain_error"] = str(exc)
                        continue
                    samples.setdefault((name, system.name, workers), []).append(sample)
                    bench.progress.note(f"{label}: {sample[0]:.0f} jobs/s")
    n = settings.tasks
    for (name, system_name, workers), rounds in samples.items():
        rates = [rate for rate, _, _ in rounds]
        # Counts and CPU of the median round: they belong to the rate reported.
        _, calls, usage = sorted(rounds, key=lambda sample: sample[0])[len(rounds) // 2]
        out = runs[name]["systems"][system_name]
        out.setdefault("drain", {})[str(workers)] = {
            "rate": round(statistics.median(rates)),
            "rounds": [round(rate) for rate in rates],
            # Each round's CPU per job (workers and primaries), in the order run: the
            # cluster's round i ran right after standalone's, so their ratio pairs them.
            "cpu_rounds": [
                usage_["worker_us_per_job"] + usage_["redis_us_per_job"] for _, _, usage_ in rounds
            ],
            # The same pairing for the instructions (under callgrind), workers and primaries.
            **(
                {
                    "instructions_rounds": [
                        usage_.get("worker_instructions_per_job", 0)
                        + usage_["redis_instructions_per_job"]
                        for _, _, usage_ in rounds
                    ]
                }
                if all("redis_instructions_per_job" in usage_ for _, _, usage_ in rounds)
                else {}
            ),
            "commands_per_job": round(sum(calls.values()) / n, 1),
            "commands": {
                cmd: round(count / n, 2) for cmd, count in sorted(calls.items()) if count >= n / 20
            },
            **usage,
        }
