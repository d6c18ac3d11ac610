"""The ``redis-tasks demo``: the task manager and a two-process worker fleet at work.

It creates a few tasks the way an MCP server would, starts two worker processes
(``redis-tasks worker redis_tasks.demo:handler``), answers a task's input request
and cancels another as a client would, and shows a live status table until every
task is terminal. It runs on ``--redis-url`` / ``REDIS_URL`` when given, else on an
embedded Redis (fakeredis) served on a free loopback port so that the worker
processes can reach it.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from ._execution import TaskExecution, TaskFailed
from ._models import (
    InputRequest,
    JsonRpcError,
    RequestContext,
    Task,
    TaskRequestContext,
    TaskUpdateContext,
)
from ._origin import TaskOrigin
from ._redis import RedisTaskManager
from ._status import TaskStatus

__all__ = ["handler", "main", "run_demo"]

ALICE = RequestContext("/mcp", "alice")
BOB = RequestContext("/mcp", "bob")
STEP = 0.25  # seconds per unit of simulated work

#: name -> (what the handler does, how many steps of work)
JOBS: dict[str, tuple[str, int]] = {
    "greet": ("ask", 2),
    "report": ("work", 6),
    "export": ("until_cancelled", 0),
    "audit": ("fail", 3),
    "index": ("work", 8),
}
EXPECTED = {
    "greet": "completed",
    "report": "completed",
    "export": "cancelled",
    "audit": "failed",
    "index": "completed",
}


async def handler(execution: TaskExecution) -> dict[str, Any]:
    """The demo's task handler (runs in the worker processes)."""
    job = json.loads(execution.payload)
    kind, steps = job["kind"], job["steps"]
    for step in range(steps):
        await execution.report(f"step {step + 1} of {steps}")
        await asyncio.sleep(STEP)
    if kind == "ask":
        answers = await execution.request_input(
            {
                "name": InputRequest(
                    method="elicitation/create",
                    params={
                        "mode": "form",
                        "message": "Please enter your name.",
                        "requestedSchema": {
                            "type": "object",
                            "properties": {"name": {"type": "string"}},
                        },
                    },
                )
            },
            "waiting for your name",
        )
        name = answers["name"].get("content", {}).get("name", "stranger")
        return {"content": [{"type": "text", "text": f"Hello, {name}!"}], "isError": False}
    if kind == "until_cancelled":
        beat = 0
        while not execution.cancelled.is_set():
            beat += 1
            await execution.report(f"exporting, batch {beat}")
            try:
                await asyncio.wait_for(execution.cancelled.wait(), STEP * 2)
            except TimeoutError:
                continue
        raise asyncio.CancelledError  # honour the client's cancellation
    if kind == "fail":
        raise TaskFailed(JsonRpcError(code=-32603, message="audit source unavailable"))
    return {"content": [{"type": "text", "text": f"{steps} steps done"}], "isError": False}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def _embedded_redis() -> Iterator[str]:
    """An in-process Redis (fakeredis with Lua) served on a free loopback port."""
    try:
        from fakeredis import TcpFakeServer
    except ImportError:
        raise SystemExit(
            "the embedded Redis needs the 'embedded' extra: pip install 'redis-tasks[embedded]'"
            " (or set REDIS_URL)"
        ) from None
    port = _free_port()
    server = TcpFakeServer(("127.0.0.1", port))
    thread = threading.Thread(target=server.serve_forever, name="embedded-redis", daemon=True)
    thread.start()
    try:
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.shutdown()
        server.server_close()


def _start_workers(url: str, prefix: str, log_dir: str) -> list[subprocess.Popen[bytes]]:
    workers = []
    for n in range(2):
        log = open(os.path.join(log_dir, f"worker-{n}.log"), "wb")  # noqa: SIM115
        workers.append(
            subprocess.Popen(  # noqa: S603 - our own interpreter and module, fixed arguments
                [
                    sys.executable,
                    "-m",
                    "redis_tasks",
                    "worker",
                    "redis_tasks.demo:handler",
                    "--redis-url",
                    url,
                    "--prefix",
                    prefix,
                    "--concurrency",
                    "4",
                    "--lease",
                    "5",
                    "--name",
                    f"demo-worker-{n}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        )
    return workers


def _stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    for worker in workers:
        try:
            worker.wait(timeout=15)
        except subprocess.TimeoutExpired:
            worker.kill()


class _Table:
    """The live status table: redrawn in place on a terminal; elsewhere (a log, a
    pipe) each row is printed when it changes."""

    def __init__(self, out: Callable[[str], None], live: bool) -> None:
        self.out = out
        self.live = live
        self.last: list[str] = []
        self.started = time.monotonic()

    def show(self, rows: list[str]) -> None:
        if rows == self.last:
            return
        if self.live:
            if self.last:
                sys.stdout.write(f"\x1b[{len(self.last)}F\x1b[J")  # to the table's top, clear
            for row in rows:
                self.out(row)
        else:
            elapsed = f"{time.monotonic() - self.started:5.1f}s"
            for n, row in enumerate(rows):
                if n >= len(self.last) or row != self.last[n]:
                    self.out(f"{elapsed}{row}")
        self.last = rows


def _row(name: str, task: Task | None) -> str:
    if task is None:
        return f"  {name:7} {'-':16}"
    wire = task.to_wire()
    detail = wire.get("statusMessage", "")
    if task.status is TaskStatus.COMPLETED:
        detail = wire["result"]["content"][0]["text"]
    elif task.status is TaskStatus.FAILED:
        detail = f"error {wire['error']['code']}: {wire['error']['message']}"
    elif task.status is TaskStatus.INPUT_REQUIRED:
        detail = f"asks: {next(iter(wire['inputRequests'].values()))['params']['message']}"
    return f"  {name:7} {task.status.value:16} {detail}"


async def run_demo(
    url: str | None = None, out: Callable[[str], None] = print, *, live: bool = False
) -> dict[str, str]:
    """Run the demo; returns each task's final status by name."""
    if url:
        return await _run(url, url, out, live)
    with _embedded_redis() as embedded:
        return await _run(
            embedded, "embedded Redis (fakeredis); set REDIS_URL for a real one", out, live
        )


async def _run(url: str, where: str, out: Callable[[str], None], live: bool) -> dict[str, str]:
    prefix = f"demo-{uuid.uuid4().hex[:8]}"
    out(f"redis-tasks demo on {where}")
    with tempfile.TemporaryDirectory(prefix="redis-tasks-demo-") as log_dir:
        async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
            try:
                return await _story(manager, url, prefix, log_dir, out, live)
            finally:
                # Leave nothing behind on the operator's Redis.
                keys = [
                    k
                    async for k in manager.client.scan_iter(
                        match=manager.keyspace.pattern(), count=500
                    )
                ]
                if keys:
                    await manager.client.delete(*keys)


async def _story(
    manager: RedisTaskManager,
    url: str,
    prefix: str,
    log_dir: str,
    out: Callable[[str], None],
    live: bool,
) -> dict[str, str]:
    ids: dict[str, str] = {}
    for name, (kind, steps) in JOBS.items():
        origin = TaskOrigin.from_persisted_state({"tool": name, "arguments": {}})
        task = await manager.create_task(
            ALICE,
            origin,
            payload=json.dumps({"kind": kind, "steps": steps}).encode(),
            ttl=timedelta(minutes=10),
        )
        ids[name] = task.task_id
    out(f"  created {len(ids)} tasks for alice; starting 2 worker processes (logs in {log_dir})")
    bob_sees = await manager.find_task(TaskRequestContext(BOB, ids["greet"]))
    out(f"  bob asks for alice's greet task: {'not found' if bob_sees is None else 'FOUND'}")
    workers = _start_workers(url, prefix, log_dir)
    table = _Table(out, live)
    answered = cancelled = False
    deadline = time.monotonic() + 60
    finals: dict[str, str] = {}
    try:
        while time.monotonic() < deadline:
            tasks = {
                n: await manager.find_task(TaskRequestContext(ALICE, t)) for n, t in ids.items()
            }
            table.show([_row(n, t) for n, t in tasks.items()])
            greet, export = tasks["greet"], tasks["export"]
            if not answered and greet and greet.status is TaskStatus.INPUT_REQUIRED:
                await manager.update_task(
                    TaskUpdateContext(
                        ALICE,
                        ids["greet"],
                        {"name": {"action": "accept", "content": {"name": "Ada"}}},
                    )
                )
                answered = True
            if (
                not cancelled
                and export
                and export.status_message
                and "batch 3" in export.status_message
            ):
                await manager.request_cancellation(TaskRequestContext(ALICE, ids["export"]))
                cancelled = True
            if all(t is not None and t.is_terminal for t in tasks.values()):
                finals = {n: t.status.value for n, t in tasks.items() if t is not None}
                break
            await asyncio.sleep(0.1)
    finally:
        _stop_workers(workers)
    if answered:
        out("  the client answered greet's question (name: Ada) and cancelled export")
    return finals


def main(url: str | None = None) -> int:
    """Entry point of ``redis-tasks demo``."""
    finals = asyncio.run(
        run_demo(url or os.environ.get("REDIS_URL") or None, live=sys.stdout.isatty())
    )
    ok = finals == EXPECTED
    print("demo finished" if ok else f"demo ended unexpectedly: {finals}")
    return 0 if ok else 1
