"""The recorder: clients and workers running a random mix of operations on real tasks, each
operation logged with when it was invoked, when it returned and what it returned.

Clients create a task, then read it until it ends (answering its input requests, and
now and then asking to cancel it). Workers read the work queue, claim, sometimes ask
for input (and park the task while it waits, half the time: the answer resumes it,
and its next run asks the round again), then complete or fail, every write fenced by
their lease. An operation
that raised :class:`~redis_tasks.BackendError` (a timeout, a lost connection, a
write the replicas did not confirm) has an unknown outcome; the contract's own
errors (not found, terminal) are answers. A worker's write refused for a lost lease
took no effect and is left out of the history (the model has no leases).

Times come from ``time.monotonic()``, one clock for every process of a host. A task
whose create's reply was lost (so no client knew its ID) but that a worker met still
gets its create, with an unknown outcome.
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final

from redis_tasks import (
    BackendError,
    ClaimOutcome,
    JsonRpcError,
    LeaseLostError,
    TaskExecution,
    TaskNotFoundError,
    TaskRequestContext,
    TaskTerminalError,
    TaskUpdateContext,
)
from redis_tasks._lease import Claim
from redis_tasks._work_queue import WorkerBackend

from .model import ORIGIN, WHO, answer, asked, snapshot
from .ops import Op

__all__ = ["Entry", "Recorder", "Until", "histories", "run_clients", "run_workers"]

#: When a loop stops: at a ``time.monotonic()`` instant, or once a predicate holds.
Until = float | Callable[[], bool]


def _over(until: Until) -> bool:
    return until() if callable(until) else time.monotonic() >= until


_LEFT_OUT: Final = "lease_lost"
#: What an entry's task starts with when it marks a partition's batch claim of unknown
#: outcome (followed by the partition's number): see histories().
_PARTITION: Final = "#partition:"
#: How long after its start a batch claim that failed may still run on a server, at
#: most: its call gives up at its deadline (2 s here), and the longest fault that holds
#: a command it sent is a pause of 1.5 deadlines; after that, it ran or never will.
LOST_CLAIM_RUNS_WITHIN: Final = 10.0
_CLAIMED: Final = {
    ClaimOutcome.RUN: "run",
    ClaimOutcome.CANCELLED: "cancelled",
    ClaimOutcome.TERMINAL: "terminal",
    ClaimOutcome.EXPIRED: "not_found",
}


@dataclass(frozen=True)
class Entry:
    """One recorded operation, before the tasks' histories are put together."""

    task: str
    process: str
    kind: str
    invoke: float
    ret: float | None
    value: Any
    args: dict[str, Any] = field(default_factory=dict)


class Recorder:
    """Logs the operations one process runs (see the module)."""

    def __init__(self, process: str) -> None:
        self.process = process
        self.entries: list[Entry] = []

    async def call(
        self,
        task: str,
        kind: str,
        action: Awaitable[Any],
        *,
        args: dict[str, Any] | None = None,
        seen: Callable[[Any], Any] = lambda _: "ok",
    ) -> Any:
        """Await ``action`` (a coroutine not yet started) and log it; returns what it
        returned (``None`` when it raised)."""
        invoke = time.monotonic()
        result: Any = None
        value: Any = None
        unknown = False
        try:
            result = await action
            value = seen(result)
        except TaskNotFoundError:
            value = "not_found"
        except TaskTerminalError:
            value = "terminal"
        except LeaseLostError:
            value = _LEFT_OUT
        except BackendError:
            unknown = True  # it may have taken effect, or not
        ret = None if unknown else time.monotonic()
        self.entries.append(Entry(task, self.process, kind, invoke, ret, value, args or {}))
        return result


async def run_clients(
    manager: WorkerBackend,
    recorder: Recorder,
    *,
    clients: int,
    until: Until,
    rng: random.Random,
    cancel_share: float = 0.05,
) -> None:
    """``clients`` coroutines creating tasks and following each to its end, until
    ``until``."""

    async def client() -> None:
        while not _over(until):
            invoke = time.monotonic()
            try:
                task = await manager.create_task(WHO, ORIGIN)
            except BackendError:
                continue  # no ID known: a worker may still meet it (see histories())
            recorder.entries.append(
                Entry(task.task_id, recorder.process, "create", invoke, time.monotonic(), "ok")
            )
            ctx = TaskRequestContext(WHO, task.task_id)
            for _ in range(50):
                now = await recorder.call(
                    task.task_id, "find", manager.find_task(ctx), seen=snapshot
                )
                if now is not None and now.is_terminal:
                    break
                if now is not None and now.input_requests:
                    answers = {key: answer(key) for key in now.input_requests}
                    await recorder.call(
                        task.task_id,
                        "update",
                        manager.update_task(TaskUpdateContext(WHO, task.task_id, answers)),
                        args={"answers": answers},
                    )
                if rng.random() < cancel_share:
                    await recorder.call(task.task_id, "cancel", manager.request_cancellation(ctx))
                await asyncio.sleep(rng.uniform(0, 0.01))

    await asyncio.gather(*(client() for _ in range(clients)))


async def run_workers(
    manager: WorkerBackend,
    recorder: Recorder,
    *,
    workers: int,
    until: Until,
    rng: random.Random,
    lease: timedelta = timedelta(seconds=5),
    park_share: float = 0.5,
) -> None:
    """``workers`` coroutines reading every partition in turn, claiming what they read,
    asking for input now and then (and parking the task, ``park_share`` of those left
    waiting), and writing an outcome, each write fenced."""
    queue = manager.work_queue
    await queue.ensure_groups(range(manager.partitions))

    async def worker(number: int) -> None:
        consumer = f"{recorder.process}-w{number}"
        readers = [
            queue.reader(p, consumer, timedelta(milliseconds=20)) for p in range(manager.partitions)
        ]
        try:
            while not _over(until):
                for partition, reader in enumerate(readers):
                    # A worker's two paths: a batch claim, which dispatches from the
                    # tenant queues in their fair order (where every task but a
                    # partition's first waits), and when it finds nothing, a read
                    # and a claim of the entry read.
                    for entry, claim in await _claim_batch(partition, consumer):
                        await _run(entry.task_id, claim)
                    try:
                        entries = await reader.read(1)
                    except BackendError:
                        continue
                    for entry in entries:
                        if entry.task_id is not None:
                            await _run(entry.task_id, await _claim(entry, consumer))
        finally:
            for reader in readers:
                await reader.close()

    def retries() -> int:
        # The Redis queue's transparent retries so far (this process's, every call's);
        # the in-memory queue has none.
        topology = getattr(queue, "topology", None)
        return 0 if topology is None else int(topology.stats.retried)

    async def _claim_batch(partition: int, consumer: str) -> list[tuple[Any, Claim]]:
        """A batch claim of two, each claim recorded on its task; when nobody knows
        what it claimed, a mark on the partition (see :func:`histories`).

        A call retried after a transient failure (a connection killed after the
        server ran it) is answered with the tasks its first run leased (the call's
        token, ``lua/claim_next.lua``), but not with that run's claims that ended their
        task (cancelled or poisoned at the claim), which no reply names. Such a call
        leaves the mark too (any retry in the process while it ran counts: the mark
        only weakens the check)."""
        invoke = time.monotonic()
        before = retries()
        claimed: list[tuple[Any, Claim]] | None
        try:
            claimed = await queue.claim_next(
                partition, consumer=consumer, count=2, lease=lease, max_attempts=1000
            )
        except BackendError:
            claimed = None
        ret = time.monotonic()
        if claimed is None or retries() != before:
            # Until when the call may have run on the server: a call that was answered
            # ran before its answer (a retry's first attempt runs before the retry, or
            # never: a killed connection's unread commands are dropped).
            until = invoke + LOST_CLAIM_RUNS_WITHIN if claimed is None else ret
            recorder.entries.append(
                Entry(
                    f"{_PARTITION}{partition}",
                    recorder.process,
                    "claim",
                    invoke,
                    None,
                    None,
                    {"until": until},
                )
            )
        if claimed is None:
            return []
        out = []
        for entry, claim in claimed:
            if entry.task_id is None:
                continue
            seen = _CLAIMED.get(claim.outcome, claim.outcome.value)
            recorder.entries.append(
                Entry(entry.task_id, recorder.process, "claim", invoke, ret, seen)
            )
            out.append((entry, claim))
        return out

    async def _claim(entry: Any, consumer: str) -> Claim | None:
        return await recorder.call(  # type: ignore[no-any-return]
            entry.task_id,
            "claim",
            queue.claim(entry, consumer=consumer, lease=lease, max_attempts=1000),
            seen=lambda c: _CLAIMED.get(c.outcome, c.outcome.value),
        )

    async def _run(task_id: str, claim: Claim | None) -> None:
        if claim is None or claim.outcome is not ClaimOutcome.RUN:
            return
        fence = claim.fence
        # A resumed run (its task was parked) asks its round again, as a handler run
        # from the top does, through the execution a worker hands its handler: the
        # answer comes from the claim's recorded answers, without a call.
        if claim.parks or rng.random() < 0.3:
            keys = [f"k{zlib.crc32(task_id.encode()) % 3}"]
            run = TaskExecution(
                manager,
                task_id,
                origin=ORIGIN,
                payload=b"",
                attempt=claim.attempt,
                fence=fence,
                input_poll=1.0,
                parks=claim.parks,
                recorded=claim.recorded,
            )
            answers = await recorder.call(
                task_id,
                "request_input",
                run.answered_so_far({k: asked(k) for k in keys}),
                args={"keys": keys},
                seen=lambda answers: ["ok", answers],
            )
            if answers == {} and rng.random() < park_share:
                # The wait parks the task: the client's answer resumes it, and a
                # worker (this one, or another) claims it again.
                parked = await recorder.call(
                    task_id,
                    "park",
                    queue.park(task_id, fence=fence),
                    seen=lambda done: "parked" if done else "not_parked",
                )
                if parked:
                    return
            await asyncio.sleep(rng.uniform(0.01, 0.05))  # long enough to be answered
        if rng.random() < 0.8:
            result = {"content": [], "isError": False}
            await recorder.call(
                task_id,
                "complete",
                manager.complete_task(task_id, result, fence=fence),
                args={"result": result},
            )
        else:
            code = -32001
            await recorder.call(
                task_id,
                "fail",
                manager.fail_task(task_id, JsonRpcError(code=code, message="no"), fence=fence),
                args={"code": code},
            )

    await asyncio.gather(*(worker(n) for n in range(workers)))


def histories(entries: list[Entry]) -> dict[str, list[Op]]:
    """Each task's operations (those of every process), indexed in invocation order; a
    write refused for a lost lease left out, a create nobody heard back from added.

    A batch claim nobody heard back from may have claimed any task of its partition
    that was alive then or came while its call was out: each such task (created before
    the call's last moment on a server, with an operation after the claim's start)
    gets a claim of unknown outcome at that time, which the checker may place after it
    (after its create too) or leave out. That weakens the check for those tasks only,
    never wrongly reports one."""
    by_task: dict[str, list[Entry]] = {}
    marks: list[Entry] = []
    for entry in entries:
        if entry.task.startswith(_PARTITION):
            marks.append(entry)
        elif entry.value != _LEFT_OUT:
            by_task.setdefault(entry.task, []).append(entry)
    for mark in marks:
        prefix = mark.task.removeprefix(_PARTITION) + "."
        for task, rows in by_task.items():
            # Not only tasks created before the claim's start: a lost call may run on
            # the server after a create that started later.
            if (
                task.startswith(prefix)
                and min(e.invoke for e in rows) < mark.args["until"]
                and any(e.invoke > mark.invoke for e in rows)
            ):
                rows.append(Entry(task, mark.process, "claim", mark.invoke, None, None))
    out: dict[str, list[Op]] = {}
    for task, rows in by_task.items():
        rows.sort(key=lambda e: e.invoke)
        if not any(e.kind == "create" for e in rows):
            rows.insert(0, Entry(task, "?", "create", rows[0].invoke - 1e-6, None, None))
        out[task] = [
            Op(i, e.process, e.kind, e.invoke, e.ret, e.value, e.args) for i, e in enumerate(rows)
        ]
    return out
