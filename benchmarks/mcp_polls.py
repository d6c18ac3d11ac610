"""``tasks/get`` polls per second per server core: the SDK's pipeline against the fast path.

Usage: python -m benchmarks.mcp_polls [--runs 3] [--seconds 5] [--concurrency 24] [--tasks 300]
                                      [--json-response]

One private redis-server and, per run and path, one uvicorn server process
serving an ``MCPServer`` with the tasks extension and bearer authentication (a
trivial token verifier, the same for both paths). ``--tasks`` tasks are created
through ``tools/call`` and completed through the manager before the clock
starts; then a client process keeps ``--concurrency`` ``tasks/get`` requests in
flight (keep-alive connections, task IDs round-robin) for ``--seconds``. The
server's CPU is read from ``/proc/<pid>/stat`` (utime + stime) before and after.
Runs alternate between the paths; the report gives each path's medians. Every
reply is checked (status 200 and a ``completed`` task), so a broken path cannot
look fast. The figures are noisy: the client shares the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2

from redis_tasks.testing import free_port, start_redis_server, wait_listening

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "bench"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    },
}
HEADERS = {
    "Authorization": f"Bearer {TOKEN}",
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": "2026-07-28",
}


def make_app() -> Any:
    """The server under test (``uvicorn --factory benchmarks.mcp_polls:make_app``)."""
    from mcp.server.auth.provider import AccessToken
    from mcp.server.auth.settings import AuthSettings
    from mcp.server.mcpserver import MCPServer

    from redis_tasks import RedisTaskManager
    from redis_tasks.mcp import TasksExtension

    class Verifier:
        async def verify_token(self, token: str) -> AccessToken | None:
            if token != TOKEN:
                return None
            return AccessToken(token=token, client_id="bench", subject="bench", scopes=["mcp"])

    manager = RedisTaskManager.from_url(os.environ["RT_BENCH_REDIS_URL"], prefix="bench")
    tasks = TasksExtension(manager, tools=["add"])
    server = MCPServer(
        "bench",
        extensions=[tasks],
        lifespan=tasks.lifespan,
        token_verifier=Verifier(),
        auth=AuthSettings(
            issuer_url="http://127.0.0.1:9/",  # type: ignore[arg-type]
            resource_server_url=None,
            required_scopes=["mcp"],
        ),
    )

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    app = server.streamable_http_app(json_response=os.environ.get("RT_BENCH_JSON") == "1")
    if os.environ.get("RT_BENCH_PATH") == "fast":
        return tasks.asgi(app)
    return app


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def body(method: str, params: dict[str, Any], request_id: int = 1) -> bytes:
    """One JSON-RPC request declaring the tasks extension."""
    return json.dumps(
        {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {**params, "_meta": META}}
    ).encode()


async def create_tasks(url: str, redis_url: str, count: int) -> list[str]:
    """``count`` tasks made through ``tools/call``, then completed through the manager."""
    from redis_tasks import RedisTaskManager

    ids: list[str] = []
    async with httpx2.AsyncClient(timeout=30) as http:
        for n in range(count):
            reply = await http.post(
                url,
                content=body("tools/call", {"name": "add", "arguments": {"a": n, "b": 1}}),
                headers={**HEADERS, "Mcp-Method": "tools/call", "Mcp-Name": "add"},
            )
            ids.append(reply.json()["result"]["taskId"])
    async with RedisTaskManager.from_url(redis_url, prefix="bench") as manager:
        for task_id in ids:
            await manager.complete_task(task_id, {"content": [], "isError": False})
    return ids


async def hammer(url: str, ids: list[str], seconds: float, concurrency: int) -> tuple[int, int]:
    """Keep ``concurrency`` polls in flight for ``seconds``: (good replies, bad replies)."""
    limits = httpx2.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    good = bad = 0
    deadline = time.monotonic() + seconds
    bodies = [body("tasks/get", {"taskId": task_id}) for task_id in ids]
    headers = {**HEADERS, "Mcp-Method": "tasks/get"}

    async def loop(start: int) -> None:
        nonlocal good, bad
        n = start
        while time.monotonic() < deadline:
            reply = await http.post(url, content=bodies[n % len(bodies)], headers=headers)
            n += concurrency
            if reply.status_code == 200 and b'"status":"completed"' in reply.content:
                good += 1
            else:
                bad += 1

    async with httpx2.AsyncClient(timeout=30, limits=limits) as http:
        await asyncio.gather(*(loop(i) for i in range(concurrency)))
    return good, bad


def client_main(args: argparse.Namespace) -> None:
    """The client process: print one JSON line of counts."""
    ids = json.loads(Path(args.ids).read_text())
    good, bad = asyncio.run(hammer(args.url, ids, args.seconds, args.concurrency))
    print(json.dumps({"good": good, "bad": bad}))


def one_run(path: str, redis_url: str, args: argparse.Namespace, scratch: Path) -> dict[str, float]:
    """Start a server on ``path``, fill it, hammer it; its polls/s and CPU µs per poll."""
    seconds, concurrency, count = args.seconds, args.concurrency, args.tasks
    port = free_port()
    env = {
        **os.environ,
        "RT_BENCH_REDIS_URL": redis_url,
        "RT_BENCH_PATH": path,
        "RT_BENCH_JSON": "1" if args.json_response else "0",
    }
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "benchmarks.mcp_polls:make_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        wait_listening(port, server)
        url = f"http://127.0.0.1:{port}/mcp"
        ids = asyncio.run(create_tasks(url, redis_url, count))
        ids_file = scratch / "ids.json"
        ids_file.write_text(json.dumps(ids))
        before = cpu_seconds(server.pid)
        started = time.monotonic()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.mcp_polls",
                "--client",
                "--url",
                url,
                "--ids",
                str(ids_file),
                "--seconds",
                str(seconds),
                "--concurrency",
                str(concurrency),
            ],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(server.pid) - before
    finally:
        server.terminate()
        server.wait(timeout=30)
    counts = json.loads(out.stdout)
    if counts["bad"]:
        raise SystemExit(f"{path}: {counts['bad']} bad replies")
    polls = counts["good"]
    return {
        "polls_per_s": polls / elapsed,
        "polls_per_cpu_s": polls / cpu,
        "cpu_us_per_poll": cpu / polls * 1e6,
        "server_cpu_share": cpu / elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=24)
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--paths", default="sdk,fast", help="comma-separated: sdk, fast")
    parser.add_argument(
        "--json-response",
        action="store_true",
        help="serve with streamable_http_app(json_response=True) (default: SSE mode)",
    )
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        client_main(args)
        return
    paths = args.paths.split(",")
    results: dict[str, list[dict[str, float]]] = {p: [] for p in paths}
    with tempfile.TemporaryDirectory(prefix="redis-tasks-mcp-polls-") as scratch:
        redis = start_redis_server(Path(scratch) / "redis")
        try:
            for n in range(args.runs):
                for path in paths:
                    run = one_run(path, redis.url, args, Path(scratch))
                    results[path].append(run)
                    print(
                        f"run {n + 1} {path}: " + ", ".join(f"{k} {v:.1f}" for k, v in run.items()),
                        flush=True,
                    )
        finally:
            redis.stop()
    print(
        f"\nmedians of {args.runs} runs "
        f"({args.concurrency} in flight, {args.seconds:g} s each; noisy):"
    )
    print(f"{'path':<6}{'polls/s':>10}{'polls/CPU-s':>14}{'CPU µs/poll':>14}")
    for path, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"{path:<6}{med['polls_per_s']:>10.0f}{med['polls_per_cpu_s']:>14.0f}{med['cpu_us_per_poll']:>14.0f}"
        )


if __name__ == "__main__":
    main()
