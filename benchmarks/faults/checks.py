"""The checks after the load: every task's final state, the runs the handlers
recorded, the calls' figures and the promises they show broken."""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import time
from collections import Counter
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from redis_tasks import BackendError, RedisTaskManager, Task, TaskRequestContext
from redis_tasks._bench._adapter import WHO
from redis_tasks._bench._progress import Progress, percentile

from .handler import runs_key
from .load import Load
from .records import CHUNK, Fault, Op


async def find_retrying(manager: RedisTaskManager, task_id: str) -> Task | None:
    """``find_task`` for the checks, which run after the faults: a failure is retried."""
    ctx = TaskRequestContext(WHO, task_id)
    for _ in range(20):
        try:
            return await manager.find_task(ctx)
        except BackendError:
            await asyncio.sleep(0.2)
    return await manager.find_task(ctx)


async def stored_task_ids(manager: RedisTaskManager) -> set[str]:
    """The ID of every task stored under the prefix (task hashes, not companion keys).

    The scan starts over if a connection the faults left broken fails under it.
    """
    pattern = manager.keyspace.pattern() + "}:task:*"
    for attempt in range(5):
        found = set()
        try:
            for client in manager.primary_clients():
                async for key in client.scan_iter(match=pattern, count=1000):
                    rest = bytes(key).decode().split("}:task:", 1)[1]
                    if ":" not in rest:  # ...:req, :iss and the like belong to a task
                        found.add(rest)
        except RedisConnectionError:
            if attempt == 4:
                raise
            continue
        return found
    raise AssertionError("unreachable")


async def settle(
    manager: RedisTaskManager, ids: set[str], within: float, progress: Progress
) -> tuple[dict[str, Task | None], set[str]]:
    """Wait until every task of ``ids`` is terminal (or not found). The last snapshot of
    each, and those still not terminal after ``within`` seconds."""
    final: dict[str, Task | None] = {}
    pending = set(ids)
    deadline = time.monotonic() + within
    while True:
        order = sorted(pending)
        for start in range(0, len(order), CHUNK):
            chunk = order[start : start + CHUNK]
            for task_id, task in zip(
                chunk,
                await asyncio.gather(*(find_retrying(manager, t) for t in chunk)),
                strict=True,
            ):
                final[task_id] = task
                if task is None or task.is_terminal:
                    pending.discard(task_id)
        progress.update("faults: settle (tasks terminal)", len(ids) - len(pending), len(ids))
        if not pending or time.monotonic() > deadline:
            return final, pending
        await asyncio.sleep(0.2)  # polling the workers' progress: the condition's interval


async def recorded_runs(url: str, prefix: str, ids: list[str]) -> dict[str, set[int]]:
    """The recorded runs (fences) of each task."""
    runs: dict[str, set[int]] = {}
    client = Redis.from_url(url, socket_timeout=30)
    try:
        for start in range(0, len(ids), 1000):
            chunk = ids[start : start + 1000]
            async with client.pipeline(transaction=False) as pipe:
                for task_id in chunk:
                    pipe.smembers(runs_key(prefix, task_id))
                replies = await pipe.execute()
            for task_id, members in zip(chunk, replies, strict=True):
                runs[task_id] = {int(m) for m in members}
    finally:
        await client.aclose()
    return runs


async def recovery_probe(load: Load, pids: set[int], after: float, within: float) -> None:
    """Create tasks until every worker in ``pids`` ran one created after ``after``."""

    def seen() -> set[int]:
        return {pid for t, pid in load.ran_by.items() if load.created_at[t] >= after}

    with contextlib.suppress(TimeoutError):  # the check below reports who stayed idle
        async with asyncio.timeout(within):
            while not pids <= seen():
                # A round of tasks spread over the partitions: every worker reads them all.
                await asyncio.gather(*(load.once(until_stopped=False) for _ in range(16)))


def op_figures(ops: list[Op], timeout: float, limit: float) -> dict[str, Any]:
    """Per kind of call (create, find): counts by outcome, and latencies in ms."""
    figures: dict[str, Any] = {}
    for kind in ("create", "find"):
        mine = [op for op in ops if op.kind == kind]
        outcomes = Counter(op.outcome for op in mine)
        ms = [op.seconds * 1000 for op in mine] or [0.0]
        figures[kind] = {
            "total": len(mine),
            "ok": outcomes.pop("ok", 0),
            "backend_error": outcomes.pop("backend_error", 0),
            "none": outcomes.pop("none", 0),
            "unexpected": dict(outcomes),
            # BackendErrors that took the whole timeout (the rest failed fast: refused).
            "timed_out": sum(
                1 for op in mine if op.outcome == "backend_error" and op.seconds >= timeout
            ),
            "over_limit": sum(1 for op in mine if op.seconds > limit),
            "p50_ms": round(percentile(ms, 0.5), 2),
            "p99_ms": round(percentile(ms, 0.99), 2),
            "max_ms": round(max(ms), 2),
        }
    return figures


def mark_recovered(faults: list[Fault], ops: list[Op]) -> None:
    """Set each fault's ``recovered_s``: from its heal until the first create that began
    after it succeeded."""
    creates = sorted((op for op in ops if op.kind == "create"), key=lambda op: op.began)
    starts = [op.began for op in creates]
    for fault in faults:
        best: float | None = None
        for op in creates[bisect.bisect_left(starts, fault.healed) :]:
            if best is not None and op.began > best:
                break  # nothing starting later can end sooner than the best so far
            if op.outcome == "ok":
                end = op.began + op.seconds
                best = end if best is None else min(best, end)
        fault.recovered_s = None if best is None else round(best - fault.healed, 3)


def broken_promises(f: dict[str, Any]) -> list[str]:
    """Every promise the figures ``f`` show broken, each as a sentence with its count."""
    tasks, workers, manager = f["tasks"], f["workers"], f["manager"]
    kinds = manager["kinds_scheduled"]
    checks = [
        (tasks["lost"], "created tasks lost (not found, or not terminal in time)"),
        (tasks["vanished_while_followed"], "created tasks not found while followed"),
        (tasks["not_terminal"], "stored tasks not terminal in time"),
        (tasks["orphans"], "stored tasks no create made"),
        (tasks["duplicated"], "tasks with two accepted completions"),
        (tasks["fence_mismatch"], "results not written by their accepted completion"),
        (tasks["unwitnessed"], "completed tasks no worker logged completing"),
        (tasks["checked"] - tasks["statuses"].get("completed", 0), "tasks not completed"),
        (f["ops_over_limit"], f"calls over the {f['settings']['limit_s']} s limit"),
        (f["ops_unexpected"], "calls that raised something other than BackendError"),
        (f["unrecovered_faults"], "faults after which no create succeeded"),
        (sum(not a for a in workers["alive_at_end"]), "worker processes died"),
        (
            sum(n == 0 for n in workers["tasks_after_last_fault"]),
            "workers idle after the last fault",
        ),
        (sum(workers["log_errors"].values()), "errors in the worker logs"),
        (
            workers["count"] - workers["stopped_cleanly"],
            "workers that logged no clean stop (their handler slots unchecked)",
        ),
        (workers["slot_bugs"], "handler slots not given back exactly once"),
        (workers["log_unparsed_lines"], "non-JSON lines in the worker logs"),
        (sum(f["faults"][k] == 0 for k in kinds), "fault kinds never injected"),
        (int(not manager["events_after_last_fault"]), "event tail silent after the last fault"),
        (sum(manager["log_errors"].values()), "errors in the load manager's log"),
    ]
    return [f"{count} {what}" for count, what in checks if count]
