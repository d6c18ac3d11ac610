"""The whole run: the server and workers started, the load driven while the faults
are injected, then the checks; every figure."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from redis_tasks import RedisTaskManager, TaskStatus, task_ref
from redis_tasks._bench._adapter import delete_prefix
from redis_tasks._bench._progress import Progress, percentile

from .checks import (
    broken_promises,
    find_retrying,
    mark_recovered,
    op_figures,
    recorded_runs,
    recovery_probe,
    settle,
    stored_task_ids,
)
from .injector import Injector
from .load import Load
from .processes import PrivateRedis, WorkerProcess, start_worker
from .records import KINDS, SLOT_BUGS, LogCounter, Settings, WorkerLogs


async def _until(condition: Callable[[], bool], within: float, what: str) -> None:
    """Return once ``condition()`` holds; raise ``TimeoutError`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)  # polling other processes' state: the condition's interval


async def _drive(
    manager: RedisTaskManager,
    url: str,
    server: PrivateRedis | None,
    workers: list[WorkerProcess],
    settings: Settings,
    progress: Progress,
) -> dict[str, Any]:
    """The load with the faults, then the checks; every figure of the run."""
    load = Load(manager, settings)
    registration = manager.event_publisher.subscribe(load.on_change)
    await manager.event_publisher.wait_ready()
    injector = Injector(url, server, settings, load)
    watcher = asyncio.create_task(load.watch_loop())
    load.t0 = time.monotonic()
    clients = [asyncio.create_task(load.client()) for _ in range(settings.clients)]

    async def show() -> None:
        while True:
            label = f"faults: load ({len(injector.faults)} injected)"
            progress.update(
                label, min(int(load.now()), int(settings.seconds) - 1), int(settings.seconds)
            )
            await asyncio.sleep(0.5)

    shower = asyncio.create_task(show())
    try:
        await injector.run(until=settings.seconds - settings.recovery)
        last_heal = max(f.healed for f in injector.faults)
        # The recovery window: load without faults, a scheduled span, not a wait for a result.
        await asyncio.sleep(max(last_heal + settings.recovery, settings.seconds) - load.now())
        load.creating = False
        await asyncio.gather(*clients)
    finally:
        load.creating = False
        shower.cancel()
        for client in clients:
            client.cancel()
        await asyncio.gather(*clients, shower, return_exceptions=True)
    load_seconds = load.now()
    followed = len(load.ran_by)  # tasks the clients saw completed during the load
    total = int(settings.seconds)
    progress.update(f"faults: load ({len(injector.faults)} injected)", total, total)
    pids = {w.pid for w in workers}
    await recovery_probe(load, pids, last_heal, within=settings.settle)
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    registration.close()

    stored = await stored_task_ids(manager)
    extra = stored - load.created.keys()
    ops_of_extra: dict[str, int | None] = {}
    for task_id in extra:
        task = await find_retrying(manager, task_id)
        ops_of_extra[task_id] = None if task is None else task.metadata.get("op")
    ambiguous = {t for t, op in ops_of_extra.items() if op in load.failed_creates}
    orphans = extra - ambiguous
    final, stuck = await settle(manager, stored | load.created.keys(), settings.settle, progress)
    alive = [w.alive for w in workers]
    runs = await recorded_runs(url, manager.prefix, sorted(final))
    exits = [await w.stop(settings.lease + 10) for w in workers]
    logs = WorkerLogs()
    for worker in workers:
        logs.read(worker.log_path)

    statuses = Counter(t.status.value if t else "not_found" for t in final.values())
    lost = sorted(t for t in load.created if final.get(t) is None or t in stuck)
    duplicated = fence_mismatch = unwitnessed = re_run = 0
    sharing = Counter(task_ref(task_id) for task_id in final)
    for task_id, task in final.items():
        recorded = runs.get(task_id, set())
        re_run += len(recorded) > 1
        if task is None or task.status is not TaskStatus.COMPLETED or task.result is None:
            continue
        ref = task_ref(task_id)
        accepted = logs.completions.get(ref, [])
        if sharing[ref] > 1:
            # Two tasks share a reference (odds about n^2 / 2^37): the lines are told
            # apart by fence, each claim's own (this task's runs recorded them).
            accepted = [f for f in accepted if f in recorded]
        duplicated += len(accepted) > 1
        fence = int(task.result["fence"])
        fence_mismatch += fence not in recorded or any(f != fence for f in accepted)
        unwitnessed += not accepted and ref not in logs.abandoned
    after_last = Counter(pid for t, pid in load.ran_by.items() if load.created_at[t] >= last_heal)
    mark_recovered(injector.faults, load.ops)
    ops = op_figures(load.ops, settings.timeout, settings.limit)
    lags = load.lags or [0.0]
    faults = Counter(f.kind if f.kind != "restart" else f"restart_{f.how}" for f in injector.faults)
    figures: dict[str, Any] = {
        "settings": {**asdict(settings), "limit_s": settings.limit},
        "server": f"private (appendonly yes, appendfsync {settings.fsync})" if server else "given",
        "load_seconds": round(load_seconds, 1),
        "faults": {kind: injector.count(kind) for kind in KINDS} | dict(faults),
        "fault_log": [asdict(f) for f in injector.faults],
        "max_recovery_s": max((f.recovered_s or 0.0) for f in injector.faults),
        "unrecovered_faults": sum(1 for f in injector.faults if f.recovered_s is None),
        "ops": ops,
        "max_latency_ms": max(ops["create"]["max_ms"], ops["find"]["max_ms"]),
        "ops_over_limit": ops["create"]["over_limit"] + ops["find"]["over_limit"],
        "ops_backend_error": ops["create"]["backend_error"] + ops["find"]["backend_error"],
        "ops_timed_out": ops["create"]["timed_out"] + ops["find"]["timed_out"],
        "ops_unexpected": sum(sum(o["unexpected"].values()) for o in ops.values()),
        "loop_lag_ms": {
            "p99": round(percentile(lags, 0.99) * 1000, 1),
            "max": round(max(lags) * 1000, 1),
        },
        "tasks": {
            "created": len(load.created),
            "creates_failed": len(load.failed_creates),
            "ambiguous_persisted": len(ambiguous),
            "orphans": len(orphans),
            "checked": len(final),
            "statuses": dict(statuses),
            "lost": len(lost),
            "vanished_while_followed": len(load.vanished),
            "not_terminal": len(stuck),
            "duplicated": duplicated,
            "fence_mismatch": fence_mismatch,
            "unwitnessed": unwitnessed,
            "abandoned_finishes": len(logs.abandoned),
            "re_run": re_run,
            "max_runs": max((len(r) for r in runs.values()), default=0),
            "completed_per_s": round(followed / load_seconds),
        },
        "manager": {
            "events_after_last_fault": load.last_event > last_heal,
            "kinds_scheduled": list(injector.kinds),
        },
        "workers": {
            "count": len(workers),
            "alive_at_end": alive,
            "tasks_after_last_fault": [after_last.get(w.pid, 0) for w in workers],
            "exit_codes": exits,
            # Each worker checks its slots as it stops: only a clean stop was checked.
            "stopped_cleanly": logs.events["worker_stopped"],
            "slot_bugs": sum(logs.events[event] for event in SLOT_BUGS),
            "log_errors": dict(logs.errors),
            "log_unparsed_lines": logs.unparsed,
            "log_events": dict(logs.events.most_common()),
        },
    }
    if server is None:
        await delete_prefix(manager)  # a given Redis: leave nothing behind
    return figures


async def run_faults(
    settings: Settings,
    directory: Path,
    *,
    url: str | None = None,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Run the whole thing; every figure, ``broken`` (the promises broken) among them.

    Without ``url`` a private redis-server is started (and restarted) in ``directory``;
    the worker logs go there too.
    """
    progress = progress or Progress(quiet=True)
    server = None if url else await PrivateRedis.start(directory / "redis", settings.fsync)
    url = url or (server.url if server else "")
    prefix = f"faults-{secrets.token_hex(3)}"
    workers: list[WorkerProcess] = []
    try:
        for index in range(settings.workers):
            workers.append(await start_worker(url, prefix, settings, directory, index))
        await _until(
            lambda: all(w.started() or not w.alive for w in workers), 60, "the workers to start"
        )
        if not all(w.alive for w in workers):
            raise RuntimeError("a worker exited at startup; see its log")
        with LogCounter().installed() as log:
            async with RedisTaskManager.from_url(
                url, prefix=prefix, timeout=settings.timeout
            ) as manager:
                figures = await _drive(manager, url, server, workers, settings, progress)
        figures["manager"]["log"] = dict(log.counts.most_common())
        figures["manager"]["log_errors"] = dict(log.errors)
        figures["broken"] = broken_promises(figures)
        figures["ok"] = not figures["broken"]
        return figures
    finally:
        for worker in workers:
            if worker.alive:
                worker.process.kill()
                await worker.process.wait()
        if server is not None:
            await asyncio.to_thread(server.stop)
