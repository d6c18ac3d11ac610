"""Every FastMCP minor the ``fastmcp`` extra allows is tested: this run's FastMCP (the
newest, which a fresh install resolves) runs the whole suite, and the oldest allowed
(``make fastmcp-oldest``'s virtualenv) runs the FastMCP tests and the official
conformance suite's scenarios that reach the app the most through FastMCP, in a pytest of
its own here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from redis_tasks.fastmcp._fastmcp import FASTMCP_LOWEST

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OLDEST = ROOT / ".venv-fastmcp-oldest/bin/python"


def test_the_oldest_fastmcp_allowed_passes_the_fastmcp_tests_and_the_conformance_suite() -> None:
    if not OLDEST.is_file():
        pytest.fail("the oldest FastMCP's virtualenv is missing: run `make fastmcp-oldest`")
    lowest = ".".join(map(str, FASTMCP_LOWEST))
    version = subprocess.run(
        [str(OLDEST), "-c", "import fastmcp; print(fastmcp.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert version == lowest  # the virtualenv holds the extra's lower bound
    ran = subprocess.run(
        [
            str(OLDEST),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:cacheprovider",
            "tests/mcp/test_fastmcp.py",
            "tests/mcp/test_conformance.py",
            "-k",
            # Every FastMCP test, and the scenarios that reach the app's side the most
            # (what differs between FastMCP minors): a task's life, input rounds, a
            # required task's error; the newest runs all ten.
            "fastmcp and (not conformance_suite or lifecycle or mrtr-input or required)",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert ran.returncode == 0, ran.stdout[-3000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout
