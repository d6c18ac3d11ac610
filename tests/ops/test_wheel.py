"""The distribution as a user gets it: the wheel and the sdist build, carry the Lua
scripts, the license and the changelog, and the wheel installed with only the ``mcp``
extra in a fresh virtualenv runs the library, ``redis-tasks --version``, the demo and
``redis-tasks check`` against a real server."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from redis_tasks._redis.scripts import SPECS
from redis_tasks._version import DISTRIBUTION, __version__
from redis_tasks.testing import RedisServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
#: The file name stem of both artifacts: the distribution, normalized, and the version.
STEM = f"{DISTRIBUTION.replace('-', '_')}-{__version__}"

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


def test_the_wheel_and_sdist_build_and_the_wheel_runs_from_a_fresh_venv(
    tmp_path: Path, redis_server: RedisServer, prefix: str
) -> None:
    dist = tmp_path / "dist"
    hatchling = Path(sys.executable).parent / "hatchling"
    subprocess.run(
        [str(hatchling), "build", "-d", str(dist)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=300,
    )
    wheel, sdist = dist / f"{STEM}-py3-none-any.whl", dist / f"{STEM}.tar.gz"
    names = set(zipfile.ZipFile(wheel).namelist())
    for script in SPECS:
        assert f"redis_tasks/lua/{script}.lua" in names
    assert "redis_tasks/lua/includes/common.lua" in names
    assert "redis_tasks/py.typed" in names
    assert f"{STEM}.dist-info/licenses/LICENSE" in names
    metadata = zipfile.ZipFile(wheel).read(f"{STEM}.dist-info/METADATA").decode()
    assert f"Name: {DISTRIBUTION}\n" in metadata
    assert "License-Expression: MIT" in metadata
    with tarfile.open(sdist) as archive:
        packed = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    assert {"LICENSE", "CHANGELOG.md", "README.md", "pyproject.toml", "lua/create.lua"} <= packed

    # A fresh virtualenv, the wheel and its mcp extra only (no dev, no embedded Redis).
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python, command = venv / "bin" / "python", venv / "bin" / "redis-tasks"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", f"{wheel}[mcp]"], check=True, timeout=900
    )
    smoke = tmp_path / "smoke.py"
    smoke.write_text(SMOKE.format(count=len(SPECS)))

    def run(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        # Out of the source tree, so nothing but the installed package is found.
        env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PYTHONPATH")}
        return subprocess.run(
            argv, cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=env
        )

    done = run(str(python), str(smoke), redis_server.url, prefix)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "smoke working completed {'ok': True}"
    version = run(str(command), "--version")
    assert version.stdout.strip() == f"redis-tasks {__version__} ({DISTRIBUTION})"
    checked = run(str(command), "check", "--redis-url", redis_server.url, "--prefix", prefix)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    demo = run(str(command), "demo", "--redis-url", redis_server.url, timeout=180)
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert "demo finished" in demo.stdout
