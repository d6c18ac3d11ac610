"""The built wheel carries the Lua scripts and works from a fresh virtualenv."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from redis_tasks._redis.scripts import SPECS
from redis_tasks.testing import RedisServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

SMOKE = textwrap.dedent(
    """
    import asyncio, sys
    import redis_tasks
    from redis_tasks._redis.scripts import lua_dir, scripts
    from redis_tasks import RedisTaskManager, RequestContext, TaskOrigin, TaskRequestContext

    assert "site-packages" in redis_tasks.__file__, redis_tasks.__file__
    assert lua_dir().parent.name == "redis_tasks", lua_dir()
    assert len(scripts) == {count}

    async def main():
        async with RedisTaskManager.from_url(sys.argv[1], prefix=sys.argv[2]) as manager:
            who = RequestContext("/mcp", "alice")
            task = await manager.create_task(who, TaskOrigin.from_persisted_string('{{"a": 1}}'))
            found = await manager.find_task(TaskRequestContext(who, task.task_id))
            await manager.complete_task(task.task_id, {{"ok": True}})
            done = await manager.find_task(TaskRequestContext(who, task.task_id))
            print("smoke", found.status.value, done.status.value, done.result)

    asyncio.run(main())
    """
)


def test_wheel_contains_the_scripts_and_runs_from_a_fresh_venv(
    tmp_path: Path, redis_server: RedisServer, prefix: str
) -> None:
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(dist),
            str(ROOT),
        ],
        check=True,
        timeout=300,
    )
    (wheel,) = dist.glob("redis_tasks-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for script in SPECS:
        assert f"redis_tasks/lua/{script}.lua" in names
    assert "redis_tasks/lua/includes/common.lua" in names
    assert "redis_tasks/py.typed" in names

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel)], check=True, timeout=600)
    smoke = tmp_path / "smoke.py"
    smoke.write_text(SMOKE.format(count=len(SPECS)))
    done = subprocess.run(
        [str(python), str(smoke), redis_server.url, prefix],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.stdout.strip() == "smoke working completed {'ok': True}"
