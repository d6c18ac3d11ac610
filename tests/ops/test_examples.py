"""The examples run as their pages say. The quickstart: ``check``, a worker on the handler
named by its file, the script that creates and polls, ``inspect``; on a Redis of its own
(the example keeps its fixed prefix). The tracing example, in a process of its own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from redis_tasks.testing import start_redis_server
from tests.support.helpers import stop_processes

ROOT = Path(__file__).resolve().parents[2]


def _command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip


def test_the_quickstart_runs_as_its_page_says(tmp_path: Path) -> None:
    server = start_redis_server(tmp_path / "redis")
    url = ["--redis-url", server.url, "--prefix", "quickstart"]
    worker = subprocess.Popen(
        [sys.executable, "-m", "redis_tasks", "worker", "examples/quickstart.py:handler", *url],
        cwd=ROOT,
        stderr=(tmp_path / "worker.log").open("wb"),
    )
    try:
        checked = _command("-m", "redis_tasks", "check", *url, "--pings", "10")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        ran = _command("examples/quickstart.py", env={**os.environ, "REDIS_URL": server.url})
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.splitlines() == [
            "completed {'square': 4}",
            "completed {'square': 9}",
            "completed {'square': 16}",
        ]
        inspected = _command("-m", "redis_tasks", "inspect", *url)
        assert inspected.returncode == 0, inspected.stderr
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0
        assert '"prefix": "quickstart"' in (tmp_path / "worker.log").read_text()
    finally:
        stop_processes([worker])
        server.stop()


def test_the_tracing_example_gives_a_process_the_library_s_spans() -> None:
    # examples/tracing.py (the Traces page shows it whole), in a process of its own: it
    # sets the global tracer provider, once and for all.
    done = subprocess.run(
        [sys.executable, "examples/tracing.py"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "create_task"' in done.stdout
    assert '"kind": "SpanKind.PRODUCER"' in done.stdout
