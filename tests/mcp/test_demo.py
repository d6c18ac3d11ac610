"""The demo runs end to end with real worker processes, embedded or on a real server."""

from __future__ import annotations

import subprocess
import sys

import redis

from redis_tasks.demo import EXPECTED, run_demo
from redis_tasks.testing import RedisServer


async def test_demo_on_the_embedded_default() -> None:
    lines: list[str] = []
    assert await run_demo(None, lines.append) == EXPECTED
    assert "embedded" in lines[0]
    assert any("bob asks server B for alice's greet task: not found" in line for line in lines)
    assert any(
        "input_required" in line and "asks: Please enter your name." in line for line in lines
    )
    assert any("Hello, Ada!" in line for line in lines)


async def test_demo_on_a_real_server_leaves_no_keys(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    before = set(client.scan_iter(match="{demo-*", count=1000))
    assert await run_demo(redis_server.url, lambda _: None) == EXPECTED
    assert set(client.scan_iter(match="{demo-*", count=1000)) == before
    client.close()


def test_demo_command_exits_zero(redis_server: RedisServer) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "redis_tasks", "demo", "--redis-url", redis_server.url],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("demo finished")
