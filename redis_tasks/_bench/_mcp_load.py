"""The ``mcp`` scenario: the tasks extension end to end, over streamable HTTP.

The demo's shape: K uvicorn processes serve :mod:`._mcp_app` (an ``MCPServer``
with :class:`~redis_tasks.mcp.TasksExtension`), W ``redis-tasks worker``
processes run its tool handler, and N callers in a few lean client processes
(:mod:`._mcp_client`) load them. Three measured phases and one in-process timing:

1. *lifecycle*: ``tools/call`` of the task tool, then ``tasks/get`` every P ms
   until terminal. tasks/s, create and create-to-terminal latency, errors, lost
   tasks, and CPU per task of the servers, workers, Redis and clients.
2. *tasks/get*: M pollers hammer ``tasks/get`` on completed tasks: polls/s and
   server CPU per poll.
3. *SDK baseline*: the same hammering with ``tools/call`` of a plain tool this
   library never touches: calls/s and server CPU per call.
4. the library's own part of one ``tasks/get``, timed in this process: the
   authorizer, ``find_task`` (at the per-server concurrency of phase 2) and the
   reply's rendering. Over phase 2's server CPU per poll it gives the library's
   share of a ``tasks/get``; the rest is the SDK and HTTP.

Process CPU comes from ``/proc/<pid>/stat`` (Linux; elsewhere those figures are
left out), Redis CPU from ``INFO``, the clients' from their own
``process_time``. Every run uses a fresh key prefix and deletes its keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import secrets
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Final, Self

from redis_tasks._models import TaskRequestContext
from redis_tasks._redis.manager import RedisTaskManager
from redis_tasks.testing import free_port

from ._adapter import delete_prefix
from ._args import positive
from ._probe import Probe
from ._progress import Progress, percentile
from ._systems import AdapterError

__all__ = [
    "MCP_PEERS",
    "McpSettings",
    "McpSystem",
    "add_mcp_options",
    "mcp_lines",
    "mcp_runs",
    "mcp_scenario",
    "mcp_settings",
    "mcp_system",
]

#: The other servers of the extension the scenario can load instead of ours.
MCP_PEERS: Final = ("fastmcp-tasks",)
_START_TIMEOUT: Final = 120.0  # seconds for a process to listen or read (imports are slow)
_PHASE_TIMEOUT: Final = 900.0  # seconds for one measured phase, at most
_CALL_TIMEOUT: Final = 30.0  # every HTTP request's deadline in the clients
_STOP_GRACE: Final = 15.0
_POLL: Final = 0.05  # seconds between readiness checks


@dataclass(frozen=True)
class McpSettings:
    """Sizes of the ``mcp`` scenario (the CLI's ``--mcp-*`` options)."""

    servers: int = 2
    workers: int = 2
    clients: int = 64
    tasks: int = 2_000
    poll_ms: int = 20
    pollers: int = 64
    polls: int = 10_000
    client_processes: int = 2
    concurrency: int = 32
    #: Also load this peer (one of :data:`MCP_PEERS`) in the same run, after ours.
    peer: str | None = None
    #: Also load ours with the fast path off (every request through the SDK's own
    #: dispatcher): the before/after of ``TasksExtension.asgi`` in one run.
    sdk_path: bool = False
    #: The peer's virtualenv interpreter and the directory of its app.
    peer_python: str = "benchmarks/.venv-fastmcp/bin/python"
    peers_dir: str = "benchmarks/peers"


@dataclass(frozen=True)
class McpSystem:
    """An MCP server of the tasks extension under test: how to run its processes.

    ``server(port)`` and ``worker(i)`` give command lines; ``env`` is added to
    every process's environment; ``wire`` is the lean client's :class:`Wire`
    settings; ``readers`` and ``server_readers`` are how many blocked
    ``XREADGROUP`` each ready worker and server process holds on Redis (how the
    harness tells they are ready); ``keys`` are the patterns of every key a run
    leaves (deleted after it).
    """

    name: str
    server: Callable[[int], Sequence[str]]
    worker: Callable[[int], Sequence[str]]
    env: dict[str, str]
    wire: dict[str, Any]
    task_tool: str = "noop"
    constant_tool: str = "constant"
    readers: int = 16
    server_readers: int = 0
    path: str = "/mcp"
    is_ours: bool = True
    cwd: str | None = None
    keys: tuple[str, ...] = ()


#: The name of ours with the fast path off, beside the peers.
SDK_PATH: Final = "redis-tasks (SDK path)"


def _ours(url: str, prefix: str, settings: McpSettings, *, fast_path: bool = True) -> McpSystem:
    def server(port: int) -> list[str]:
        return [sys.executable, "-m", "uvicorn", "redis_tasks._bench._mcp_app:app",
                "--host", "127.0.0.1", "--port", str(port),
                "--log-level", "warning", "--no-access-log"]  # fmt: skip

    def worker(index: int) -> list[str]:
        # The URL goes by $REDIS_URL, never on a command line (it may hold a password).
        return [sys.executable, "-m", "redis_tasks", "worker",
                "redis_tasks._bench._mcp_app:handler", "--prefix", prefix,
                "--concurrency", str(settings.concurrency),
                # As the other scenarios' in-process workers: no line per task.
                "--log-level", "warning", "--name", f"bench-mcp-{index}"]  # fmt: skip

    return McpSystem(
        name="redis-tasks" if fast_path else SDK_PATH,
        server=server,
        worker=worker,
        env={
            "RT_BENCH_FAST_PATH": "1" if fast_path else "0",
            "RT_BENCH_REDIS_URL": url,
            "REDIS_URL": url,
            "RT_BENCH_PREFIX": prefix,
            "RT_BENCH_POLL_MS": str(settings.poll_ms),
        },
        wire={"token": "bench-token"},
    )


def _fastmcp_tasks(url: str, prefix: str, settings: McpSettings) -> McpSystem:
    """fastmcp-tasks (FastMCP + Docket) from its own virtualenv: ``make bench-fastmcp``."""
    python = Path(settings.peer_python)
    app = Path(settings.peers_dir) / "fastmcp_tasks_app.py"
    if not app.is_file():
        raise FileNotFoundError(f"no MCP peer app at {app} (run from a source checkout)")
    if not python.is_file():
        raise FileNotFoundError(f"no MCP peer interpreter at {python} (make bench-fastmcp)")
    interpreter = str(python.absolute())

    def server(port: int) -> list[str]:
        return [interpreter, "-m", "uvicorn", "fastmcp_tasks_app:app",
                "--host", "127.0.0.1", "--port", str(port),
                "--log-level", "warning", "--no-access-log"]  # fmt: skip

    def worker(index: int) -> list[str]:
        return [interpreter, "-m", "fastmcp_tasks.worker_cli", "worker",
                "fastmcp_tasks_app.py:mcp"]  # fmt: skip

    return McpSystem(
        name="fastmcp-tasks",
        server=server,
        worker=worker,
        env={
            "FASTMCP_DOCKET_URL": url,
            "FASTMCP_DOCKET_NAME": prefix,
            "FASTMCP_DOCKET_CONCURRENCY": str(settings.concurrency),
            "RT_BENCH_POLL_MS": str(settings.poll_ms),
        },
        wire={"token": "bench-token"},
        # Docket blocks one XREADGROUP per worker, in the servers' own workers too.
        readers=1,
        server_readers=1,
        is_ours=False,
        cwd=str(app.parent.absolute()),
        # Docket prefixes every key with the queue name (hash-tagged on a cluster).
        keys=(f"{prefix}:*", f"{{{prefix}}}:*"),
    )


def mcp_system(url: str, prefix: str, settings: McpSettings, peer: str | None) -> McpSystem:
    """``peer`` (one of :data:`MCP_PEERS`), or ours when None, for ``url`` and ``prefix``."""
    if peer is None:
        return _ours(url, prefix, settings)
    if peer == SDK_PATH:
        return _ours(url, prefix, settings, fast_path=False)
    if peer not in MCP_PEERS:
        raise ValueError(f"unknown MCP peer {peer!r}; known: {', '.join(MCP_PEERS)}")
    return _fastmcp_tasks(url, prefix, settings)


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of process ``pid`` (Linux ``/proc``), else None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: count fields after its ')'.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_total(pids: Sequence[int]) -> float | None:
    readings = [_cpu_seconds(pid) for pid in pids]
    if any(reading is None for reading in readings):
        return None
    return sum(reading for reading in readings if reading is not None)


class _Process:
    """A child process of the scenario (a server, a worker or a client)."""

    def __init__(self, process: asyncio.subprocess.Process, label: str) -> None:
        self.process = process
        self.label = label

    @classmethod
    async def start(
        cls,
        argv: Sequence[str],
        env: dict[str, str],
        log: IO[bytes],
        label: str,
        *,
        pipes: bool = False,
        cwd: str | None = None,
    ) -> Self:
        """Start ``argv``; stderr goes to ``log``; stdin/stdout are pipes when asked."""
        pipe = asyncio.subprocess.PIPE if pipes else asyncio.subprocess.DEVNULL
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=pipe,
            stdout=pipe,
            stderr=log,
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            cwd=cwd,
            # Its own process group: a Ctrl-C of the harness does not reach it
            # before the harness stops it in order.
            start_new_session=True,
        )
        return cls(process, label)

    @property
    def pid(self) -> int:
        """The process ID."""
        return self.process.pid

    def check(self) -> None:
        """Raise :class:`AdapterError` if the process has exited."""
        if self.process.returncode is not None:
            raise AdapterError(f"{self.label} exited ({self.process.returncode}); see the log")

    async def stop(self) -> None:
        """SIGTERM (servers and workers shut down gracefully), SIGKILL after a grace."""
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                async with asyncio.timeout(_STOP_GRACE):
                    await self.process.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()


class _Client(_Process):
    """A :mod:`._mcp_client` process: job in, ``ready``, ``go``, progress, result."""

    done = 0

    async def send(self, line: str) -> None:
        """Write one line to its stdin."""
        assert self.process.stdin is not None
        self.process.stdin.write(line.encode() + b"\n")
        await self.process.stdin.drain()

    async def expect(self, prefix: str, within: float) -> str:
        """The next line starting with ``prefix`` (``n`` lines update :attr:`done`)."""
        assert self.process.stdout is not None
        async with asyncio.timeout(within):
            while True:
                raw = await self.process.stdout.readline()
                if not raw:
                    code = await self.process.wait()
                    raise AdapterError(f"{self.label} exited ({code}); see the log")
                line = raw.decode().strip()
                if line.startswith("error "):
                    raise AdapterError(f"{self.label}: {line}")
                if line.startswith("n "):
                    self.done = int(line[2:])
                if line.startswith(prefix):
                    return line

    async def stop(self) -> None:
        """Close stdin (the client then ends by itself); the base stop after."""
        if self.process.stdin is not None and not self.process.stdin.is_closing():
            self.process.stdin.close()
        await super().stop()


@dataclass
class _Stack:
    """The running servers and workers of one system."""

    system: McpSystem
    ports: list[int] = field(default_factory=list)
    servers: list[_Process] = field(default_factory=list)
    workers: list[_Process] = field(default_factory=list)

    def endpoints(self) -> list[list[Any]]:
        """Every server as the client's ``[host, port, path]``."""
        return [["127.0.0.1", port, self.system.path] for port in self.ports]

    def cpu(self) -> tuple[float | None, float | None]:
        """CPU seconds the servers and the workers have used so far."""
        return (
            _cpu_total([p.pid for p in self.servers]),
            _cpu_total([p.pid for p in self.workers]),
        )

    def check(self) -> None:
        """Raise if a server or worker has exited."""
        for process in (*self.servers, *self.workers):
            process.check()


async def _listening(port: int, process: _Process) -> None:
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        process.check()
        try:
            async with asyncio.timeout(1):
                _, writer = await asyncio.open_connection("127.0.0.1", port)
        except (OSError, TimeoutError):
            writer = None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
            return
        if time.monotonic() > deadline:
            raise AdapterError(f"{process.label} did not listen within {_START_TIMEOUT} s")
        await asyncio.sleep(_POLL)  # poll interval of this condition wait


@contextlib.asynccontextmanager
async def _running(
    system: McpSystem, settings: McpSettings, probe: Probe, log: IO[bytes]
) -> AsyncIterator[_Stack]:
    """The system's K servers (listening) and W workers (reading), stopped after."""
    stack = _Stack(system)
    try:
        mark = await probe.newest_clients()
        for i in range(settings.workers):
            stack.workers.append(
                await _Process.start(
                    system.worker(i), system.env, log, f"{system.name} worker {i}", cwd=system.cwd
                )
            )
        for i in range(settings.servers):
            port = free_port()
            stack.ports.append(port)
            stack.servers.append(
                await _Process.start(
                    system.server(port),
                    system.env,
                    log,
                    f"{system.name} server {i}",
                    cwd=system.cwd,
                )
            )
        for port, server in zip(stack.ports, stack.servers, strict=True):
            await _listening(port, server)
        # Every worker blocks a read per partition once it is ready for work.
        wanted = settings.workers * system.readers + settings.servers * system.server_readers
        deadline = time.monotonic() + _START_TIMEOUT
        while await probe.blocked_clients("xreadgroup", mark) < wanted:
            stack.check()
            if time.monotonic() > deadline:
                raise AdapterError(
                    f"{system.name} workers were not reading within {_START_TIMEOUT} s"
                )
            await asyncio.sleep(_POLL)  # poll interval of this condition wait
        yield stack
    finally:
        # Servers first (no new tasks), then the workers, each shut down gracefully.
        await asyncio.gather(*(p.stop() for p in stack.servers), return_exceptions=True)
        await asyncio.gather(*(p.stop() for p in stack.workers), return_exceptions=True)


def _shares(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal whole shares (none below zero)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def _phase(
    stack: _Stack,
    probe: Probe,
    log: IO[bytes],
    progress: Progress,
    label: str,
    job: dict[str, Any],
    callers: int,
    ops: int,
    processes: int,
) -> dict[str, Any]:
    """One measured phase: ``callers`` in ``processes`` client processes share ``ops``.

    Returns the clients' pooled results and where the CPU went meanwhile.
    """
    processes = max(1, min(processes, callers))
    clients: list[_Client] = []
    try:
        offset = 0
        for i, (share, ops_share) in enumerate(
            zip(_shares(callers, processes), _shares(ops, processes), strict=True)
        ):
            client = await _Client.start(
                [sys.executable, "-m", "redis_tasks._bench._mcp_client"],
                {}, log, f"mcp client {i}", pipes=True,
            )  # fmt: skip
            clients.append(client)
            await client.send(
                json.dumps({**job, "concurrency": share, "ops": ops_share, "offset": offset})
            )
            offset += share
        for client in clients:
            await client.expect("ready", _START_TIMEOUT)
        stack.check()
        servers_before, workers_before = stack.cpu()
        redis_before = await probe.cpu_seconds()
        for client in clients:
            await client.send("go")
        waits = {asyncio.ensure_future(c.expect("result ", _PHASE_TIMEOUT)): c for c in clients}
        pending = set(waits)
        while pending:
            _, pending = await asyncio.wait(pending, timeout=0.1)
            progress.update(label, min(ops - 1, sum(c.done for c in clients)), ops)
        lines = [future.result() for future in waits]
        servers_after, workers_after = stack.cpu()
        redis_cpu = await probe.cpu_seconds() - redis_before
        progress.update(label, ops, ops)
    finally:
        await asyncio.gather(*(c.stop() for c in clients), return_exceptions=True)
    results = [json.loads(line.removeprefix("result ")) for line in lines]
    span = max(r["ended"] for r in results) - min(r["started"] for r in results)
    errors: dict[str, int] = {}
    for r in results:
        for kind, count in r["errors"].items():
            errors[kind] = errors.get(kind, 0) + count
    return {
        "span": max(span, 1e-6),
        "done": sum(r["done"] for r in results),
        "errors": errors,
        "lost": sum(r["lost"] for r in results),
        "polls": sum(r["polls"] for r in results),
        "latency_ms": [v for r in results for v in r["latency_ms"]],
        "create_ms": [v for r in results for v in r["create_ms"]],
        "completed": [v for r in results for v in r["completed"]],
        "cpu": {
            "servers": None
            if servers_before is None or servers_after is None
            else servers_after - servers_before,
            "workers": None
            if workers_before is None or workers_after is None
            else workers_after - workers_before,
            "redis": redis_cpu,
            "clients": sum(r["cpu"] for r in results),
        },
    }


def _usage(cpu: dict[str, float | None], count: int, span: float, unit: str) -> dict[str, Any]:
    """CPU µs per ``unit`` and cores kept busy, per part (None where unknown)."""
    out: dict[str, Any] = {}
    for part, seconds in cpu.items():
        if seconds is None:
            continue
        out[f"{part}_us_per_{unit}"] = round(seconds / max(count, 1) * 1e6)
        out[f"{part}_cores"] = round(seconds / span, 2)
    return out


def _lat(samples: list[float], prefix: str = "") -> dict[str, float | None]:
    if not samples:
        return {f"{prefix}p50": None, f"{prefix}p99": None}
    return {
        f"{prefix}p50": round(percentile(samples, 0.5), 2),
        f"{prefix}p99": round(percentile(samples, 0.99), 2),
    }


async def _library_timing(
    url: str, prefix: str, task_ids: list[str], settings: McpSettings, progress: Progress
) -> dict[str, Any]:
    """CPU µs of the library's own part of one ``tasks/get``, in this process.

    The authorizer (:class:`~redis_tasks.mcp.PrincipalAuthorizer`), ``find_task``
    from ``pollers / servers`` concurrent callers (what one server saw in the
    ``tasks/get`` phase) and the reply's rendering, each timed on its own.
    """
    from mcp.server.auth.middleware.auth_context import auth_context_var
    from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser

    from redis_tasks.mcp import PrincipalAuthorizer
    from redis_tasks.mcp._wire import get_result

    from ._mcp_app import access_token

    token = access_token("bench-token")
    assert token is not None
    reset = auth_context_var.set(AuthenticatedUser(token))
    try:
        authorize = PrincipalAuthorizer(endpoint="/mcp")
        rounds = 2_000
        cpu = time.process_time()
        for _ in range(rounds):
            who = authorize(None)  # type: ignore[arg-type]  # a fixed endpoint needs no request
        authorize_us = (time.process_time() - cpu) / rounds * 1e6
    finally:
        auth_context_var.reset(reset)
    calls = settings.polls
    concurrency = max(1, settings.pollers // settings.servers)
    label = "mcp find_task (in-process)"
    async with RedisTaskManager.from_url(url, prefix=prefix) as manager:
        found = await manager.find_task(TaskRequestContext(who, task_ids[0]))
        if found is None or found.status != "completed":
            raise AdapterError("the in-process find_task did not see the benchmark's task")
        for _ in range(rounds):
            get_result(found)  # warm
        cpu = time.process_time()
        for _ in range(rounds):
            get_result(found)
        render_us = (time.process_time() - cpu) / rounds * 1e6
        numbers = itertools.count()
        misses = 0

        async def poll(task_id: str) -> None:
            nonlocal misses
            ctx = TaskRequestContext(who, task_id)
            while (n := next(numbers)) < calls:
                if await manager.find_task(ctx) is None:
                    misses += 1
                if n % 500 == 0:
                    progress.update(label, n, calls)

        ids = [task_ids[i % len(task_ids)] for i in range(concurrency)]
        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(poll(task_id) for task_id in ids))
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        progress.update(label, calls, calls)
    if misses:
        raise AdapterError("the in-process find_task lost the benchmark's tasks")
    find_us = cpu / calls * 1e6
    return {
        "concurrency": concurrency,
        "calls": calls,
        "find_task_us": round(find_us, 1),
        "find_task_rate": round(calls / elapsed),
        "authorize_us": round(authorize_us, 1),
        "render_us": round(render_us, 1),
        "library_us": round(authorize_us + find_us + render_us, 1),
    }


async def mcp_runs(
    url: str, settings: McpSettings, progress: Progress, log: IO[bytes]
) -> dict[str, Any]:
    """The ``mcp`` scenario on ours and, when asked, the peer, one after the other.

    Returns ``{"mcp": ours}``, with ``"mcp_peers": {name: figures}`` for a peer.
    """
    if settings.peer is not None:
        mcp_system(url, "check", settings, settings.peer)  # a missing venv fails first
    out: dict[str, Any] = {"mcp": await mcp_scenario(url, settings, progress, log)}
    others = ([SDK_PATH] if settings.sdk_path else []) + (
        [settings.peer] if settings.peer is not None else []
    )
    for name in others:
        row = await mcp_scenario(url, settings, progress, log, peer=name)
        row["ours_over_it"] = _ratios(out["mcp"], row)
        out.setdefault("mcp_peers", {})[name] = row
    return out


def _ratios(ours: dict[str, Any], theirs: dict[str, Any]) -> dict[str, float]:
    """Our figures over the peer's: above 1 means ours is faster or cheaper."""
    pairs = {
        "tasks_per_s": (ours["rate"], theirs["rate"]),
        "p50": (theirs["p50"], ours["p50"]),
        "p99": (theirs["p99"], ours["p99"]),
        "create_p50": (theirs["create_p50"], ours["create_p50"]),
        "get_per_s": (ours["get"]["rate"], theirs["get"]["rate"]),
        "get_server_us": (
            theirs["get"].get("servers_us_per_poll"),
            ours["get"].get("servers_us_per_poll"),
        ),
        "server_plus_worker_us_per_task": (
            _sum(theirs, "servers_us_per_task", "workers_us_per_task"),
            _sum(ours, "servers_us_per_task", "workers_us_per_task"),
        ),
        "redis_us_per_task": (theirs.get("redis_us_per_task"), ours.get("redis_us_per_task")),
    }
    return {name: round(a / b, 2) for name, (a, b) in pairs.items() if a and b}


def _sum(row: dict[str, Any], *keys: str) -> float | None:
    values = [row.get(key) for key in keys]
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


async def mcp_scenario(
    url: str,
    settings: McpSettings,
    progress: Progress,
    log: IO[bytes],
    peer: str | None = None,
) -> dict[str, Any]:
    """Run the ``mcp`` scenario against ``url`` on ours (or ``peer``); the figures."""
    if peer is None:
        for module in ("mcp", "uvicorn"):
            if not _importable(module):
                raise AdapterError(
                    f"the mcp scenario needs {module}: pip install 'redis-tasks[mcp]'"
                )
    prefix = f"bench-{secrets.token_hex(4)}"
    system = mcp_system(url, prefix, settings, peer)
    n = settings.tasks
    job = {
        "endpoints": [],
        "wire": system.wire,
        "timeout": _CALL_TIMEOUT,
        "poll_ms": settings.poll_ms,
    }
    async with Probe(url) as probe, RedisTaskManager.from_url(url, prefix=prefix) as manager:
        try:
            async with _running(system, settings, probe, log) as stack:
                job["endpoints"] = stack.endpoints()
                life = await _phase(
                    stack, probe, log, progress, f"mcp lifecycle ({system.name})",
                    {**job, "mode": "lifecycle", "tool": system.task_tool,
                     "keep": max(1, settings.pollers // settings.client_processes)},
                    settings.clients, n, settings.client_processes,
                )  # fmt: skip
                if not life["completed"]:
                    raise AdapterError("no task of the mcp lifecycle phase completed")
                get = await _phase(
                    stack, probe, log, progress, f"mcp tasks/get ({system.name})",
                    {**job, "mode": "get", "tool": system.task_tool,
                     "task_ids": life["completed"]},
                    settings.pollers, settings.polls, settings.client_processes,
                )  # fmt: skip
                call = await _phase(
                    stack, probe, log, progress, f"mcp SDK tools/call ({system.name})",
                    {**job, "mode": "call", "tool": system.constant_tool},
                    settings.pollers, settings.polls, settings.client_processes,
                )  # fmt: skip
            library = (
                await _library_timing(url, prefix, life["completed"], settings, progress)
                if system.is_ours
                else None
            )
        finally:
            await delete_prefix(manager)
            for pattern in system.keys:
                await _delete_matching(manager, pattern)
    return _figures(system, settings, life, get, call, library)


async def _delete_matching(manager: RedisTaskManager, pattern: str) -> None:
    """Unlink every key matching ``pattern`` on every primary (a peer's keys)."""
    for client in manager.primary_clients():
        keys = [key async for key in client.scan_iter(match=pattern, count=1000)]
        # One slot per UNLINK on a cluster: a peer's keys share its hash tag there.
        for i in range(0, len(keys), 1000):
            await client.unlink(*keys[i : i + 1000])


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def _figures(
    system: McpSystem,
    settings: McpSettings,
    life: dict[str, Any],
    get: dict[str, Any],
    call: dict[str, Any],
    library: dict[str, Any] | None,
) -> dict[str, Any]:
    n = settings.tasks
    completed = len(life["latency_ms"])
    out: dict[str, Any] = {
        "system": system.name,
        **{k: v for k, v in asdict(settings).items() if not k.startswith("peer")},
        "rate": round(completed / life["span"]),
        **_lat(life["latency_ms"]),
        **_lat(life["create_ms"], "create_"),
        "completed": completed,
        "errors": sum(life["errors"].values()),
        "error_kinds": life["errors"],
        "lost": life["lost"] + max(0, n - life["done"]),
        "polls_per_task": round(life["polls"] / max(n, 1), 2),
        **_usage(life["cpu"], n, life["span"], "task"),
    }
    for key, phase, unit in (("get", get, "poll"), ("sdk_call", call, "call")):
        row: dict[str, Any] = {
            "rate": round(phase["done"] / phase["span"]),
            **_lat(phase["latency_ms"]),
            "errors": sum(phase["errors"].values()),
            "error_kinds": phase["errors"],
            **_usage(phase["cpu"], phase["done"], phase["span"], unit),
        }
        server_us = row.get(f"servers_us_per_{unit}")
        if server_us:
            # What one fully busy server core would serve.
            row["per_server_core"] = round(1e6 / server_us)
        out[key] = row
    if library is not None:
        out["library"] = library
        get_us = out["get"].get("servers_us_per_poll")
        call_us = out["sdk_call"].get("servers_us_per_call")
        if get_us:
            share = min(1.0, library["library_us"] / get_us)
            out["share"] = {
                "library": round(share, 3),
                "sdk_http": round(1 - share, 3),
                "library_us": library["library_us"],
                "sdk_http_us": round(get_us - library["library_us"], 1),
                "get_minus_sdk_call_us": None if not call_us else round(get_us - call_us),
            }
    return out


def add_mcp_options(bench: Any) -> None:
    """The ``mcp`` scenario's options, on the ``bench`` sub-command's parser."""
    defaults = McpSettings()
    group = bench.add_argument_group("mcp scenario (the tasks extension over streamable HTTP)")
    group.add_argument(
        "--mcp-servers", type=positive, default=defaults.servers, help="uvicorn processes"
    )
    group.add_argument(
        "--mcp-workers",
        type=positive,
        default=defaults.workers,
        help="redis-tasks worker processes (each at --concurrency)",
    )
    group.add_argument(
        "--mcp-clients", type=positive, default=defaults.clients, help="concurrent callers"
    )
    group.add_argument(
        "--mcp-tasks", type=positive, default=defaults.tasks, help="tasks in the lifecycle phase"
    )
    group.add_argument(
        "--mcp-poll-ms",
        type=positive,
        default=defaults.poll_ms,
        help="tasks/get interval of each caller",
    )
    group.add_argument(
        "--mcp-pollers",
        type=positive,
        default=defaults.pollers,
        help="concurrent pollers of the tasks/get and SDK tools/call phases",
    )
    group.add_argument(
        "--mcp-polls",
        type=positive,
        default=defaults.polls,
        help="requests in each of those two phases",
    )
    group.add_argument(
        "--mcp-peer",
        choices=MCP_PEERS,
        default=None,
        help="also load this other server of the extension, same sizes, same run "
        "(from a source checkout: make bench-fastmcp)",
    )
    group.add_argument(
        "--mcp-sdk-path",
        action="store_true",
        help="also load ours with the tasks/* fast path off (the SDK's dispatcher for "
        "every request): before and after, same run",
    )
    group.add_argument(
        "--mcp-peer-python",
        default=defaults.peer_python,
        help="the MCP peer's virtualenv interpreter (default: %(default)s)",
    )
    group.add_argument(
        "--mcp-client-processes",
        type=positive,
        default=defaults.client_processes,
        help="client processes the callers are spread over",
    )


def mcp_settings(args: Any) -> McpSettings:
    """The ``mcp`` scenario's settings from parsed ``bench`` arguments."""
    return McpSettings(
        servers=args.mcp_servers,
        workers=args.mcp_workers,
        clients=args.mcp_clients,
        tasks=args.mcp_tasks,
        poll_ms=args.mcp_poll_ms,
        pollers=args.mcp_pollers,
        polls=args.mcp_polls,
        client_processes=args.mcp_client_processes,
        concurrency=args.concurrency,
        peer=args.mcp_peer,
        sdk_path=args.mcp_sdk_path,
        peer_python=args.mcp_peer_python,
        peers_dir=str(args.peers_dir),
    )


def _cpu(row: dict[str, Any], unit: str) -> str:
    parts = [
        f"{name} {row[f'{key}_us_per_{unit}']}"
        for key, name in (
            ("servers", "servers"),
            ("workers", "workers"),
            ("redis", "Redis"),
            ("clients", "clients"),
        )
        if f"{key}_us_per_{unit}" in row
    ]
    return " + ".join(parts) if parts else "-"


def mcp_lines(row: dict[str, Any]) -> list[str]:
    """The ``mcp`` scenario's figures as lines of the printed table."""
    lines = [
        f"mcp ({row['system']}, {row['servers']} servers, {row['workers']} workers, "
        f"{row['clients']} clients, poll {row['poll_ms']} ms): {row['rate']} tasks/s; "
        f"create-to-terminal p50 {row['p50']} / p99 {row['p99']} ms; tools/call "
        f"p50 {row['create_p50']} / p99 {row['create_p99']} ms; errors {row['errors']}, "
        f"lost {row['lost']}; {row['polls_per_task']} polls/task",
        f"  CPU us/task: {_cpu(row, 'task')}",
    ]
    get, call = row["get"], row["sdk_call"]
    lines.append(
        f"  tasks/get, {row['pollers']} pollers: {get['rate']} polls/s "
        f"(p50 {get['p50']} / p99 {get['p99']} ms), {get.get('per_server_core', '-')} per "
        f"server core; CPU us/poll: {_cpu(get, 'poll')}; errors {get['errors']}"
    )
    lines.append(
        f"  SDK tools/call of a plain tool: {call['rate']} calls/s "
        f"(p50 {call['p50']} / p99 {call['p99']} ms), {call.get('per_server_core', '-')} per "
        f"server core; CPU us/call: {_cpu(call, 'call')}; errors {call['errors']}"
    )
    library, share = row.get("library"), row.get("share")
    if library and share:
        lines.append(
            f"  a tasks/get's server CPU: library {share['library_us']} us "
            f"({share['library']:.0%}: authorize {library['authorize_us']} + find_task "
            f"{library['find_task_us']} + render {library['render_us']}), SDK and HTTP "
            f"{share['sdk_http_us']} us ({share['sdk_http']:.0%})"
        )
    ratios = row.get("ours_over_it")
    if ratios:
        parts = ", ".join(f"{name} {value}x" for name, value in ratios.items())
        lines.append(f"  redis-tasks vs {row['system']} (above 1: ours better): {parts}")
    return lines
