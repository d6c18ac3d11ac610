"""Two MCP server processes (uvicorn) and one worker process on one redis-server.

The servers serve ``tests.support.mcp_app:app`` (with the tasks fast path installed,
unless told otherwise) and the worker runs ``tests.support.mcp_app:handler``, all under
one key prefix; or another app and worker target (the FastMCP app's, say). Clients are
the SDK's own ``Client`` over streamable HTTP, authenticated as ``alice`` or ``bob``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.extension import ClientExtension
from mcp.client.streamable_http import streamable_http_client

from redis_tasks.mcp import TasksClient, get_task
from redis_tasks.testing import free_port, wait_listening

from .helpers import stop_processes, wait_until

ROOT = Path(__file__).resolve().parents[2]

#: Planted in a tool's arguments and exception text: it must never reach a log line.
SECRET = "s3cr3t-marker-7f1e"


@dataclass
class McpStack:
    """The processes, their logs and how to reach them."""

    url: str
    prefix: str
    directory: Path
    timeout: float = 5.0  # every process's Redis deadline
    #: The ASGI app the servers serve, and the worker's target after ``redis-tasks worker``.
    app: str = "tests.support.mcp_app:app"
    worker_target: Sequence[str] = ("tests.support.mcp_app:handler",)
    ports: list[int] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def _spawn(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = self.directory / f"{name}.log"
        env = {
            **os.environ,
            "RT_TEST_REDIS_URL": self.url,
            "RT_TEST_PREFIX": self.prefix,
            "RT_TEST_TIMEOUT": str(self.timeout),
            **(env or {}),
        }
        process = subprocess.Popen(
            [sys.executable, *argv],
            cwd=ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        self.processes.append(process)
        self.logs.append(log)
        return process

    def start_server(self, name: str, env: Mapping[str, str] | None = None) -> int:
        """Start one more server (``env``: the app's ``RT_TEST_*`` options); its index."""
        port = free_port()
        process = self._spawn(
            name,
            [
                "-m",
                "uvicorn",
                self.app,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            {"RT_TEST_FAST_PATH": "1", **(env or {})},
        )
        self.ports.append(port)
        wait_listening(port, process)
        return len(self.ports) - 1

    def start(self, worker_options: Sequence[str] = ()) -> None:
        """Start server A, server B and one worker (``worker_options``: more of
        ``redis-tasks worker``'s); return once the servers listen."""
        for name in ("server-a", "server-b"):
            self.start_server(name)
        self.start_worker(options=worker_options)

    def start_worker(
        self,
        env: Mapping[str, str] | None = None,
        options: Sequence[str] = (),
        name: str = "worker",
    ) -> subprocess.Popen[bytes]:
        """Start one worker process (``env``: the app's ``RT_TEST_*`` options; ``options``:
        more of ``redis-tasks worker``'s; ``name``: its log's, ``<name>.log``)."""
        return self._spawn(
            name,
            [
                "-m",
                "redis_tasks",
                "worker",
                *self.worker_target,
                "--redis-url",
                self.url,
                "--prefix",
                self.prefix,
                "--lease",
                "10",
                "--timeout",
                str(self.timeout),
                *options,
            ],
            env,
        )

    def stop(self) -> None:
        """Terminate every process (SIGTERM: graceful) and wait for it."""
        stop_processes(self.processes)

    def log_text(self) -> str:
        """Everything every process wrote so far."""
        return "".join(log.read_text(errors="replace") for log in self.logs)

    def endpoint(self, server: int) -> str:
        """The MCP endpoint URL of server 0 (A) or 1 (B)."""
        return f"http://127.0.0.1:{self.ports[server]}/mcp"

    @asynccontextmanager
    async def client(
        self,
        server: int,
        token: str = "alice",
        extensions: Sequence[ClientExtension] | None = None,
    ) -> AsyncIterator[Client]:
        """An SDK client of ``server``, declaring the tasks extension unless told otherwise."""
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
        async with (
            http,
            Client(
                streamable_http_client(self.endpoint(server), http_client=http),
                extensions=list(extensions) if extensions is not None else [TasksClient()],
            ) as client,
        ):
            yield client

    async def rpc(
        self, server: int, method: str, params: dict[str, Any], token: str = "alice"
    ) -> dict[str, Any]:
        """One raw JSON-RPC request over HTTP, declaring the extension; the whole reply."""
        _, parsed = await self.rpc_reply(server, method, params, token)
        return parsed

    async def rpc_reply(
        self,
        server: int,
        method: str,
        params: dict[str, Any],
        token: str = "alice",
        headers: Mapping[str, str | None] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """:meth:`rpc` with its HTTP status, and ``headers`` changing the request's
        (``None`` drops one)."""
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {
                "extensions": {"io.modelcontextprotocol/tasks": {}}
            },
        }
        body = {"jsonrpc": "2.0", "id": 7, "method": method, "params": {**params, "_meta": meta}}
        request_headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": method,
        }
        # SEP-2243 routing header: the task ID for tasks/*, the tool for tools/call.
        name = params.get("taskId", params.get("name"))
        if isinstance(name, str) and name.isprintable():
            request_headers["Mcp-Name"] = name
        for key, value in (headers or {}).items():
            request_headers.pop(key, None)
            if value is not None:
                request_headers[key] = value
        async with httpx2.AsyncClient(timeout=30) as http:
            reply = await http.post(self.endpoint(server), json=body, headers=request_headers)
        parsed: dict[str, Any] = reply.json()
        return reply.status_code, parsed


async def until_status(
    client: Client, task_id: str, *statuses: str, within: float = 30
) -> dict[str, Any]:
    """Poll ``tasks/get`` until the task is in one of ``statuses``."""

    async def reached() -> dict[str, Any] | None:
        task = await get_task(client.session, task_id)
        return task if task["status"] in statuses else None

    return await wait_until(reached, within=within, what=f"task to reach {statuses}")
