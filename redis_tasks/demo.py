"""The ``redis-tasks demo``: MCP tasks across two server processes and two workers.

Two MCP server processes (uvicorn, ``redis_tasks.demo_app:app``) and two worker
processes (``redis-tasks worker redis_tasks.demo_app:handler``) share one Redis.
A client, alice, calls five slow tools on server A and gets task handles back;
then, on server B, she polls them, answers one task's elicitation and cancels
another, while bob (another principal) cannot see her tasks. A live status table
runs until every task is terminal. It runs on ``--redis-url`` / ``REDIS_URL`` when
given, else on an embedded Redis (fakeredis) served on a free loopback port so
that every process can reach it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from ._redis.manager import RedisTaskManager
from ._version import install_hint
from .testing import embedded_redis, free_port, wait_listening

__all__ = ["EXPECTED", "main", "run_demo"]

#: The tools alice calls, and how each task ends.
EXPECTED = {
    "greet": "completed",
    "report": "completed",
    "export": "cancelled",
    "audit": "failed",
    "index": "completed",
}


def _spawn(argv: list[str], env: dict[str, str], log_path: str) -> subprocess.Popen[bytes]:
    log = open(log_path, "wb")  # noqa: SIM115 - the child owns it for its lifetime
    return subprocess.Popen(  # noqa: S603 - our own interpreter and modules, fixed arguments
        [sys.executable, *argv], env=env, stdout=log, stderr=subprocess.STDOUT
    )


def _start_fleet(
    url: str, prefix: str, log_dir: str
) -> tuple[list[int], list[subprocess.Popen[bytes]]]:
    """Servers A and B (uvicorn) and two workers; returns the server ports and every process."""
    env = {**os.environ, "RT_DEMO_REDIS_URL": url, "RT_DEMO_PREFIX": prefix}
    ports = [free_port(), free_port()]
    processes = [
        _spawn(
            [
                "-m",
                "uvicorn",
                "redis_tasks.demo_app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env,
            os.path.join(log_dir, f"server-{name}.log"),
        )
        for name, port in zip("ab", ports, strict=True)
    ]
    processes += [
        _spawn(
            [
                "-m",
                "redis_tasks",
                "worker",
                "redis_tasks.demo_app:handler",
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
            env,
            os.path.join(log_dir, f"worker-{n}.log"),
        )
        for n in range(2)
    ]
    return ports, processes


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


def _row(name: str, task: dict[str, Any] | None) -> str:
    if task is None:
        return f"  {name:7} {'-':16}"
    status = task["status"]
    detail = task.get("statusMessage", "")
    if status == "completed":
        detail = task["result"]["content"][0]["text"]
    elif status == "failed":
        detail = f"error {task['error']['code']}: {task['error']['message']}"
    elif status == "input_required":
        detail = f"asks: {next(iter(task['inputRequests'].values()))['params']['message']}"
    return f"  {name:7} {status:16} {detail}"


async def run_demo(
    url: str | None = None, out: Callable[[str], None] = print, *, live: bool = False
) -> dict[str, str]:
    """Run the demo; returns each task's final status by name."""
    if url:
        return await _run(url, url, out, live)
    with embedded_redis() as embedded:
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
    try:
        import httpx2
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared.exceptions import MCPError

        from .mcp import TasksClient, cancel_task, get_task, update_task
    except ImportError:
        raise SystemExit(f"the demo needs the 'mcp' extra: {install_hint('mcp')}") from None

    ports, processes = _start_fleet(url, prefix, log_dir)
    finals: dict[str, str] = {}
    try:
        for port, process in zip(ports, processes, strict=False):
            wait_listening(port, process)
        out(f"  servers A and B on ports {ports[0]} and {ports[1]}, 2 workers (logs in {log_dir})")

        def client(port: int, token: str) -> Client:
            http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
            endpoint = f"http://127.0.0.1:{port}/mcp"
            return Client(
                streamable_http_client(endpoint, http_client=http), extensions=[TasksClient()]
            )

        async with (
            client(ports[0], "alice") as on_a,
            client(ports[1], "alice") as on_b,
            client(ports[1], "bob") as bob,
        ):
            ids: dict[str, str] = {}
            for name in EXPECTED:
                created: Any = await on_a.session.call_tool(name, {}, allow_claimed=True)
                ids[name] = created.task_id
            out(f"  alice called {len(ids)} tools on server A: each answered with a task")
            try:
                await get_task(bob.session, ids["greet"])
                out("  bob asks server B for alice's greet task: FOUND")
            except MCPError as exc:
                out(f"  bob asks server B for alice's greet task: not found ({exc.code})")
            out("  alice polls server B:")
            finals = await _poll(on_b, ids, out, live, get_task, update_task, cancel_task)
    finally:
        _stop_workers(processes)
    return finals


async def _poll(
    client: Any,
    ids: dict[str, str],
    out: Callable[[str], None],
    live: bool,
    get_task: Any,
    update_task: Any,
    cancel_task: Any,
) -> dict[str, str]:
    table = _Table(out, live)
    answered = cancelled = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        tasks = {name: await get_task(client.session, task_id) for name, task_id in ids.items()}
        table.show([_row(name, task) for name, task in tasks.items()])
        greet, export = tasks["greet"], tasks["export"]
        if not answered and greet["status"] == "input_required":
            key = next(iter(greet["inputRequests"]))
            answer = {"action": "accept", "content": {"name": "Ada"}}
            await update_task(client.session, ids["greet"], {key: answer})
            answered = True
        if not cancelled and "batch 3" in export.get("statusMessage", ""):
            await cancel_task(client.session, ids["export"])
            cancelled = True
        if all(task["status"] in ("completed", "failed", "cancelled") for task in tasks.values()):
            out("  on server B, alice answered greet's question (name: Ada) and cancelled export")
            return {name: task["status"] for name, task in tasks.items()}
        await asyncio.sleep(0.1)
    return {}


def main(url: str | None = None) -> int:
    """Entry point of ``redis-tasks demo``."""
    finals = asyncio.run(
        run_demo(url or os.environ.get("REDIS_URL") or None, live=sys.stdout.isatty())
    )
    ok = finals == EXPECTED
    print("demo finished" if ok else f"demo ended unexpectedly: {finals}")
    return 0 if ok else 1
