"""The same FastMCP app on both backends: redis_tasks.fastmcp and fastmcp-tasks 4.1.4.

``examples/fastmcp_app.py`` (progress, an input round, cancellation) is served as it is
by a uvicorn server and a ``redis-tasks worker --fastmcp``, and again with its import
of ``TasksExtension`` changed to fastmcp-tasks' (in fastmcp-tasks' virtualenv, with its
own worker); the same client script (``examples/fastmcp_client.py``) must pass every step
on both. The benchmark's FastMCP app gets the same check on its source: its two
versions differ in that import alone.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from redis_tasks.testing import RedisServer, free_port, wait_listening
from tests.support.helpers import stop_processes

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples/fastmcp_app.py"
CLIENT = ROOT / "examples/fastmcp_client.py"
PEER_PYTHON = ROOT / "benchmarks/.venv-fastmcp/bin/python"
OURS_IMPORT = "from redis_tasks.fastmcp import TasksExtension"
THEIRS_IMPORT = "from fastmcp_tasks import TasksExtension"
STEPS = [
    "task polled to its result",
    "progress seen as the status message",
    "input answered through tasks/update",
    "cancelled",
]


@pytest.fixture(params=["redis-tasks", "fastmcp-tasks"])
def served(
    request: pytest.FixtureRequest, redis_server: RedisServer, tmp_path: Path
) -> Iterator[str]:
    """The example app's endpoint, on one backend: a server and a worker."""
    prefix = f"b{uuid.uuid4().hex[:10]}"
    if request.param == "redis-tasks":
        python, app_dir = sys.executable, EXAMPLE.parent
        worker = ["-m", "redis_tasks", "worker", "--fastmcp", "fastmcp_app.py:mcp",
                  "--log-level", "warning"]  # fmt: skip
        env = {"REDIS_URL": redis_server.url, "REDIS_TASKS_PREFIX": prefix}
    else:
        if not PEER_PYTHON.is_file():
            pytest.fail("fastmcp-tasks' virtualenv is missing: run `make bench-fastmcp`")
        python, app_dir = str(PEER_PYTHON), tmp_path
        source = EXAMPLE.read_text()
        assert source.count(OURS_IMPORT) == 1
        (tmp_path / "fastmcp_app.py").write_text(source.replace(OURS_IMPORT, THEIRS_IMPORT))
        worker = ["-m", "fastmcp_tasks.worker_cli", "worker", "fastmcp_app.py:mcp"]
        env = {"FASTMCP_DOCKET_URL": redis_server.url, "FASTMCP_DOCKET_NAME": prefix}
    port = free_port()
    logs = tmp_path / "logs"
    logs.mkdir()
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for name, argv in (
            ("server", ["-m", "uvicorn", "fastmcp_app:app", "--port", str(port),
                        "--log-level", "warning"]),
            ("worker", worker),
        ):  # fmt: skip
            processes.append(
                subprocess.Popen(
                    [python, *argv],
                    cwd=app_dir,
                    env={**os.environ, "PYTHONPATH": str(ROOT), **env},
                    stdout=(logs / f"{name}.log").open("wb"),
                    stderr=subprocess.STDOUT,
                )
            )
        wait_listening(port, processes[0])
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_processes(processes)


def test_the_same_client_passes_on_both_backends(served: str) -> None:
    done = subprocess.run(
        [sys.executable, str(CLIENT), served],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    passed = [line.removeprefix("ok ") for line in done.stdout.splitlines()]
    assert passed == STEPS, done.stdout + done.stderr[-3000:]
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_benchmark_app_differs_from_the_peers_in_its_import_alone() -> None:
    def code(path: Path) -> list[str]:
        text = path.read_text()
        body = text[text.index('"""', 3) + 3 :]  # after the module docstring
        return [line for line in body.splitlines() if line.strip()]

    peers = ROOT / "benchmarks/peers"
    theirs, ours = code(peers / "fastmcp_tasks_app.py"), code(peers / "fastmcp_redis_tasks_app.py")
    changed = [
        line for line in difflib.unified_diff(theirs, ours, lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]  # fmt: skip
    assert changed == [f"-{THEIRS_IMPORT}", f"+{OURS_IMPORT}"]
