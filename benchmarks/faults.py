"""Faults under load: Redis paused, connections killed and the server restarted while the
lifecycle load runs at full speed. No task may be lost or completed twice, and every call
must end within its timeout.

Usage:
    python -m benchmarks.faults                        # 120 s on a private redis-server
    python -m benchmarks.faults --seconds 30 --json /tmp/faults.json
    python -m benchmarks.faults --redis-url redis://127.0.0.1:6379/0   # no restarts there

The load is the ``lifecycle`` scenario's, with no pauses of its own: ``--clients``
coroutines each create a task through one :class:`RedisTaskManager` (every call bounded by
``--timeout``), follow it to terminal (``find_task``, woken by the event publisher) and
start the next. ``--workers`` real ``redis-tasks worker`` processes run the tasks with
:func:`handler`, which records its run (its fence, in a set beside the task) before it
returns ``{fence, pid, attempt}``.

While the load runs, faults are injected in turn, ``--every`` seconds apart and at least
``--gap`` seconds after the previous one healed (the first after ``--warmup`` seconds):

- ``pause_all``: ``CLIENT PAUSE <ms> ALL``, alternately 1.5x and 0.5x the timeout long;
- ``kill``: ``CLIENT KILL TYPE normal`` (every client connection, the workers' included);
- ``pause_write``: ``CLIENT PAUSE <ms> WRITE``, alternately 0.5x and 1.5x the timeout;
- ``restart``: the server stopped, alternately by SIGKILL and SIGTERM, and started again
  on the same port and data directory; its append-only file is fsynced on every write
  (``appendfsync always``), so every acknowledged write survives. Only on the private
  server: a Redis given with ``--redis-url`` is not ours to restart;
- ``pause_write_kill``: a write pause of twice the timeout, and every connection killed
  three quarters of a timeout into it: the calls waiting on the pause fail, are retried,
  and wait on the pause again.

After the last fault the load goes on for ``--recovery`` seconds and stops creating. The
harness waits (on conditions, at most ``--settle`` seconds) until every stored task is
terminal, then checks the promises:

- no task lost: every task whose create returned is found and ends terminal, and so does
  every task whose create raised but was stored all the same (an *ambiguous* outcome,
  counted: the caller cannot tell, and the work still runs);
- none completed twice: the workers' logs record at most one accepted completion per
  task, for the fence of the stored result. Handlers that ran more than once (at-least-once
  execution, after a lease ran out during a fault: the ``--lease``, 3 s, is shorter than
  the longest pauses on purpose) are counted as re-runs, which is allowed; every task ends
  ``completed``, since the handler never fails;
- every call honours its timeout: each create and find returned or raised within
  ``--timeout`` plus ``--slack`` seconds (the slack covers this process's event-loop lag,
  measured and reported), and anything it raised was a ``BackendError``;
- workers and managers recover by themselves: the worker processes are alive, each ran a
  task created after the last fault healed, creates succeed again after every fault, the
  load manager's event tail delivers again after the last one, and no worker logged an
  error.

It prints a summary and exits 1 if any promise broke; ``--json PATH`` writes every figure.
The faults hit every client of the server: give ``--redis-url`` only for a Redis of your
own. No URL, origin or payload is printed; worker logs (task IDs, fences) stay in a
temporary directory (``--keep-logs DIR`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import functools
import itertools
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Final, TypeVar

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from redis_tasks import (
    BackendError,
    RedisTaskManager,
    Task,
    TaskExecution,
    TaskRequestContext,
    TaskStatus,
)
from redis_tasks._bench._adapter import ORIGIN, WHO, delete_prefix
from redis_tasks._bench._progress import Progress, percentile
from redis_tasks._ids import parse_task_id
from redis_tasks._redis.keys import KeySpace
from redis_tasks.testing import RedisServer, start_redis_server

__all__ = [
    "KINDS",
    "Fault",
    "Injector",
    "Load",
    "LogCounter",
    "Op",
    "PrivateRedis",
    "Settings",
    "WorkerLogs",
    "WorkerProcess",
    "handler",
    "main",
    "run_faults",
    "runs_key",
    "start_worker",
    "summary",
]

T = TypeVar("T")

#: Every fault kind, in the order the schedule injects them (then round again).
KINDS: Final = ("pause_all", "kill", "pause_write", "restart", "pause_write_kill")
#: The checkout: workers run from here, so they import this module's handler.
ROOT: Final = Path(__file__).resolve().parent.parent
#: Worker log events that record an accepted completion (as tests/fleet.py counts them).
COMPLETED: Final = ("task_complete", "outcome_unconfirmed")
_BACKOFF: Final = 0.05  # a client's pause after a failed call: as a real client would
_WAKE: Final = 0.05  # longest wait for an event before polling again (lifecycle's bound)
_CHUNK: Final = 500  # lookups in flight at once while checking


# -- the workers' side ---------------------------------------------------------------


@functools.cache
def _keyspace(prefix: str) -> KeySpace:
    return KeySpace(prefix)


def runs_key(prefix: str, task_id: str) -> str:
    """The set of fences whose handler ran for ``task_id``.

    It carries the task's partition tag, so it lives in the task's slot, and starts
    with the prefix's pattern, so :func:`delete_prefix` removes it with the rest.
    """
    partition = parse_task_id(task_id)
    if partition is None:
        raise ValueError("not a task ID")
    return f"{_keyspace(prefix).tag(partition)}:faults-runs:{task_id}"


_handler_client: Redis | None = None


def _handler_redis() -> Redis:
    global _handler_client
    if _handler_client is None:
        timeout = float(os.environ["FAULTS_TIMEOUT"])
        _handler_client = Redis.from_url(
            os.environ["REDIS_URL"], socket_timeout=timeout, socket_connect_timeout=timeout
        )
    return _handler_client


async def handler(execution: TaskExecution) -> dict[str, Any]:
    """The workers' handler (``benchmarks.faults:handler``): record the run, then complete.

    The run is recorded first (``SADD`` of its fence to :func:`runs_key`), so every stored
    result names a recorded run. Both calls are idempotent and retried until they succeed:
    a fault must not fail the task, and if the lease runs out meanwhile the worker stops
    this handler and another runs the task. Configured by the worker's environment:
    ``REDIS_URL``, ``FAULTS_PREFIX``, ``FAULTS_TIMEOUT``, ``FAULTS_TTL_MS`` and
    ``FAULTS_HANDLER_MS`` (how long the "work" takes).
    """
    client = _handler_redis()
    key = runs_key(os.environ["FAULTS_PREFIX"], execution.task_id)
    timeout = float(os.environ["FAULTS_TIMEOUT"])
    delay = _BACKOFF
    while True:
        try:
            async with asyncio.timeout(timeout), client.pipeline(transaction=True) as pipe:
                pipe.sadd(key, execution.fence)
                # The record expires with its task, so nothing outlives the run.
                pipe.pexpire(key, int(os.environ["FAULTS_TTL_MS"]))
                await pipe.execute()  # one round trip, applied whole or not at all
            break
        except Exception:  # any failure of these calls (a fault): try again
            await asyncio.sleep(delay)
            delay = min(delay * 2, 1.0)
    work_ms = float(os.environ.get("FAULTS_HANDLER_MS", "0"))
    if work_ms > 0:
        await asyncio.sleep(work_ms / 1000)
    return {"fence": execution.fence, "pid": os.getpid(), "attempt": execution.attempt}


# -- settings and records --------------------------------------------------------------


@dataclass(frozen=True)
class Settings:
    """How long and how hard the run goes, and how faults are spaced (the CLI's options)."""

    seconds: float = 120.0  # the load, faults included
    clients: int = 32
    workers: int = 2
    concurrency: int = 32
    timeout: float = 2.0  # RedisTaskManager.from_url(timeout=...) here and in the workers
    slack: float = 1.0
    # Shorter than the longest pauses, so some leases run out during a fault and their
    # tasks run again: the re-runs the fencing must keep to one completion.
    lease: float = 3.0
    warmup: float = 3.0  # load without faults first
    every: float = 4.0  # seconds between fault starts
    gap: float = 1.0  # at least this long after a fault healed before the next
    recovery: float = 10.0  # load without faults after the last one
    settle: float = 120.0  # bound on waiting for every task to end
    handler_ms: float = 5.0
    ttl: float = 3600.0
    fsync: str = "always"  # the private server's appendfsync

    @property
    def limit(self) -> float:
        """The longest a call may take: its timeout plus the stated slack."""
        return self.timeout + self.slack


@dataclass(slots=True)
class Op:
    """One timed client call."""

    kind: str  # "create" or "find"
    began: float  # seconds since the load started
    seconds: float
    outcome: str  # "ok", "backend_error", "none" (find found nothing), or an exception type


@dataclass
class Fault:
    """One injected fault: what, when it started and when it was over (seconds into the load)."""

    kind: str
    at: float
    healed: float
    pause_ms: int = 0
    how: str = ""  # a restart's signal
    recovered_s: float | None = None  # heal until the first create started after it succeeded


@dataclass
class WorkerLogs:
    """What the workers' JSON logs say, counted."""

    events: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # error-level events
    completions: dict[str, list[int]] = field(default_factory=dict)  # task -> fences
    abandoned: set[str] = field(default_factory=set)  # a finish given up after the lease
    unparsed: int = 0  # lines that are not JSON (a traceback would be)

    def read(self, path: Path) -> None:
        """Add the events of the log at ``path``."""
        with path.open("rb") as lines:
            for raw in lines:
                if b'"event": "task_started"' in raw:  # most lines: no need to parse them
                    self.events["task_started"] += 1
                    continue
                if not raw.startswith(b"{"):
                    self.unparsed += bool(raw.strip())
                    continue
                entry = json.loads(raw)
                event = str(entry.get("event") or f"{entry.get('logger')}:{entry.get('level')}")
                self.events[event] += 1
                if entry.get("level") == "error":
                    self.errors[event] += 1
                task_id = entry.get("task_id")
                if event in COMPLETED:
                    self.completions.setdefault(task_id, []).append(int(entry["fence"]))
                elif event == "finish_abandoned":
                    self.abandoned.add(task_id)


# -- the server, the workers --------------------------------------------------------------


class PrivateRedis:
    """A private redis-server with an append-only file, restartable in place.

    ``appendfsync always`` (the default) has every write on disk before it is
    acknowledged, so every acknowledged write survives a restart, even of the machine.
    """

    def __init__(self, server: RedisServer, options: tuple[str, ...]) -> None:
        self.server = server
        self.options = options

    @classmethod
    async def start(cls, directory: Path, fsync: str = "always") -> PrivateRedis:
        """Start one in ``directory`` on a free loopback port."""
        options = ("--appendonly", "yes", "--appendfsync", fsync)
        server = await asyncio.to_thread(
            start_redis_server, directory, *options, startup_timeout=60
        )
        return cls(server, options)

    @property
    def url(self) -> str:
        """Its URL (the same across restarts: same port)."""
        return self.server.url

    async def restart(self, how: signal.Signals) -> None:
        """Stop it with signal ``how``; start it again on the same port and data."""
        process = self.server.process
        process.send_signal(how)
        await asyncio.to_thread(process.wait, 60)
        self.server = await asyncio.to_thread(
            start_redis_server,
            self.server.directory,
            *self.options,
            port=self.server.port,
            startup_timeout=60,
        )

    def stop(self) -> None:
        """Stop it for good."""
        self.server.stop()


@dataclass
class WorkerProcess:
    """One ``redis-tasks worker benchmarks.faults:handler`` process and its log."""

    process: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        """Its process ID (the ``pid`` in the results of the tasks it ran)."""
        return self.process.pid

    @property
    def alive(self) -> bool:
        """Whether it is still running."""
        return self.process.returncode is None

    def started(self) -> bool:
        """Whether it logged that it runs."""
        if not self.log_path.exists():
            return False
        with self.log_path.open("rb") as lines:
            return any(b'"worker_started"' in line for line in lines)

    async def stop(self, grace: float) -> int:
        """SIGTERM (a graceful stop); SIGKILL after ``grace`` seconds. Its exit code."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(grace):
                    return await self.process.wait()
            except TimeoutError:
                self.process.kill()
        return await self.process.wait()


async def start_worker(
    url: str, prefix: str, settings: Settings, directory: Path, index: int
) -> WorkerProcess:
    """Start one worker process; its JSON log goes to ``directory``."""
    log_path = directory / f"worker-{index}.log"
    env = {
        **os.environ,
        # The URL travels in the environment, not on a command line others can read.
        "REDIS_URL": url,
        "FAULTS_PREFIX": prefix,
        "FAULTS_TIMEOUT": str(settings.timeout),
        "FAULTS_TTL_MS": str(int(settings.ttl * 1000)),
        "FAULTS_HANDLER_MS": str(settings.handler_ms),
    }
    log = log_path.open("wb")
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "redis_tasks",
            "worker",
            "benchmarks.faults:handler",
            "--prefix",
            prefix,
            "--name",
            f"faults-w{index}",
            "--concurrency",
            str(settings.concurrency),
            "--lease",
            str(settings.lease),
            "--timeout",
            str(settings.timeout),
            "--log-level",
            "info",
            cwd=ROOT,  # the handler's module is found from the checkout
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log,
            # Its own session: a Ctrl-C of the harness reaches it only as our SIGTERM.
            start_new_session=True,
        )
    finally:
        log.close()  # the child has its own copy
    return WorkerProcess(process, log_path)


class LogCounter(logging.Handler):
    """Counts this process's redis-tasks log records by event (or message template).

    The load's manager logs warnings while Redis is away (its event tail retrying);
    counted, they become figures instead of lines between the progress bars. Only the
    template is kept, never the formatted message.
    """

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counts: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()

    def emit(self, record: logging.LogRecord) -> None:
        """Count ``record``."""
        name = str(getattr(record, "event", None) or record.msg)
        self.counts[name] += 1
        if record.levelno >= logging.ERROR:
            self.errors[name] += 1

    @contextlib.contextmanager
    def installed(self) -> Iterator[LogCounter]:
        """Route the ``redis_tasks`` logger here (only) while the block runs."""
        logger = logging.getLogger("redis_tasks")
        saved = logger.handlers[:], logger.propagate, logger.level
        logger.handlers[:] = [self]
        logger.propagate = False
        logger.setLevel(logging.INFO)
        try:
            yield self
        finally:
            logger.handlers[:], logger.propagate = saved[0], saved[1]
            logger.setLevel(saved[2])


async def _until(condition: Callable[[], bool], within: float, what: str) -> None:
    """Return once ``condition()`` holds; raise ``TimeoutError`` after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)  # polling other processes' state: the condition's interval


# -- the load -------------------------------------------------------------------------------


class Load:
    """The lifecycle load: clients creating tasks and following each to terminal."""

    def __init__(self, manager: RedisTaskManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings
        self.t0 = time.monotonic()
        self.creating = True
        self.ops: list[Op] = []
        self.created: dict[str, int] = {}  # task ID -> its create's op number
        self.created_at: dict[str, float] = {}  # task ID -> when its create began
        self.failed_creates: dict[int, str] = {}  # op number -> what the create raised
        self.ran_by: dict[str, int] = {}  # task ID -> the pid in its result, seen terminal
        self.vanished: set[str] = set()  # created, then not found while followed
        self.lags: list[float] = []  # event-loop lag samples, seconds
        self.last_event = -1.0  # when the event publisher last delivered a task ID
        self._numbers = itertools.count()
        self._changed: dict[str, asyncio.Event] = {}

    def on_change(self, task_id: str) -> None:
        """Event-publisher listener: wake the client following ``task_id``."""
        self.last_event = self.now()
        event = self._changed.get(task_id)
        if event is not None:
            event.set()

    def now(self) -> float:
        """Seconds since the load started."""
        return time.monotonic() - self.t0

    async def _timed(self, kind: str, call: Awaitable[T]) -> tuple[Op, T | None]:
        began = time.monotonic()
        value: T | None = None
        try:
            value = await call
            outcome = "ok"
        except BackendError:
            outcome = "backend_error"  # allowed while a fault lasts
        except Exception as exc:  # any other failure breaks a promise; its type is kept
            outcome = type(exc).__name__
        op = Op(kind, began - self.t0, time.monotonic() - began, outcome)
        self.ops.append(op)
        return op, value

    async def client(self) -> None:
        """Create and follow tasks until creating stops."""
        while self.creating:
            await self.once(until_stopped=True)

    async def once(self, *, until_stopped: bool) -> None:
        """Create one task and follow it to terminal (or, with ``until_stopped``, until
        creating stops: the final check follows the rest)."""
        op = next(self._numbers)
        began = self.now()
        call, task = await self._timed(
            "create",
            self.manager.create_task(
                WHO, ORIGIN, ttl=timedelta(seconds=self.settings.ttl), metadata={"op": op}
            ),
        )
        if task is None:
            self.failed_creates[op] = call.outcome
            await asyncio.sleep(_BACKOFF)
            return
        self.created[task.task_id] = op
        self.created_at[task.task_id] = began
        await self._follow(task.task_id, until_stopped)

    async def _follow(self, task_id: str, until_stopped: bool) -> None:
        event = self._changed[task_id] = asyncio.Event()
        ctx = TaskRequestContext(WHO, task_id)
        try:
            while self.creating or not until_stopped:
                event.clear()
                call, found = await self._timed("find", self.manager.find_task(ctx))
                if call.outcome == "ok" and found is None:
                    self.vanished.add(task_id)
                    call.outcome = "none"
                    return
                if found is not None and found.is_terminal:
                    if found.result is not None:
                        self.ran_by[task_id] = int(found.result["pid"])
                    return
                if found is None:  # the call failed: back off, then look again
                    await asyncio.sleep(_BACKOFF)
                    continue
                # The publisher wakes us; the timeout only bounds a missed event.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_WAKE):
                        await event.wait()
        finally:
            del self._changed[task_id]

    async def watch_loop(self) -> None:
        """Sample this process's event-loop lag (how late a short sleep wakes) until cancelled."""
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.05)
            self.lags.append(max(0.0, loop.time() - before - 0.05))


# -- the faults -------------------------------------------------------------------------------


class Injector:
    """Injects the faults in turn on the schedule the module docstring describes."""

    def __init__(
        self, url: str, server: PrivateRedis | None, settings: Settings, load: Load
    ) -> None:
        self.url = url
        self.server = server
        self.settings = settings
        self.load = load
        self.kinds = KINDS if server is not None else tuple(k for k in KINDS if k != "restart")
        self.faults: list[Fault] = []

    def count(self, kind: str) -> int:
        """How many faults of ``kind`` were injected so far."""
        return sum(1 for f in self.faults if f.kind == kind)

    async def run(self, until: float) -> None:
        """Inject faults until ``until`` (seconds into the load) and at least one of each kind."""
        next_at = self.settings.warmup
        for index in itertools.count():
            if self.load.now() >= until and all(self.count(k) for k in self.kinds):
                return
            # Sleeping between injections is the schedule itself, not a wait for a result.
            await asyncio.sleep(max(0.0, next_at - self.load.now()))
            fault = await self._inject(self.kinds[index % len(self.kinds)])
            self.faults.append(fault)
            next_at = max(fault.at + self.settings.every, fault.healed + self.settings.gap)

    async def _admin(self, command: Callable[[Redis], Awaitable[Any]]) -> None:
        """One command on a connection of its own (a kill spares it: SKIPME)."""
        admin = Redis.from_url(self.url, socket_timeout=10, socket_connect_timeout=10)
        try:
            await command(admin)
        finally:
            await admin.aclose()

    async def _inject(self, kind: str) -> Fault:
        timeout = self.settings.timeout
        nth = self.count(kind)
        at = self.load.now()
        if kind in ("pause_all", "pause_write"):
            # One pause shorter than the timeout (calls wait it out), one longer (they
            # time out); pause_all starts with the longer one, pause_write the shorter.
            longer = (nth % 2 == 0) == (kind == "pause_all")
            ms = int(timeout * (1.5 if longer else 0.5) * 1000)
            await self._admin(lambda r: r.client_pause(ms, all=kind == "pause_all"))
            return Fault(kind, at, at + ms / 1000, pause_ms=ms)
        if kind == "kill":
            await self._admin(lambda r: r.client_kill_filter(_type="normal", skipme=True))
            return Fault(kind, at, self.load.now())
        if kind == "pause_write_kill":
            ms = int(timeout * 2 * 1000)
            await self._admin(lambda r: r.client_pause(ms, all=False))
            # CLIENT KILL is no write, so it runs during a write pause (not an ALL one).
            await asyncio.sleep(timeout * 0.75)
            await self._admin(lambda r: r.client_kill_filter(_type="normal", skipme=True))
            return Fault(kind, at, at + ms / 1000, pause_ms=ms)
        assert kind == "restart"
        assert self.server is not None  # restart is only scheduled on a private server
        how = signal.SIGKILL if nth % 2 == 0 else signal.SIGTERM
        await self.server.restart(how)
        return Fault(kind, at, self.load.now(), how=how.name)


# -- the run ----------------------------------------------------------------------------------


async def _find(manager: RedisTaskManager, task_id: str) -> Task | None:
    """``find_task`` for the checks, which run after the faults: a failure is retried."""
    ctx = TaskRequestContext(WHO, task_id)
    for _ in range(20):
        try:
            return await manager.find_task(ctx)
        except BackendError:
            await asyncio.sleep(0.2)
    return await manager.find_task(ctx)


async def _stored_task_ids(manager: RedisTaskManager) -> set[str]:
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


async def _settle(
    manager: RedisTaskManager, ids: set[str], within: float, progress: Progress
) -> tuple[dict[str, Task | None], set[str]]:
    """Wait until every task of ``ids`` is terminal (or not found). The last snapshot of
    each, and those still not terminal after ``within`` seconds."""
    final: dict[str, Task | None] = {}
    pending = set(ids)
    deadline = time.monotonic() + within
    while True:
        order = sorted(pending)
        for start in range(0, len(order), _CHUNK):
            chunk = order[start : start + _CHUNK]
            for task_id, task in zip(
                chunk, await asyncio.gather(*(_find(manager, t) for t in chunk)), strict=True
            ):
                final[task_id] = task
                if task is None or task.is_terminal:
                    pending.discard(task_id)
        progress.update("faults: settle (tasks terminal)", len(ids) - len(pending), len(ids))
        if not pending or time.monotonic() > deadline:
            return final, pending
        await asyncio.sleep(0.2)  # polling the workers' progress: the condition's interval


async def _runs(url: str, prefix: str, ids: list[str]) -> dict[str, set[int]]:
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


async def _recovery_probe(load: Load, pids: set[int], after: float, within: float) -> None:
    """Create tasks until every worker in ``pids`` ran one created after ``after``."""

    def seen() -> set[int]:
        return {pid for t, pid in load.ran_by.items() if load.created_at[t] >= after}

    with contextlib.suppress(TimeoutError):  # the check below reports who stayed idle
        async with asyncio.timeout(within):
            while not pids <= seen():
                # A round of tasks spread over the partitions: every worker reads them all.
                await asyncio.gather(*(load.once(until_stopped=False) for _ in range(16)))


def _op_figures(ops: list[Op], timeout: float, limit: float) -> dict[str, Any]:
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


def _recovered(faults: list[Fault], ops: list[Op]) -> None:
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
    await _recovery_probe(load, pids, last_heal, within=settings.settle)
    watcher.cancel()
    await asyncio.gather(watcher, return_exceptions=True)
    registration.close()

    stored = await _stored_task_ids(manager)
    extra = stored - load.created.keys()
    ops_of_extra: dict[str, int | None] = {}
    for task_id in extra:
        task = await _find(manager, task_id)
        ops_of_extra[task_id] = None if task is None else task.metadata.get("op")
    ambiguous = {t for t, op in ops_of_extra.items() if op in load.failed_creates}
    orphans = extra - ambiguous
    final, stuck = await _settle(manager, stored | load.created.keys(), settings.settle, progress)
    alive = [w.alive for w in workers]
    runs = await _runs(url, manager.prefix, sorted(final))
    exits = [await w.stop(settings.lease + 10) for w in workers]
    logs = WorkerLogs()
    for worker in workers:
        logs.read(worker.log_path)

    statuses = Counter(t.status.value if t else "not_found" for t in final.values())
    lost = sorted(t for t in load.created if final.get(t) is None or t in stuck)
    duplicated = fence_mismatch = unwitnessed = re_run = 0
    for task_id, task in final.items():
        recorded = runs.get(task_id, set())
        re_run += len(recorded) > 1
        if task is None or task.status is not TaskStatus.COMPLETED or task.result is None:
            continue
        accepted = logs.completions.get(task_id, [])
        duplicated += len(accepted) > 1
        fence = int(task.result["fence"])
        fence_mismatch += fence not in recorded or any(f != fence for f in accepted)
        unwitnessed += not accepted and task_id not in logs.abandoned
    after_last = Counter(pid for t, pid in load.ran_by.items() if load.created_at[t] >= last_heal)
    _recovered(injector.faults, load.ops)
    ops = _op_figures(load.ops, settings.timeout, settings.limit)
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
            "log_errors": dict(logs.errors),
            "log_unparsed_lines": logs.unparsed,
            "log_events": dict(logs.events.most_common()),
        },
    }
    if server is None:
        await delete_prefix(manager)  # a given Redis: leave nothing behind
    return figures


def _broken(f: dict[str, Any]) -> list[str]:
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
        (workers["log_unparsed_lines"], "non-JSON lines in the worker logs"),
        (sum(f["faults"][k] == 0 for k in kinds), "fault kinds never injected"),
        (int(not manager["events_after_last_fault"]), "event tail silent after the last fault"),
        (sum(manager["log_errors"].values()), "errors in the load manager's log"),
    ]
    return [f"{count} {what}" for count, what in checks if count]


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
        figures["broken"] = _broken(figures)
        figures["ok"] = not figures["broken"]
        return figures
    finally:
        for worker in workers:
            if worker.alive:
                worker.process.kill()
                await worker.process.wait()
        if server is not None:
            await asyncio.to_thread(server.stop)


# -- the command line -----------------------------------------------------------------------


def summary(f: dict[str, Any]) -> Iterator[str]:
    """The human-readable report of the figures ``f``."""
    s, t, w = f["settings"], f["tasks"], f["workers"]
    yield (
        f"{f['load_seconds']} s of load, {s['clients']} clients, {w['count']} workers "
        f"x {s['concurrency']}, timeout {s['timeout']} s (+{s['slack']} s slack), "
        f"lease {s['lease']} s; {f['server']} Redis"
    )
    kinds = ", ".join(f"{k} {n}" for k, n in f["faults"].items())
    yield f"faults injected: {kinds}"
    yield (
        f"recovery: first successful create at most {f['max_recovery_s']} s after a fault "
        f"healed; {f['unrecovered_faults']} faults never recovered from"
    )
    for kind, o in f["ops"].items():
        yield (
            f"{kind}: {o['total']} calls, {o['ok']} ok, {o['backend_error']} BackendError "
            f"({o['timed_out']} of them after the whole timeout), "
            f"{o['none']} not found, unexpected {o['unexpected'] or 0}; "
            f"p50 {o['p50_ms']} ms, p99 {o['p99_ms']} ms, max {o['max_ms']} ms; "
            f"{o['over_limit']} over the limit"
        )
    yield (
        f"max call latency {f['max_latency_ms']} ms vs limit {s['limit_s'] * 1000:.0f} ms; "
        f"{f['ops_over_limit']} calls over it; event-loop lag p99 {f['loop_lag_ms']['p99']} ms, "
        f"max {f['loop_lag_ms']['max']} ms"
    )
    yield (
        f"tasks: {t['created']} created, {t['creates_failed']} creates raised "
        f"({t['ambiguous_persisted']} of them stored anyway), {t['checked']} checked "
        f"{t['statuses']}, {t['lost']} lost, {t['not_terminal']} not terminal, "
        f"{t['duplicated']} completed twice, {t['fence_mismatch']} fence mismatches, "
        f"{t['re_run']} re-run (max {t['max_runs']} runs), {t['abandoned_finishes']} finishes "
        f"abandoned, {t['completed_per_s']} completed/s"
    )
    yield (
        f"workers: alive {w['alive_at_end']}, tasks after the last fault "
        f"{w['tasks_after_last_fault']}, exit codes {w['exit_codes']}, log errors "
        f"{w['log_errors'] or 0}"
    )
    m = f["manager"]
    yield (
        f"load manager: event tail delivering after the last fault: "
        f"{m['events_after_last_fault']}; log {m['log'] or 0}"
    )
    notable = {k: n for k, n in w["log_events"].items() if k not in ("task_started", *COMPLETED)}
    yield f"worker log events: {notable}"
    if f["broken"]:
        yield "BROKEN: " + "; ".join(f["broken"])
    else:
        yield "every promise held"


def main() -> int:
    """``python -m benchmarks.faults``: run, print the summary, exit 1 if a promise broke."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    defaults = Settings()
    parser.add_argument("--redis-url", default=os.environ.get("REDIS_URL"))
    parser.add_argument("--seconds", type=float, default=defaults.seconds)
    parser.add_argument("--clients", type=int, default=defaults.clients)
    parser.add_argument("--workers", type=int, default=defaults.workers)
    parser.add_argument("--concurrency", type=int, default=defaults.concurrency)
    parser.add_argument("--timeout", type=float, default=defaults.timeout, help="call timeout (s)")
    parser.add_argument("--slack", type=float, default=defaults.slack, help="allowed lateness (s)")
    parser.add_argument("--lease", type=float, default=defaults.lease)
    parser.add_argument("--warmup", type=float, default=defaults.warmup)
    parser.add_argument("--every", type=float, default=defaults.every)
    parser.add_argument("--gap", type=float, default=defaults.gap)
    parser.add_argument("--recovery", type=float, default=defaults.recovery)
    parser.add_argument("--settle", type=float, default=defaults.settle)
    parser.add_argument("--handler-ms", type=float, default=defaults.handler_ms)
    parser.add_argument(
        "--appendfsync",
        choices=("always", "everysec", "no"),
        default=defaults.fsync,
        help="the private server's fsync policy (default: always)",
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep-logs", type=Path, default=None, help="copy worker logs here")
    args = parser.parse_args()
    settings = Settings(
        seconds=args.seconds,
        clients=args.clients,
        workers=args.workers,
        concurrency=args.concurrency,
        timeout=args.timeout,
        slack=args.slack,
        lease=args.lease,
        warmup=args.warmup,
        every=args.every,
        gap=args.gap,
        recovery=args.recovery,
        settle=args.settle,
        handler_ms=args.handler_ms,
        fsync=args.appendfsync,
    )
    with tempfile.TemporaryDirectory(prefix="faults-") as scratch:
        result = asyncio.run(
            run_faults(settings, Path(scratch), url=args.redis_url, progress=Progress())
        )
        if args.keep_logs:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for log in Path(scratch).glob("worker-*.log"):
                shutil.copy(log, args.keep_logs / log.name)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    for line in summary(result):
        print(line)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
