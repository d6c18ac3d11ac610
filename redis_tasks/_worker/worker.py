"""``Worker``: runs handlers for tasks, at least once, under leases and fencing.

One worker process runs up to ``concurrency`` handlers. It reads each of its
partitions' work streams with a blocking ``XREADGROUP`` (group ``workers``), claims
every entry with the ``claim`` script (fence bump, attempt count, lease deadline),
renews leases well before they run out (``renew``: fence check, idle reset of the
stream entry, cancellation flag), and reclaims entries of crashed or stalled
workers with ``XAUTOCLAIM`` once they have been idle longer than a lease (the
``claim`` script also checks the task's own lease deadline). A late write from a
worker whose lease was taken over is refused by the fence.

Logs are structured (``extra`` fields ``event``, ``task_id``, ``fence``,
``attempt``) and never contain origins, payloads, results, answers or exception
messages, which may all carry secrets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import socket
import time
import traceback
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from types import TracebackType
from typing import Any, Final, Self

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from redis_tasks._errors import (
    BackendError,
    LeaseLostError,
    RedisTasksError,
    ReplicationError,
    TaskNotFoundError,
    TaskTerminalError,
    ValidationError,
)
from redis_tasks._execution import Handler, TaskExecution, TaskFailed
from redis_tasks._ids import parse_task_id
from redis_tasks._lease import INTERNAL_ERROR, Claim, ClaimOutcome
from redis_tasks._models import JsonRpcError
from redis_tasks._redis.keys import WORK_GROUP
from redis_tasks._redis.manager import RedisTaskManager
from redis_tasks._redis.rawio import KeptConnection, stream_entries

__all__ = ["Worker"]

logger = logging.getLogger("redis_tasks.worker")

_MAX_BACKOFF: Final = 5.0
# A consumer with nothing pending that has been idle this long belongs to a
# worker that is gone; its entry in the group is removed.
_STALE_CONSUMER_MS: Final = 24 * 3600 * 1000


# Entries an idle read asks for (see _read_with).
_IDLE_READ: Final = 2

_DONE: Final = {"complete": "task completed", "fail": "task failed", "cancel": "task cancelled"}


def _log(level: int, message: str, event: str, **fields: Any) -> None:
    logger.log(level, message, extra={"event": event, **fields})


def _frames(exc: BaseException) -> str:
    """Where an exception was raised, without its message (which may hold secrets)."""
    summary = traceback.extract_tb(exc.__traceback__)
    return " <- ".join(f"{f.filename}:{f.lineno} in {f.name}" for f in reversed(summary))


def _entries(reply: Any) -> list[tuple[bytes, dict[bytes, bytes]]]:
    """The entries of a raw one-stream ``XREADGROUP`` reply, their fields as a dict."""
    out = []
    for entry_id, fields in stream_entries(reply):
        if isinstance(fields, dict):
            out.append((entry_id, fields))
        else:  # a flat [field, value, ...] list; None once the entry was deleted
            flat = fields or []
            out.append((entry_id, dict(zip(flat[::2], flat[1::2], strict=True))))
    return out


def _task_id_of(fields: dict[bytes, bytes]) -> str | None:
    """The task ID a work entry names, or ``None`` when redis-tasks did not write it."""
    task_id = fields.get(b"t", b"").decode("utf-8", "replace")
    return task_id if parse_task_id(task_id) is not None else None


def _no_group(exc: BaseException) -> bool:
    """Whether ``exc`` says the work stream's group is missing (NOGROUP)."""
    cause = exc.__cause__
    return isinstance(cause, ResponseError) and "NOGROUP" in str(cause)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Slots:
    """Free handler slots. Readers wait for one to be free before reading but do
    not reserve it while blocked, so idle partitions hold no capacity."""

    def __init__(self, total: int) -> None:
        self.free = total
        self._available = asyncio.Event()
        self._available.set()
        self.closed = False

    async def wait_free(self) -> bool:
        """Wait until a slot is free (taking none); ``False`` once closed."""
        while self.free == 0 and not self.closed:
            self._available.clear()
            await self._available.wait()
        return not self.closed

    def close(self) -> None:
        """Wake every waiter: the worker is stopping."""
        self.closed = True
        self._available.set()

    def take_up_to(self, wanted: int) -> int:
        taken = min(wanted, self.free)
        self.free -= taken
        return taken

    def give(self, count: int = 1) -> None:
        self.free += count
        if self.free > 0:
            self._available.set()


@dataclass(eq=False)
class _Run:
    """A claimed task this worker is running."""

    execution: TaskExecution
    partition: int
    lease_until: float  # monotonic time the lease is known to last until
    handler: asyncio.Future[dict[str, Any]] | None = None
    supervisor: asyncio.Task[Any] | None = None
    abandoned: str | None = None  # why the worker stopped the handler, if it did
    # Resolved when the handler ends or the worker abandons it, whichever is first.
    wake: asyncio.Future[None] | None = None
    renewing: bool = False
    finishing: bool = False  # the outcome is being written: no more renewals
    holds_slot: bool = True  # until the handler is done (see Worker._release_slot)


class Worker:
    """Runs ``handler`` for tasks of ``manager``'s partitions under leases.

    ``async with Worker(manager, handler) as worker: await worker.run()``; call
    :meth:`stop` (or send SIGTERM to the CLI) for a graceful shutdown: reading
    stops, running handlers get ``grace`` seconds to finish, and the rest are
    handed back so another worker picks them up at once.

    A handler returns the result (the task ends ``completed``; ``isError: true``
    results too), raises :class:`TaskFailed` (``failed`` with its error), raises
    :class:`asyncio.CancelledError` after cancellation was requested
    (``cancelled``), or raises anything else (``failed`` with a generic internal
    error; the exception's type and location go to the log).
    """

    def __init__(
        self,
        manager: RedisTaskManager,
        handler: Handler,
        *,
        concurrency: int = 32,
        lease: timedelta = timedelta(seconds=30),
        max_attempts: int = 5,
        partitions: Iterable[int] | None = None,
        name: str | None = None,
        read_batch: int = 16,
        cancel_hints: bool = True,
        input_poll_interval: timedelta = timedelta(seconds=1),
    ) -> None:
        if concurrency < 1 or max_attempts < 1 or read_batch < 1:
            raise ValueError("concurrency, max_attempts and read_batch must be >= 1")
        if lease < timedelta(milliseconds=100):
            raise ValueError("lease must be at least 100 ms")
        self.manager = manager
        self.handler = handler
        self.concurrency = concurrency
        self.lease = lease
        self.max_attempts = max_attempts
        self.partitions = tuple(range(manager.partitions) if partitions is None else partitions)
        if not self.partitions:
            raise ValueError("a worker needs at least one partition")
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.read_batch = read_batch
        self.cancel_hints = cancel_hints
        self._input_poll = input_poll_interval.total_seconds()
        lease_s = lease.total_seconds()
        # Renew three times per lease: two renewals may fail before it runs out.
        self._renew_every = lease_s / 3
        self._reclaim_every = max(lease_s / 2, 0.05)
        self._block_ms = max(1, min(1000, int(manager.timeout * 500)))
        self._slots = _Slots(concurrency)
        self._runs: set[_Run] = set()  # every run in progress
        self._latest: dict[str, _Run] = {}  # the newest run of each task
        self._claiming = 0  # claims sent and not yet answered
        self._claims_settled = asyncio.Event()
        self._claims_settled.set()
        self._stopping = asyncio.Event()
        self._stopped = asyncio.Event()
        self._started = False
        self._grace: float = lease_s
        # asyncio keeps only weak references to tasks: these keep ours alive.
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        """Make sure the work groups exist on this worker's partitions."""
        await self.manager.ensure_work_groups(self.partitions)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop gracefully if still running."""
        if self._started and not self._stopped.is_set():
            await self.stop()

    @property
    def running(self) -> int:
        """How many handlers are running now."""
        return len(self._runs)

    async def stop(self, grace: float | None = None) -> None:
        """Stop reading, give running handlers ``grace`` seconds, hand back the rest.

        Returns once the worker has shut down. ``grace`` defaults to one lease.
        """
        if grace is not None:
            self._grace = grace
        self._stopping.set()
        self._slots.close()
        if self._started:
            await self._stopped.wait()

    async def run(self) -> None:
        """Run until :meth:`stop` is called."""
        if self._started:
            raise RuntimeError("a Worker runs once")
        self._started = True
        _log(
            logging.INFO,
            "worker started",
            "worker_started",
            worker=self.name,
            partitions=len(self.partitions),
            concurrency=self.concurrency,
        )
        registration = None
        if self.cancel_hints:
            registration = self.manager.event_publisher.subscribe(self._on_event)
            # Read no work before the event tail has fixed where it starts, or a
            # cancellation made in between would never reach the handler as a hint.
            try:
                async with asyncio.timeout(self.manager.timeout):
                    await self.manager.event_publisher.wait_ready()
            except TimeoutError:
                _log(
                    logging.WARNING,
                    "event tail not ready; cancellation arrives by renewal",
                    "hints_late",
                    worker=self.name,
                )
        readers = [
            asyncio.create_task(self._read(p), name=f"redis-tasks-read-{p}")
            for p in self.partitions
        ]
        background = [
            asyncio.create_task(self._renew_loop(), name="redis-tasks-renew"),
            asyncio.create_task(self._reclaim_loop(), name="redis-tasks-reclaim"),
        ]
        try:
            await self._stopping.wait()
        finally:
            self._stopping.set()
            self._slots.close()
            # Readers finish their current read (at most one block) and stop; an
            # entry read meanwhile is claimed and then handed back like the rest.
            await asyncio.gather(*readers, return_exceptions=True)
            background[1].cancel()
            await self._drain()
            background[0].cancel()
            await asyncio.gather(*background, return_exceptions=True)
            if registration is not None:
                registration.close()
            await self._forget_consumer()
            self._stopped.set()
            _log(logging.INFO, "worker stopped", "worker_stopped", worker=self.name)

    async def _drain(self) -> None:
        # Claims already sent still become runs; wait for them to register.
        await self._claims_settled.wait()
        supervisors = [r.supervisor for r in self._runs if r.supervisor]
        if supervisors:
            _log(
                logging.INFO,
                "waiting for running handlers",
                "draining",
                running=len(supervisors),
                grace=self._grace,
            )
            await asyncio.wait(supervisors, timeout=self._grace)
        for run in list(self._runs):
            self._abandon(run, "shutdown")
        rest = [r.supervisor for r in self._runs if r.supervisor]
        if rest:
            await asyncio.gather(*rest, return_exceptions=True)
        # Whatever else is in flight (hint renewals, dropped entries) ends here.
        leftovers = [t for t in self._tasks if not t.done()]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)

    async def _forget_consumer(self) -> None:
        """Remove this worker's consumer from each group it left nothing pending in."""
        for partition in self.partitions:
            stream = self.manager.keyspace.work(partition)

            async def forget(client: Redis, stream: str = stream) -> None:
                pending = await client.xpending_range(
                    stream, WORK_GROUP, min="-", max="+", count=1, consumername=self.name
                )
                if not pending:
                    await client.xgroup_delconsumer(stream, WORK_GROUP, self.name)

            try:
                await self.manager.execute(stream, forget)
            except BackendError:
                return  # best effort: a stale consumer is removed by others later

    # -- reading and reclaiming ------------------------------------------------------

    async def _read(self, partition: int) -> None:
        kept = KeptConnection()
        try:
            await self._read_with(kept, partition)
        finally:
            await kept.close()

    async def _read_with(self, kept: KeptConnection, partition: int) -> None:
        stream = self.manager.keyspace.work(partition)
        # Two entries at most: one is an idle pickup, after which the loop blocks
        # again; a second says a backlog is building, which is then claimed in
        # batches (claim_next). With one, every idle pickup was followed by a
        # claim_next that found nothing: a round trip and a script per task.
        read = (b"XREADGROUP", b"GROUP", WORK_GROUP, self.name, b"COUNT", _IDLE_READ,
                b"BLOCK", self._block_ms, b"STREAMS", stream, b">")  # fmt: skip
        within = self._block_ms / 1000 + self.manager.timeout
        backoff = 0.05
        backlog = False
        while not self._stopping.is_set():
            if not await self._slots.wait_free():
                return
            if backlog:
                # The partition has more: read and claim a batch in one script
                # call, for slots reserved up front (the call returns at once, so
                # the reservation holds no capacity idle).
                reserved = self._slots.take_up_to(self.read_batch)
                if reserved == 0:
                    continue
                backlog, backoff = await self._claim_batch(partition, reserved, backoff)
                continue
            # Idle: block for one entry without reserving a slot, so every
            # partition is watched while idle partitions hold no capacity.
            try:
                reply: Any = await self.manager.request_kept(kept, stream, read, within=within)
            except BackendError as exc:
                if _no_group(exc):  # the server lost the group (flush, no persistence)
                    await self._recreate_group(partition)
                    continue
                backoff = await self._backoff("read", backoff)
                continue
            backoff = 0.05
            entries = _entries(reply)
            backlog = len(entries) >= _IDLE_READ
            for entry_id, fields in entries:
                if self._slots.take_up_to(1):
                    await self._claim_read(partition, entry_id, fields)
                else:
                    # Other partitions filled the slots while this read was blocked:
                    # hand the entry straight back rather than hold it.
                    self._spawn(self._requeue(partition, entry_id, fields))
            if entries:
                # Let the handler just launched take its first step before this
                # loop sends its next read or batch claim: measured 0.09 ms off
                # an idle pickup.
                await asyncio.sleep(0)

    async def _claim_read(
        self, partition: int, entry_id: bytes, fields: dict[bytes, bytes]
    ) -> None:
        """Claim an entry the idle read returned, from the reader itself, then start its run.

        This is the pickup path of an idle worker: the claim goes out in the same
        loop turn the read's reply arrived in, not after a task of its own was
        scheduled (the event tail wakes in that turn too, for the same create).
        The reader waits one round trip, which it would spend reading a batch.
        """
        task_id = _task_id_of(fields)
        if task_id is None:
            self._slots.give()
            self._spawn(self._drop_foreign(partition, entry_id))
            return
        claim = await self._claim(entry_id.decode(), task_id)
        if not self._start_claimed(partition, task_id, claim):
            self._slots.give()

    async def _claim_batch(
        self, partition: int, reserved: int, backoff: float
    ) -> tuple[bool, float]:
        """Claim up to ``reserved`` new entries of ``partition`` and start their runs.

        Returns whether entries were read (the partition may have more) and the
        next read backoff.
        """
        try:
            claimed = await self.manager.claim_next(
                partition,
                consumer=self.name,
                count=reserved,
                lease=self.lease,
                max_attempts=self.max_attempts,
            )
        except RedisTasksError as exc:
            self._slots.give(reserved)
            if _no_group(exc):
                await self._recreate_group(partition)
                return False, backoff
            # Entries the script read before its reply was lost stay pending with
            # us and are reclaimed after a lease, like any claim that failed.
            return False, await self._backoff("read", backoff)
        started = sum(
            self._start_claimed(partition, task_id, claim) for _, task_id, claim in claimed
        )
        self._slots.give(reserved - started)
        return bool(claimed), 0.05

    def _start_claimed(self, partition: int, task_id: str, claim: Claim | None) -> bool:
        """Start the run of a task claimed for a slot already taken; whether it runs."""
        run = self._admit(partition, task_id, claim, reclaimed=False)
        if run is None:
            return False
        self._launch(run)
        task = asyncio.ensure_future(self._guarded(task_id, self._run_claimed(run)))
        run.supervisor = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    async def _recreate_group(self, partition: int) -> None:
        try:
            await self.manager.ensure_work_groups([partition])
            _log(
                logging.WARNING,
                "recreated a missing work group",
                "group_recreated",
                partition=partition,
            )
        except BackendError:
            await self._backoff("group", 0.5)

    async def _backoff(self, what: str, delay: float) -> float:
        _log(
            logging.WARNING,
            f"Redis unavailable during {what}; retrying",
            "redis_retry",
            worker=self.name,
            retry_in=round(delay, 3),
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), timeout=delay)
        return min(delay * 2, _MAX_BACKOFF)

    async def _reclaim_loop(self) -> None:
        cursors = dict.fromkeys(self.partitions, "0-0")
        lease_ms = self.lease // timedelta(milliseconds=1)
        passes = 0
        while True:
            await asyncio.sleep(self._reclaim_every)
            passes += 1
            for partition in self.partitions:
                wanted = self._slots.take_up_to(self.read_batch)
                if wanted == 0:
                    break
                stream = self.manager.keyspace.work(partition)
                try:
                    reply = await self._autoclaim(stream, cursors[partition], lease_ms, wanted)
                except BackendError:
                    self._slots.give(wanted)
                    continue
                # Keep the cursor: the next pass continues where this one stopped.
                cursors[partition] = reply[0].decode() if isinstance(reply[0], bytes) else reply[0]
                entries = [e for e in reply[1] if e[1] is not None]
                self._slots.give(wanted - len(entries))
                for entry_id, fields in entries:
                    self._start(partition, entry_id, fields, reclaimed=True)
            if passes % 100 == 1:
                await self._remove_stale_consumers()

    async def _autoclaim(self, stream: str, cursor: str, lease_ms: int, count: int) -> Any:
        return await self.manager.execute(
            stream,
            lambda client: client.xautoclaim(
                stream, WORK_GROUP, self.name, lease_ms, start_id=cursor, count=count
            ),
        )

    async def _remove_stale_consumers(self) -> None:
        for partition in self.partitions:
            stream = self.manager.keyspace.work(partition)

            async def remove(client: Redis, stream: str = stream) -> None:
                for consumer in await client.xinfo_consumers(stream, WORK_GROUP):
                    name = consumer["name"]
                    name = name.decode() if isinstance(name, bytes) else name
                    if (
                        name != self.name
                        and consumer["pending"] == 0
                        and consumer["idle"] > _STALE_CONSUMER_MS
                    ):
                        await client.xgroup_delconsumer(stream, WORK_GROUP, name)

            try:
                await self.manager.execute(stream, remove)
            except BackendError:
                return

    # -- running one task ------------------------------------------------------------

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _start(
        self, partition: int, entry_id: bytes, fields: dict[bytes, bytes], reclaimed: bool = False
    ) -> None:
        """Claim and run one entry; the caller already took a slot for it."""
        task_id = _task_id_of(fields)
        if task_id is None:
            # Not an entry redis-tasks wrote: drop it, or it would be reclaimed forever.
            self._slots.give()
            self._spawn(self._drop_foreign(partition, entry_id))
            return
        self._spawn(
            self._guarded(
                task_id, self._claim_and_run(partition, entry_id.decode(), task_id, reclaimed)
            )
        )

    async def _requeue(self, partition: int, entry_id: bytes, fields: dict[bytes, bytes]) -> None:
        task_id = _task_id_of(fields)
        if task_id is None:
            await self._drop_foreign(partition, entry_id)
            return
        try:
            await self.manager.requeue_entry(task_id, entry_id.decode())
        except RedisTasksError as exc:
            # Left pending with us: reclaimed after a lease, by us or another worker.
            _log(
                logging.WARNING,
                "requeue failed",
                "requeue_failed",
                task_id=task_id,
                error=type(exc).__name__,
            )

    async def _drop_foreign(self, partition: int, entry_id: bytes) -> None:
        stream = self.manager.keyspace.work(partition)
        _log(
            logging.WARNING, "dropping a malformed work entry", "foreign_entry", partition=partition
        )

        async def drop(client: Redis) -> None:
            await client.xack(stream, WORK_GROUP, entry_id)
            await client.xdel(stream, entry_id)

        with contextlib.suppress(BackendError):
            await self.manager.execute(stream, drop)

    async def _guarded(self, task_id: str, work: Awaitable[None]) -> None:
        """Await ``work`` (one task's run); an unexpected error is logged, not raised."""
        try:
            await work
        except Exception as exc:
            # Never die silently: the lease runs out and the task is run again.
            _log(
                logging.ERROR,
                "internal error running a task",
                "internal_error",
                task_id=task_id,
                error=type(exc).__name__,
                where=_frames(exc),
            )

    async def _claim_and_run(
        self, partition: int, entry_id: str, task_id: str, reclaimed: bool
    ) -> None:
        run = None
        try:
            claim = await self._claim(entry_id, task_id)
            run = self._admit(partition, task_id, claim, reclaimed)
            if run is None:
                return
            self._launch(run)
            run.supervisor = asyncio.current_task()
            await self._supervise_and_forget(run)
        finally:
            if run is None:
                self._slots.give()
            else:
                self._release_slot(run)

    async def _run_claimed(self, run: _Run) -> None:
        """Run a task ``claim_next`` claimed (its slot was taken by the reader)."""
        try:
            await self._supervise_and_forget(run)
        finally:
            self._release_slot(run)

    def _release_slot(self, run: _Run) -> None:
        """Give ``run``'s handler slot back, once.

        This happens as soon as the handler is done, before its outcome is
        written: ``concurrency`` bounds handlers, and a write in flight is no
        handler. The next task starts one round trip sooner, which is what a
        worker waiting on Redis latency (not CPU) needs; writes in flight stay
        bounded, since every task needs a claim (from the same Redis) first.
        """
        if run.holds_slot:
            run.holds_slot = False
            self._slots.give()

    async def _supervise_and_forget(self, run: _Run) -> None:
        task_id = run.execution.task_id
        try:
            await self._supervise(run)
        finally:
            self._runs.discard(run)
            if self._latest.get(task_id) is run:
                del self._latest[task_id]

    async def _claim(self, entry_id: str, task_id: str) -> Claim | None:
        self._claiming += 1
        self._claims_settled.clear()
        try:
            return await self.manager.claim_task(
                task_id,
                entry_id,
                consumer=self.name,
                lease=self.lease,
                max_attempts=self.max_attempts,
            )
        except RedisTasksError as exc:
            # The entry stays pending with us and is reclaimed after a lease.
            _log(
                logging.WARNING,
                "claim failed",
                "claim_failed",
                task_id=task_id,
                error=type(exc).__name__,
            )
            return None
        finally:
            self._claiming -= 1
            if self._claiming == 0:
                self._claims_settled.set()

    def _admit(
        self, partition: int, task_id: str, claim: Claim | None, reclaimed: bool
    ) -> _Run | None:
        """A run for ``claim``, registered at once (so a shutdown sees it), or ``None``."""
        if claim is None:
            return None
        if claim.outcome is not ClaimOutcome.RUN:
            level = logging.WARNING if claim.outcome is ClaimOutcome.POISONED else logging.INFO
            _log(
                level,
                f"task not run: {claim.outcome.value}",
                f"claim_{claim.outcome.value}",
                task_id=task_id,
                reclaimed=reclaimed,
            )
            return None
        assert claim.origin is not None
        execution = TaskExecution(
            self.manager,
            task_id,
            origin=claim.origin,
            payload=claim.payload,
            attempt=claim.attempt,
            fence=claim.fence,
            input_poll=self._input_poll,
        )
        run = _Run(execution, partition, time.monotonic() + self.lease.total_seconds())
        self._runs.add(run)
        # A task handed back and claimed again by this worker has two runs
        # for a while; hints and lookups go to the newest.
        self._latest[task_id] = run
        return run

    def _launch(self, run: _Run) -> None:
        """Start ``run``'s handler now, in the caller's step.

        Its first step is then scheduled before whatever the caller does next
        (a reader's next claim, say), and not one task hop later: pickup latency.
        """
        execution = run.execution
        _log(
            logging.INFO,
            "task started",
            "task_started",
            task_id=execution.task_id,
            fence=execution.fence,
            attempt=execution.attempt,
        )
        # One future to wait on, not a waiter task plus asyncio.wait: this runs
        # for every task, and the profile showed the difference.
        wake = run.wake = asyncio.get_running_loop().create_future()
        handler = run.handler = asyncio.ensure_future(self.handler(execution))
        handler.add_done_callback(lambda _: _resolve(wake))

    async def _supervise(self, run: _Run) -> None:
        execution = run.execution
        fields = {
            "task_id": execution.task_id,
            "fence": execution.fence,
            "attempt": execution.attempt,
        }
        handler, wake = run.handler, run.wake
        assert handler is not None
        assert wake is not None
        await wake
        if run.abandoned is not None:
            handler.cancel()
            # A handler that swallows CancelledError must not hold up shutdown: its
            # late writes are refused by the fence anyway.
            await asyncio.wait({handler}, timeout=self.manager.timeout)
            if run.abandoned == "shutdown":
                await self._hand_back(run)
            return
        if handler.cancelled():
            if execution.cancelled.is_set():
                await self._finish(run, "cancel", None)
            else:
                _log(
                    logging.ERROR,
                    "handler raised CancelledError without a cancellation "
                    "request; failing the task",
                    "handler_cancelled_itself",
                    **fields,
                )
                await self._finish(run, "fail", INTERNAL_ERROR)
            return
        exc = handler.exception()
        if isinstance(exc, TaskFailed):
            await self._finish(run, "fail", exc.error)
        elif exc is not None:
            _log(
                logging.ERROR,
                "handler raised",
                "handler_error",
                exception=type(exc).__name__,
                where=_frames(exc),
                **fields,
            )
            await self._finish(run, "fail", INTERNAL_ERROR)
        else:
            await self._finish(run, "complete", handler.result())

    def _abandon(self, run: _Run, reason: str) -> None:
        """Stop the handler of ``run``; its outcome will not be written."""
        if run.abandoned is None:
            run.abandoned = reason
            if run.wake is not None:
                _resolve(run.wake)

    async def _hand_back(self, run: _Run) -> None:
        execution = run.execution
        try:
            async with asyncio.timeout(self.manager.timeout):
                await self.manager.release_task(execution.task_id, fence=execution.fence)
            _log(
                logging.INFO,
                "task handed back",
                "task_released",
                task_id=execution.task_id,
                fence=execution.fence,
            )
        except RedisTasksError as exc:
            # Not handed back: the lease runs out and another worker reclaims it.
            _log(
                logging.WARNING,
                "hand back failed",
                "release_failed",
                task_id=execution.task_id,
                error=type(exc).__name__,
            )

    async def _finish(self, run: _Run, how: str, outcome: Any) -> None:
        run.finishing = True
        self._release_slot(run)
        execution = run.execution
        fields = {
            "task_id": execution.task_id,
            "fence": execution.fence,
            "attempt": execution.attempt,
        }
        delay = 0.05
        while True:
            try:
                if how == "complete":
                    await self.manager.complete_task(
                        execution.task_id, outcome, fence=execution.fence
                    )
                elif how == "fail":
                    assert isinstance(outcome, JsonRpcError)
                    await self.manager.fail_task(execution.task_id, outcome, fence=execution.fence)
                else:
                    await self.manager.cancel_task(execution.task_id, fence=execution.fence)
            except ValidationError as exc:
                # The handler returned something we cannot store (not JSON, too big).
                _log(
                    logging.ERROR,
                    "handler result refused",
                    "result_invalid",
                    error=type(exc).__name__,
                    **fields,
                )
                how, outcome = "fail", INTERNAL_ERROR
                continue
            except LeaseLostError:
                _log(
                    logging.WARNING,
                    "lease lost: another worker owns the task; outcome dropped",
                    "lease_lost",
                    **fields,
                )
            except TaskTerminalError:
                _log(
                    logging.INFO,
                    "task already terminal; outcome dropped",
                    "already_terminal",
                    **fields,
                )
            except TaskNotFoundError:
                _log(logging.INFO, "task expired before it finished", "task_expired", **fields)
            except ReplicationError:
                # Recorded on the primary; its replicas did not confirm in time. Not
                # retried: a shard may stay short of replicas for a while.
                _log(
                    logging.WARNING,
                    "outcome recorded but not confirmed by replicas",
                    "outcome_unconfirmed",
                    **fields,
                )
            except BackendError as exc:
                if time.monotonic() > run.lease_until:
                    _log(
                        logging.WARNING,
                        "could not record the outcome within the lease; "
                        "another worker will run the task again",
                        "finish_abandoned",
                        error=type(exc).__name__,
                        **fields,
                    )
                    return
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            except RedisTasksError as exc:
                # Unexpected (an InternalError): nothing was written; the lease runs
                # out and another worker runs the task again.
                _log(
                    logging.ERROR,
                    "could not record the outcome",
                    "finish_failed",
                    error=type(exc).__name__,
                    **fields,
                )
            else:
                _log(logging.INFO, _DONE[how], f"task_{how}", **fields)
            return

    # -- leases ----------------------------------------------------------------------

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self._renew_every)
            runs = [r for r in self._runs if r.abandoned is None and not r.finishing]
            if runs:
                await asyncio.gather(*(self._renew(r) for r in runs))

    async def _renew(self, run: _Run) -> None:
        if run.renewing or run.finishing or run.abandoned is not None:
            return
        run.renewing = True
        execution = run.execution
        asked_at = time.monotonic()
        try:
            cancel = await self.manager.renew_lease(
                execution.task_id, fence=execution.fence, consumer=self.name, lease=self.lease
            )
        except (LeaseLostError, TaskNotFoundError, TaskTerminalError) as exc:
            if run.finishing:
                return  # the handler's own outcome was written meanwhile
            _log(
                logging.WARNING,
                "lease ended; stopping the handler",
                "lease_ended",
                task_id=execution.task_id,
                fence=execution.fence,
                reason=type(exc).__name__,
            )
            self._abandon(run, "lease")
            return
        except BackendError as exc:
            if time.monotonic() > run.lease_until:
                _log(
                    logging.WARNING,
                    "lease ran out while Redis was unreachable; stopping the handler",
                    "lease_expired",
                    task_id=execution.task_id,
                    fence=execution.fence,
                    error=type(exc).__name__,
                )
                self._abandon(run, "lease")
            return
        finally:
            run.renewing = False
        run.lease_until = asked_at + self.lease.total_seconds()
        if cancel and not execution.cancelled.is_set():
            _log(
                logging.INFO,
                "cancellation requested",
                "cancel_requested",
                task_id=execution.task_id,
                fence=execution.fence,
            )
            execution.cancelled.set()

    def _on_event(self, task_id: str) -> None:
        run = self._latest.get(task_id)
        if run is None or run.finishing:
            return
        run.execution._notify_changed()
        # A change may be a cancellation request: renewing now reports it.
        self._spawn(self._renew(run))
