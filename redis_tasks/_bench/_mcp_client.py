"""A lean MCP load client: JSON-RPC over streamable HTTP on raw HTTP/1.1 connections.

Standard library only, so it costs little CPU per request (an ``httpx2`` request
took about 0.7 ms of client CPU here, about what the server spends on one) and
runs under any interpreter. The ``mcp`` scenario starts a few of these processes
(``python -m redis_tasks._bench._mcp_client``); each reads its job as one JSON
line on stdin, warms up, prints ``ready``, waits for ``go``, runs, and prints
``result <JSON>``. While it runs it prints ``n <count>`` now and then (done so
far), for the progress bar. Failures print ``error <kind>`` and exit 1.

Jobs (``mode``):

``lifecycle``
    ``concurrency`` callers share ``tasks`` task-tool calls: each ``tools/call``
    answered with a ``CreateTaskResult`` is followed by ``tasks/get`` every
    ``poll_ms`` until the task is terminal (on the next server, so any server
    serves any task). Reports create and create-to-terminal latencies, errors,
    lost tasks (unknown to a later ``tasks/get``, or not terminal within
    ``task_timeout``) and the IDs of a few completed tasks.
``get``
    ``concurrency`` pollers share ``ops`` ``tasks/get`` calls on ``task_ids``
    (completed tasks), round-robin over the servers.
``call``
    The same with ``tools/call`` of the plain tool ``tool``.

The requests go over :class:`~._mcp_connection.Connection` (the wire is
described there).

Replies are read for their status only: no argument, result or error text is
ever printed, just counts and error kinds (``http 500``, ``rpc -32602``, ...).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Final

from ._mcp_connection import Connection, Endpoint, RpcFailure, Wire

__all__ = ["Connection", "Endpoint", "RpcFailure", "main"]

_TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
_PROGRESS_EVERY: Final = 0.1  # seconds between ``n`` lines


@dataclass
class Tally:
    """What one client process counted."""

    errors: dict[str, int] = field(default_factory=dict)
    lost: int = 0
    done: int = 0
    latency_ms: list[float] = field(default_factory=list)
    create_ms: list[float] = field(default_factory=list)
    polls: int = 0
    completed: list[str] = field(default_factory=list)

    def error(self, kind: str) -> None:
        """Count one error of ``kind``."""
        self.errors[kind] = self.errors.get(kind, 0) + 1


class _Job:
    """One client process's share of the load, from its JSON job line."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.mode: str = job["mode"]
        self.endpoints = [Endpoint(*e) for e in job["endpoints"]]
        self.wire = Wire(**job["wire"])
        self.concurrency: int = job["concurrency"]
        self.offset: int = job.get("offset", 0)  # this process's first caller number
        self.ops: int = job["ops"]
        self.tool: str = job["tool"]
        self.poll = job.get("poll_ms", 20) / 1000
        self.timeout: float = job.get("timeout", 30.0)
        self.task_timeout: float = job.get("task_timeout", 60.0)
        self.keep: int = job.get("keep", 0)
        self.task_ids: list[str] = job.get("task_ids", [])
        self.tally = Tally()
        self._counter = itertools.count()

    def reset(self) -> None:
        """Forget the warm-up's counts; the measured run starts from zero."""
        self.tally = Tally()
        self._counter = itertools.count()

    def take(self, limit: int) -> bool:
        """Claim one more operation of ``limit``."""
        return next(self._counter) < limit

    async def connections(self, caller: int) -> list[Connection]:
        """A fresh connection to every server for caller number ``caller``."""
        count = len(self.endpoints)
        conns = [
            Connection(self.endpoints[(caller + i) % count], self.wire, self.timeout)
            for i in range(count)
        ]
        for conn in conns:
            await conn.open()
        return conns

    async def run(self, limit: int) -> None:
        """All callers, until ``limit`` operations were taken."""
        callers = [self._caller(self.offset + i, limit) for i in range(self.concurrency)]
        await asyncio.gather(*callers)

    async def _caller(self, caller: int, limit: int) -> None:
        conns = await self.connections(caller)
        try:
            if self.mode == "lifecycle":
                while self.take(limit):
                    await self._lifecycle(conns)
            else:
                task_id = self.task_ids[caller % len(self.task_ids)] if self.task_ids else None
                while self.take(limit):
                    await self._one_call(conns[0], task_id)
        finally:
            for conn in conns:
                await conn.close()

    async def _reopen(self, conn: Connection) -> None:
        # A timed-out or broken connection is replaced, so one failure costs one call.
        if not conn.is_open:
            try:
                await conn.open()
            except (OSError, TimeoutError, RpcFailure):
                self.tally.error("connect")

    async def _lifecycle(self, conns: list[Connection]) -> None:
        creator, poller = conns[0], conns[-1]
        began = time.perf_counter()
        try:
            created = await creator.call(
                "tools/call", {"name": self.tool, "arguments": {}}, name=self.tool
            )
        except RpcFailure as failure:
            self.tally.error(f"create {failure.kind}")
            await self._reopen(creator)
            self._progress()
            return
        self.tally.create_ms.append((time.perf_counter() - began) * 1000)
        task_id, status = created.get("taskId"), created.get("status")
        if created.get("resultType") != "task" or not isinstance(task_id, str):
            self.tally.error("create not a task")
            self._progress()
            return
        deadline = began + self.task_timeout
        while status not in _TERMINAL:
            if time.perf_counter() > deadline:
                self.tally.lost += 1  # never terminal within the deadline
                self._progress()
                return
            await asyncio.sleep(self.poll)
            try:
                task = await poller.call("tasks/get", {"taskId": task_id}, name=task_id)
            except RpcFailure as failure:
                if failure.kind == "rpc -32602":  # unknown: the task is gone
                    self.tally.lost += 1
                    self._progress()
                    return
                self.tally.error(f"get {failure.kind}")
                await self._reopen(poller)
                continue
            finally:
                self.tally.polls += 1
            status = task.get("status")
        if status == "completed":
            self.tally.latency_ms.append((time.perf_counter() - began) * 1000)
            if len(self.tally.completed) < self.keep:
                self.tally.completed.append(task_id)
        else:
            self.tally.error(f"task {status}")
        self._progress()

    async def _one_call(self, conn: Connection, task_id: str | None) -> None:
        began = time.perf_counter()
        try:
            if self.mode == "get":
                assert task_id is not None
                result = await conn.call("tasks/get", {"taskId": task_id}, name=task_id)
                ok = result.get("status") == "completed"
            else:
                result = await conn.call(
                    "tools/call", {"name": self.tool, "arguments": {}}, name=self.tool
                )
                ok = bool(result.get("content")) and not result.get("isError")
        except RpcFailure as failure:
            self.tally.error(failure.kind)
            await self._reopen(conn)
        else:
            self.tally.latency_ms.append((time.perf_counter() - began) * 1000)
            if not ok:
                self.tally.error("unexpected result")
        self._progress()

    _shown = 0.0

    def _progress(self) -> None:
        self.tally.done += 1
        now = time.monotonic()
        if now - self._shown >= _PROGRESS_EVERY:
            self._shown = now
            _say(f"n {self.tally.done}")


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def _stdin() -> asyncio.StreamReader:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


async def _main() -> int:
    lines = await _stdin()
    job = _Job(json.loads(await lines.readline()))
    # Warm-up: every caller makes one round (connections, the servers' first
    # requests, the workers' first tasks); its counts are dropped.
    await job.run(job.concurrency)
    warm = job.tally
    if warm.errors or warm.lost:
        kinds = sorted(warm.errors) or ["lost"]
        _say(f"error warm-up {kinds[0]}")
        return 1
    job.reset()
    _say("ready")
    if (await lines.readline()).strip() != b"go":
        return 1
    cpu, started = time.process_time(), time.time()
    await job.run(job.ops)
    ended, cpu = time.time(), time.process_time() - cpu
    tally = job.tally
    result = {
        "started": started,
        "ended": ended,
        "cpu": cpu,
        "done": tally.done,
        "errors": tally.errors,
        "lost": tally.lost,
        "polls": tally.polls,
        "latency_ms": [round(v, 3) for v in tally.latency_ms],
        "create_ms": [round(v, 3) for v in tally.create_ms],
        "completed": tally.completed,
    }
    _say("result " + json.dumps(result, separators=(",", ":")))
    return 0


def main() -> int:
    """Run one client process (see the module docstring)."""
    try:
        return asyncio.run(_main())
    except KeyboardInterrupt:
        return 1


if __name__ == "__main__":
    sys.exit(main())
